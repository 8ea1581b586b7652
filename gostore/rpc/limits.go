// limits.go defines what one peer may ask of a Server: the largest
// request, the connections and the requests in flight from one address,
// and the Admit hook through which the master checks requests against its
// own limits.

package rpc

import (
	"bufio"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/gostore/gostore/gostore/wire"
)

// ServerOptions configure a Server. The zero value is NewServer's: no
// limit but wire.MaxBody.
type ServerOptions struct {
	// Observe, when set, is told about every answered call (for metrics).
	Observe Observer

	// Spin is how long a connection's read of the next request polls the
	// socket, after an answer, before it parks (blockconn.Polled); 0 never
	// polls.
	Spin time.Duration

	// MaxBody bounds a request body (N 0: wire.MaxBody). A request over
	// it but within max(N, wire.MaxBody) is read, dropped and answered
	// INVALID_PARAMS with a message naming the limit; the connection goes
	// on serving. A header announcing more than that is garbage (a peer
	// out of step with the protocol, or not speaking it): the connection
	// is closed, as it is for any frame that cannot be read.
	MaxBody Limit

	// ConnsPerIP bounds the connections from one remote IP address (N 0:
	// none). Per address, because a connection says nothing of its client
	// before its first request; the clients of one host share the bound.
	// A connection past it is not served: its first request is answered
	// RPC_FAIL with a message naming the limit, then it is closed.
	ConnsPerIP Limit

	// InflightPerIP bounds the requests from one remote IP address that
	// are read and running at once (N 0: none). A connection runs one
	// request at a time, so this is the bound across a host's connections.
	// A request past it waits for a slot before its body is read, and the
	// connection's own pending answers are flushed first: backpressure,
	// not a refusal. A refusal would turn a client's burst into errors it
	// must retry; waiting turns it into latency, as TCP already does for
	// a peer that pipelines on one connection, and bounds the memory a
	// host's requests hold to N bodies. No handler waits for another
	// request, so a wait always ends.
	InflightPerIP Limit

	// Admit, when set, vets each request a typed handler (HandleFunc)
	// decoded, before the handler runs: the master's limits on keys and
	// sizes. Its error answers the request (a *wire.Error: its code and
	// message) and is logged with the peer, one line per 10 s at most
	// (refusalLogEvery).
	Admit func(req any) error
}

// Limit is a bound and the setting an operator changes to move it (the
// master's flag), which refusals name.
type Limit struct {
	N    int
	Flag string
}

// String names the limit as an operator sets it: --flag=N (N alone
// without a flag).
func (l Limit) String() string {
	if l.Flag == "" {
		return strconv.Itoa(l.N)
	}
	return fmt.Sprintf("--%s=%d", l.Flag, l.N)
}

// refusalLogEvery spaces the log lines of one kind of refusal: a client
// that keeps breaking a limit gets one line, not one per request.
const refusalLogEvery = 10 * time.Second

// maxConnRefusalBody bounds the first request a refused connection may
// send for its answer (a larger one is closed unanswered): a client's
// first request is a small one.
const maxConnRefusalBody = 64 << 10

// refusedConnDeadline bounds how long a refused connection may take to
// send the request it is answered.
const refusedConnDeadline = 5 * time.Second

// refusal marks an Admit error, for dispatch to log.
type refusal struct{ err error }

func (r *refusal) Error() string { return r.err.Error() }
func (r *refusal) Unwrap() error { return r.err }

// peer is the state of one remote address; Server.mu guards conns.
type peer struct {
	key   string
	conns int
	slots chan struct{} // one token per request in flight; nil without InflightPerIP
}

// peerKey is the address a peer's limits are counted under: its IP
// (whatever its port), else the address as the listener reports it.
func peerKey(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	return a.String()
}

// admitConnLocked counts c under its address and returns that address's
// state; false when the address is at ConnsPerIP (c is then not counted).
func (s *Server) admitConnLocked(c net.Conn) (*peer, bool) {
	key := peerKey(c.RemoteAddr())
	p := s.mu.peers[key]
	if p == nil {
		p = &peer{key: key}
		if n := s.opt.InflightPerIP.N; n > 0 {
			p.slots = make(chan struct{}, n)
		}
		s.mu.peers[key] = p
	}
	if n := s.opt.ConnsPerIP.N; n > 0 && p.conns >= n {
		return p, false
	}
	p.conns++
	return p, true
}

