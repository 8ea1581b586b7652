// tcp_server.go defines Server, which serves one segment's bytes to peers
// over TCP, plus the data-plane wire format shared with the client side.

package transfer

import (
	"bufio"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gostore/gostore/gostore/auth"
	"github.com/gostore/gostore/gostore/grant"
	"github.com/gostore/gostore/gostore/internal/blockconn"
	"github.com/gostore/gostore/gostore/internal/burstlog"
	"github.com/gostore/gostore/gostore/wire"
)

const (
	// Requests without a grant: refused (the protocol's first version;
	// kept so that an older peer gets an answer, not a closed stream).
	opWrite = 1
	opRead  = 2
	// Requests followed by a grant (gostore/grant) for their range.
	opGrantedWrite = 3
	opGrantedRead  = 4

	reqHdrSize  = 1 + 8 + 8 + 8 // op, id, offset, length
	respHdrSize = 8 + 4 + 8     // id, status, length

	sockBufSize = 4 << 20 // SO_SNDBUF / SO_RCVBUF on every data connection
	ioBufSize   = 64 << 10

	// A write whose range is bad but whose payload is at most this long is
	// drained and answered with an error; a longer one closes the connection.
	maxDiscard = 64 << 20
	// Read payloads up to this size are copied behind their header so that a
	// pipelined batch of small reads leaves in one write.
	smallRead = 16 << 10
)

var le = binary.LittleEndian

// tuneConn sets the socket options every data connection uses.
func tuneConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
		_ = tc.SetReadBuffer(sockBufSize)
		_ = tc.SetWriteBuffer(sockBufSize)
	}
}

// inRange reports whether [off, off+n) lies within a segment of size bytes,
// without overflowing.
func inRange(off, n, size uint64) bool { return off <= size && n <= size-off }

// Server answers transfer requests against one segment: host memory it
// reads and writes in place, or device memory (NewDeviceServer) it copies
// through a buffer per connection. It serves only requests that carry a
// grant, made under its key, for their segment, range and direction (a
// write grant reads its range back too).
type Server struct {
	ln  net.Listener
	seg []byte
	dev DeviceMemory // instead of seg for a GPU segment
	log *slog.Logger
	// auth, when set, is the handshake every connection passes before
	// its first request (SetAuth).
	auth atomic.Pointer[auth.Auth]

	secret []byte     // the grant key (grant.KeySize random bytes), never changed
	key    *grant.Key // secret, ready to verify and mint
	// segID is the segment's id at the master, which grants must name;
	// 0 (not mounted yet, or remounting) accepts any.
	segID atomic.Uint64
	// refused rate-limits the log of refused requests: the first of a
	// burst is logged, the rest counted until a request is served at
	// least refusedQuiet after the burst began (burstAt, unix ns).
	refused burstlog.Log
	burstAt atomic.Int64

	// spin is how long a connection polls for the next request after an
	// answer (blockconn.Polled), in ns; 0 never polls.
	spin atomic.Int64

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup // connection handlers
}

// SetSpin sets how long each connection accepted from now on polls for its
// peer's next request after an answer before it sleeps (default
// blockconn.DefaultServerSpin; 0 or less never polls).
func (s *Server) SetSpin(d time.Duration) { s.spin.Store(int64(d)) }

// writeBuffers writes bufs to c with one writev where c allows it (a TCP
// connection, polled or not).
func writeBuffers(c net.Conn, bufs *net.Buffers) (int64, error) {
	if p, ok := c.(*blockconn.Polled); ok {
		return p.WriteBuffers(bufs)
	}
	return bufs.WriteTo(c)
}

// refusedQuiet is the shortest burst of refused requests: at most one
// line a second whatever a peer sends.
const refusedQuiet = time.Second

// NewServer returns a server for seg on ln, with a new random grant key;
// call Serve to accept. A nil log means slog.Default(). seg must stay
// mapped until Close returns.
func NewServer(ln net.Listener, seg []byte, log *slog.Logger) *Server {
	if log == nil {
		log = slog.Default()
	}
	// Accepted sockets inherit the listener's buffer sizes, set before the
	// handshake picks the window scale.
	if sc, ok := ln.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			_ = setSockBufs("", "", rc)
		}
	}
	secret := make([]byte, grant.KeySize)
	rand.Read(secret) // never fails (crypto/rand panics rather than return weak bytes)
	key, _ := grant.NewKey(secret)
	s := &Server{ln: ln, seg: seg, log: log, conns: map[net.Conn]struct{}{}, secret: secret, key: key}
	s.SetSpin(blockconn.DefaultServerSpin)
	return s
}

// GrantKey returns the server's grant key (a copy): the owner sends it to
// the master at mount, and nobody else may see it.
func (s *Server) GrantKey() []byte { return append([]byte(nil), s.secret...) }

// SetSegID tells the server its segment's id at the master, which every
// grant must name from now on; 0 accepts any (while mounting: a remount
// may bring a new id, which grants name before the owner learns it).
func (s *Server) SetSegID(id uint64) { s.segID.Store(id) }

// Mint returns a grant, under the server's key, to read (write false) or
// write length bytes of its segment from off until expiry: how the owner
// invites a peer into its own memory (the SSD tier's staging buffer).
func (s *Server) Mint(off, length uint64, write bool, expiry time.Time) []byte {
	return grant.Mint(nil, s.key, grant.Fields{SegID: s.segID.Load(), Offset: off, Length: length, Write: write,
		Expiry: expiry.UnixNano()})
}

// NewDeviceServer returns a server for a GPU segment: payloads pass
// through a host buffer of deviceChunk bytes per connection.
func NewDeviceServer(ln net.Listener, dev DeviceMemory, log *slog.Logger) *Server {
	s := NewServer(ln, nil, log)
	s.dev = dev
	return s
}

// deviceChunk is the most a device segment's server stages at once.
const deviceChunk = 1 << 20

func (s *Server) size() uint64 {
	if s.dev != nil {
		return s.dev.Size()
	}
	return uint64(len(s.seg))
}

// writeDevice reads n payload bytes from r into the device segment at off.
func (s *Server) writeDevice(r io.Reader, off, n uint64, stage []byte) error {
	for n > 0 {
		k := min(n, uint64(len(stage)))
		if _, err := io.ReadFull(r, stage[:k]); err != nil {
			return err
		}
		if err := s.dev.CopyFrom(off, stage[:k]); err != nil {
			return err
		}
		off, n = off+k, n-k
	}
	return nil
}

// readDevice sends n bytes of the device segment at off after the pending
// response bytes out.
func (s *Server) readDevice(w io.Writer, out []byte, off, n uint64, stage []byte) error {
	if _, err := w.Write(out); err != nil {
		return err
	}
	for n > 0 {
		k := min(n, uint64(len(stage)))
		if err := s.dev.CopyTo(stage[:k], off); err != nil {
			return err
		}
		if _, err := w.Write(stage[:k]); err != nil {
			return err
		}
		off, n = off+k, n-k
	}
	return nil
}

// SetAuth makes every connection accepted from now on pass a's handshake
// before its first request; one that fails it is logged and closed, and
// has touched nothing.
func (s *Server) SetAuth(a *auth.Auth) { s.auth.Store(a) }

// Addr returns the listener's address.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Serve accepts connections until Close; it returns nil after Close.
func (s *Server) Serve() error {
	backoff := time.Duration(0)
	for {
		c, err := s.ln.Accept()
		if err != nil {
			if s.isClosed() || errors.Is(err, net.ErrClosed) {
				return nil
			}
			// EMFILE and friends: wait and go on, like net/http.
			if backoff == 0 {
				backoff = 5 * time.Millisecond
			} else if backoff < time.Second {
				backoff *= 2
			}
			s.log.Warn("transfer: accept failed", "err", err, "retry_in", backoff)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return nil
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.handle(c)
	}
}

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// Close stops accepting, closes every connection and waits for their
// handlers to return. It is idempotent.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.wg.Wait()
		return nil
	}
	s.closed = true
	conns := make([]net.Conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	err := s.ln.Close()
	for _, c := range conns {
		c.Close()
	}
	s.wg.Wait()
	return err
}

func putRespHdr(out []byte, id uint64, status wire.Code, n uint64) []byte {
	var h [respHdrSize]byte
	le.PutUint64(h[0:], id)
	le.PutUint32(h[8:], uint32(int32(status)))
	le.PutUint64(h[12:], n)
	return append(out, h[:]...)
}