// leaveLocked uncounts a served connection of p; an address with none
// left is forgotten.
func (s *Server) leaveLocked(p *peer) {
	p.conns--
	if p.conns == 0 {
		delete(s.mu.peers, p.key)
	}
}

// refuseConn answers the first request of a connection past ConnsPerIP
// with RPC_FAIL naming the limit, then closes it. An answer, rather than a
// bare close, tells the client why in its own error; the request is not
// run.
func (s *Server) refuseConn(raw net.Conn) {
	defer func() {
		raw.Close()
		s.mu.Lock()
		delete(s.mu.conns, raw)
		s.mu.Unlock()
		s.wg.Done()
	}()
	addr, key, lim := raw.RemoteAddr().String(), peerKey(raw.RemoteAddr()), s.opt.ConnsPerIP
	s.connLog.Fail(time.Now(), func(others int) {
		s.log.Warn("rpc: connection refused: its address is at its limit of connections", "peer", addr,
			"limit", lim.String(), "refusals_not_logged", others)
	})
	// The peer hears why only once it has authenticated, as on any other
	// connection.
	c, ok := s.auth.Load().Accept(raw, s.log, "rpc")
	if !ok {
		return
	}
	c.SetDeadline(time.Now().Add(refusedConnDeadline))
	r := bufio.NewReader(c)
	h, err := wire.ReadHeader(r)
	if err != nil || h.Len > maxConnRefusalBody || s.handler(h.Op) == nil {
		return
	}
	if _, err := r.Discard(int(h.Len)); err != nil {
		return
	}
	msg := fmt.Sprintf("at most %d connections from one address (%s), and %s has them: this one is closed",
		lim.N, lim, key)
	out, err := encodeResponse(nil, h, wire.ErrRPCFail, msg)
	if err == nil {
		c.Write(out)
	}
}

// maxBody is the largest request body this server reads.
func (s *Server) maxBody() int64 {
	if s.opt.MaxBody.N > 0 {
		return int64(s.opt.MaxBody.N)
	}
	return wire.MaxBody
}

// refuseBody drops a body over maxBody from r and returns the answer:
// INVALID_PARAMS naming the limit. An error (a header announcing more than
// any limit, an opcode not served, a body cut short) closes the
// connection.
func (s *Server) refuseBody(r *bufio.Reader, h wire.Header, addr string) (any, wire.Code, error) {
	limit := s.maxBody()
	if int64(h.Len) > max(limit, wire.MaxBody) {
		return nil, 0, fmt.Errorf("frame body of %d bytes exceeds the %d limit", h.Len, limit)
	}
	if s.handler(h.Op) == nil {
		return nil, 0, fmt.Errorf("unknown opcode %d", uint16(h.Op))
	}
	if _, err := r.Discard(int(h.Len)); err != nil {
		return nil, 0, fmt.Errorf("truncated frame body: %w", err)
	}
	lim := s.opt.MaxBody
	lim.N = int(limit)
	s.bodyLog.Fail(time.Now(), func(others int) {
		s.log.Warn("rpc: request refused: body over the limit", "peer", addr, "op", h.Op.String(),
			"bytes", h.Len, "limit", lim.String(), "refusals_not_logged", others)
	})
	return fmt.Sprintf("request body of %d bytes exceeds %s", h.Len, lim), wire.ErrInvalidParams, nil
}

// enter takes one of p's request slots, waiting for one when all are
// taken (after flushing w, so that a peer reading its answers is never
// kept waiting by its own requests); false when the server closes
// meanwhile.
func (s *Server) enter(p *peer, w *bufio.Writer, addr string) bool {
	if p.slots == nil {
		return true
	}
	select {
	case p.slots <- struct{}{}:
		return true
	default:
	}
	w.Flush()
	lim := s.opt.InflightPerIP
	s.waitLog.Fail(time.Now(), func(others int) {
		s.log.Warn("rpc: requests wait: their address is at its limit of requests in flight", "peer", addr,
			"limit", lim.String(), "waits_not_logged", others)
	})
	select {
	case p.slots <- struct{}{}:
		return true
	case <-s.closing:
		return false
	}
}

// leave gives back the slot enter took.
func (p *peer) leave() {
	if p.slots != nil {
		<-p.slots
	}
}