// handle serves one connection until it fails, the peer leaves or it sends
// something that is not a request.
func (s *Server) handle(raw net.Conn) {
	defer s.wg.Done()
	defer func() {
		raw.Close()
		s.mu.Lock()
		delete(s.conns, raw)
		s.mu.Unlock()
	}()
	tuneConn(raw)
	remote := raw.RemoteAddr().String()
	c, ok := s.auth.Load().Accept(blockconn.Poll(raw, time.Duration(s.spin.Load())), s.log, "transfer") // c: the authenticated connection
	if !ok {
		return
	}
	sc := s.newServedConn(c, remote)
	for sc.serveOne() {
	}
}

// servedConn is a connection Server.handle serves: its reader, the
// answers not yet sent, its segment's staging buffer and the last grant it
// presented. Only its handler's goroutine touches it; it takes no lock.
type servedConn struct {
	s      *Server
	c      net.Conn // authenticated
	remote string
	br     *bufio.Reader
	out    []byte // response headers and small read payloads not yet sent
	size   uint64 // the segment's
	stage  []byte // device segments only
	seen   grantCache
	hdr    [reqHdrSize]byte
	tok    [grant.Size]byte
}

func (s *Server) newServedConn(c net.Conn, remote string) *servedConn {
	sc := &servedConn{s: s, c: c, remote: remote, br: bufio.NewReaderSize(c, ioBufSize),
		out: make([]byte, 0, ioBufSize), size: s.size()}
	if s.dev != nil {
		sc.stage = make([]byte, deviceChunk)
	}
	return sc
}

// dataReq is a request as its header and grant read it.
type dataReq struct {
	id, off, n uint64
	write      bool
	token      []byte // nil: an ungranted request
}

// flush sends the answers not yet sent.
func (sc *servedConn) flush() error {
	if len(sc.out) == 0 {
		return nil
	}
	_, err := sc.c.Write(sc.out)
	sc.out = sc.out[:0]
	return err
}

// serveOne reads one request and answers it, or queues its answer behind
// the others; false closes the connection.
func (sc *servedConn) serveOne() bool {
	// Answer what is done before any read that may block.
	if sc.br.Buffered() < reqHdrSize+grant.Size && sc.flush() != nil {
		return false
	}
	req, ok := sc.readRequest()
	if !ok {
		return false
	}
	if status := sc.check(req); status != wire.OK {
		return sc.refuse(req, status)
	}
	if req.write {
		ok = sc.write(req)
	} else {
		ok = sc.read(req)
	}
	return ok && (len(sc.out) < ioBufSize/2 || sc.flush() == nil)
}

// readRequest reads a request's header and its grant; false when the
// stream ends, is cut short or holds something else.
func (sc *servedConn) readRequest() (dataReq, bool) {
	s, hdr := sc.s, sc.hdr[:]
	if _, err := io.ReadFull(sc.br, hdr); err != nil {
		if err == io.ErrUnexpectedEOF {
			s.log.Warn("transfer: truncated request header, closing connection", "remote", sc.remote)
		}
		return dataReq{}, false
	}
	op := hdr[0]
	req := dataReq{id: le.Uint64(hdr[1:]), off: le.Uint64(hdr[9:]), n: le.Uint64(hdr[17:])}
	switch op {
	case opWrite, opRead:
		req.write = op == opWrite
	case opGrantedWrite, opGrantedRead:
		req.write = op == opGrantedWrite
		if _, err := io.ReadFull(sc.br, sc.tok[:]); err != nil {
			if err == io.ErrUnexpectedEOF {
				s.log.Warn("transfer: truncated grant, closing connection", "remote", sc.remote)
			}
			return dataReq{}, false
		}
		req.token = sc.tok[:]
	default:
		s.log.Warn("transfer: unknown op, closing connection", "remote", sc.remote, "op", op)
		_ = sc.flush()
		return dataReq{}, false
	}
	return req, true
}

// check is wire.OK when req's range lies in the segment and its grant
// allows it; a refusal is logged (the first of a burst), and a grant
// served after a burst ends it.
func (sc *servedConn) check(req dataReq) wire.Code {
	s := sc.s
	if !inRange(req.off, req.n, sc.size) {
		return wire.ErrInvalidParams
	}
	if err := s.allow(&sc.seen, req.token, req.off, req.n, req.write); err != nil {
		s.noteRefused(sc.remote, req.write, req.off, req.n, err)
		return wire.CodeOf(err)
	}
	if s.refused.On() {
		s.endRefusals()
	}
	return wire.OK
}

// refuse answers req with status. Nothing of the segment is touched: a
// write's payload is drained (or the connection closed, for one too long
// to).
func (sc *servedConn) refuse(req dataReq, status wire.Code) bool {
	sc.out = putRespHdr(sc.out, req.id, status, 0)
	if !req.write {
		return true
	}
	if req.n > maxDiscard {
		_ = sc.flush()
		sc.s.log.Warn("transfer: refused write with oversized payload, closing connection",
			"remote", sc.remote, "offset", req.off, "length", req.n, "segment", sc.size)
		return false
	}
	_, err := io.CopyN(io.Discard, sc.br, int64(req.n))
	return err == nil
}

// write reads req's payload into the segment and queues its answer.
func (sc *servedConn) write(req dataReq) bool {
	s, off, n := sc.s, req.off, req.n
	if uint64(sc.br.Buffered()) < n && sc.flush() != nil {
		return false
	}
	if s.dev != nil {
		// A failed copy leaves part of the payload unread: the
		// stream is out of step, so the connection closes.
		if err := s.writeDevice(sc.br, off, n, sc.stage); err != nil {
			s.log.Warn("transfer: write into the device segment failed, closing connection", "remote", sc.remote, "err", err)
			return false
		}
	} else {
		// Straight into the segment: bufio hands large reads to the socket.
		if _, err := io.ReadFull(sc.br, s.seg[off:off+n]); err != nil {
			s.log.Debug("transfer: write payload cut short", "remote", sc.remote, "err", err)
			return false
		}
	}
	sc.out = putRespHdr(sc.out, req.id, wire.OK, 0)
	return true
}

// read answers req with its range of the segment: a small one queued
// behind the pending answers, a larger one sent with them at once.
func (sc *servedConn) read(req dataReq) bool {
	s, off, n := sc.s, req.off, req.n
	sc.out = putRespHdr(sc.out, req.id, wire.OK, n)
	switch {
	case s.dev != nil:
		err := s.readDevice(sc.c, sc.out, off, n, sc.stage)
		sc.out = sc.out[:0]
		if err != nil {
			s.log.Warn("transfer: read from the device segment failed, closing connection", "remote", sc.remote, "err", err)
			return false
		}
	case n <= smallRead:
		sc.out = append(sc.out, s.seg[off:off+n]...)
	default:
		// Pending headers and the payload in one writev, straight from the segment.
		bufs := net.Buffers{sc.out, s.seg[off : off+n]}
		_, err := writeBuffers(sc.c, &bufs)
		sc.out = sc.out[:0]
		if err != nil {
			return false
		}
	}
	return true
}

// grantCache is the last authentic grant a connection presented: the
// slices of one op carry the same token, and only the first pays for its
// MAC. (An authentic token that allows nothing is cached too: it is still
// the key's own.)
type grantCache struct {
	tok [grant.Size]byte
	f   grant.Fields
	ok  bool
}

// allow checks that token grants the request [off, off+n) in its
// direction (grant.Allows: a write grant reads too), now; nil when it
// does.
func (s *Server) allow(seen *grantCache, token []byte, off, n uint64, write bool) error {
	if len(token) == 0 {
		return grant.ErrMissing
	}
	r := grant.Request{SegID: s.segID.Load(), Offset: off, N: n, Write: write}
	now := time.Now().UnixNano()
	if seen.ok && [grant.Size]byte(token) == seen.tok {
		return grant.Allows(seen.f, r, now)
	}
	f, err := grant.Authentic(s.key, token)
	if err != nil {
		return err
	}
	seen.tok, seen.f, seen.ok = [grant.Size]byte(token), f, true
	return grant.Allows(f, r, now)
}

// noteRefused logs a refused request: the first of a burst, by its remote
// and range; the others are counted.
func (s *Server) noteRefused(remote string, write bool, off, n uint64, why error) {
	s.refused.Fail(1, func(int) {
		s.burstAt.Store(time.Now().UnixNano())
		dir := "read"
		if write {
			dir = "write"
		}
		s.log.Warn("transfer: request refused: no valid grant for the range; further refusals are counted",
			"remote", remote, "op", dir, "offset", off, "length", n, "segment", s.segID.Load(), "why", why)
	})
}

// endRefusals ends a burst of refusals that lasted refusedQuiet, reporting
// how many went unlogged.
func (s *Server) endRefusals() {
	if time.Now().UnixNano()-s.burstAt.Load() < int64(refusedQuiet) {
		return
	}
	s.refused.OK(func(more int) {
		s.log.Warn("transfer: requests refused without a valid grant since the last logged one", "count", more)
	})
}
