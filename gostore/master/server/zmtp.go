// zmtp.go: the ZeroMQ side of the KV events publisher, zmq4's ZMTP
// handshake (zmq4.Open) over listeners of our own, then frames read and
// written here: the PUB socket's subscribers and the replay endpoint's
// peers. zmq4's own sockets read a frame of whatever size its header
// claims into one allocation, so a peer could stop the master with nine
// bytes; here every connection reads through zmtpConn's bounds, each
// write has its own deadline, and each subscriber has its own bounded
// queue (messages and bytes), so a slow one loses its own batches
// (counted) and holds up no other.

package server

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"
)

const (
	// zmtpMaxFrame bounds a frame a peer sends us, zmtpMaxFrames the
	// frames of one message: subscriptions, replay requests and the
	// handshake's commands are a frame or two of tens of bytes.
	zmtpMaxFrame  = 4 << 10
	zmtpMaxFrames = 16
)

// zmtpWriteTimeout: a peer that takes none of a write's bytes this long is
// dropped (each write to the socket gets its own deadline). A variable for
// the tests.
var zmtpWriteTimeout = 10 * time.Second

// zmtpMaxSubscribers bounds the PUB socket's connections, those in their
// handshake included. A variable for the tests.
var zmtpMaxSubscribers int32 = 256

// zmtpSubBytes bounds the payload bytes queued for one subscriber, beside
// its count of messages: every subscriber's queue holds the same
// messages (one payload shared by all), the newest ones, so this bounds
// what slow subscribers pin in all, however many (large keys make large
// batches). A variable for the tests.
var zmtpSubBytes int64 = 32 << 20

// zmtpConn is a peer's connection as zmq4.Open sees it: reads refuse a
// frame longer than zmtpMaxFrame before zmq4 allocates it, and writes,
// once buffered() is called, collect in a buffer flush sends whole.
type zmtpConn struct {
	net.Conn
	// Reading: the ZMTP greeting (64 bytes), then frames of a flags byte
	// and a 1- or 8-byte size.
	greet  int    // greeting bytes still to pass
	hdr    []byte // the frame header read so far
	body   uint64 // body bytes still to pass
	frames int    // frames of the message being read

	wmu sync.Mutex
	bw  *bufio.Writer // nil: writes go straight to the connection
}

func (c *zmtpConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	for i := 0; i < n; {
		switch {
		case c.greet > 0:
			k := min(c.greet, n-i)
			c.greet -= k
			i += k
		case c.body > 0:
			k := int(min(c.body, uint64(n-i)))
			c.body -= uint64(k)
			i += k
		default:
			c.hdr = append(c.hdr, p[i])
			i++
			long := c.hdr[0]&0x02 != 0
			if (long && len(c.hdr) < 9) || (!long && len(c.hdr) < 2) {
				continue
			}
			size := uint64(c.hdr[1])
			if long {
				size = binary.BigEndian.Uint64(c.hdr[1:9])
			}
			more := c.hdr[0]&0x01 != 0
			c.hdr = c.hdr[:0]
			if size > zmtpMaxFrame {
				return 0, fmt.Errorf("a frame of %d bytes: at most %d here", size, zmtpMaxFrame)
			}
			if c.frames++; c.frames > zmtpMaxFrames {
				return 0, fmt.Errorf("a message of more than %d frames", zmtpMaxFrames)
			}
			if !more {
				c.frames = 0
			}
			c.body = size
		}
	}
	return n, err
}

func (c *zmtpConn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.bw == nil {
		return deadlineWriter{c.Conn}.Write(p)
	}
	return c.bw.Write(p)
}

// deadlineWriter gives every write to the socket a deadline of its own:
// the buffer's flushes and its overflow (a message larger than the
// buffer goes straight through), before the first flush as after an idle
// while.
type deadlineWriter struct{ net.Conn }

func (w deadlineWriter) Write(p []byte) (int, error) {
	w.SetWriteDeadline(time.Now().Add(zmtpWriteTimeout))
	return w.Conn.Write(p)
}

// buffered turns write buffering on (after the handshake, whose writes
// must reach the peer before its answer is read).
func (c *zmtpConn) buffered() {
	c.wmu.Lock()
	c.bw = bufio.NewWriterSize(deadlineWriter{c.Conn}, 64<<10)
	c.wmu.Unlock()
}

func (c *zmtpConn) flush() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.bw == nil {
		return nil
	}
	return c.bw.Flush()
}

// writeMsg appends frames as one ZMTP message (a command when cmd) to the
// write buffer, whole under wmu: the subscriber's writer and a PONG to
// the peer's PING, from its reader, never interleave. (zmq4's SendMsg
// writes a frame in two writes, and its RecvMsg answers a PING itself,
// unflushed and with no context, so neither is used after the
// handshake.)
func (c *zmtpConn) writeMsg(cmd bool, frames ...[]byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	for i, f := range frames {
		flag := byte(0)
		if i < len(frames)-1 {
			flag |= 0x01 // more
		}
		if cmd {
			flag |= 0x04
		}
		var hdr []byte
		if len(f) > 255 {
			hdr = binary.BigEndian.AppendUint64([]byte{flag | 0x02}, uint64(len(f)))
		} else {
			hdr = []byte{flag, byte(len(f))}
		}
		if _, err := c.bw.Write(hdr); err != nil {
			return err
		}
		if _, err := c.bw.Write(f); err != nil {
			return err
		}
	}
	return nil
}

// readMsg reads the peer's next message from r (a reader of c, so every
// frame passed zmtpConn.Read's bounds before it is allocated here). A
// PING command is answered at once with its PONG, flushed; other commands
// are skipped. It returns the next message that is not a command.
func (c *zmtpConn) readMsg(r *bufio.Reader) ([][]byte, error) {
	var frames [][]byte
	for {
		flag, err := r.ReadByte()
		if err != nil {
			return nil, err
		}
		var size uint64
		if flag&0x02 != 0 {
			var b [8]byte
			if _, err := io.ReadFull(r, b[:]); err != nil {
				return nil, err
			}
			size = binary.BigEndian.Uint64(b[:])
		} else {
			b, err := r.ReadByte()
			if err != nil {
				return nil, err
			}
			size = uint64(b)
		}
		body := make([]byte, size) // at most zmtpMaxFrame: zmtpConn.Read refused more
		if _, err := io.ReadFull(r, body); err != nil {
			return nil, err
		}
		if flag&0x04 != 0 {
			// A command: name length, name, data. PING's data is a TTL
			// (2 bytes) and a context the PONG echoes.
			if len(body) >= 1+4+2 && body[0] == 4 && string(body[1:5]) == "PING" {
				if err := c.writeMsg(true, append([]byte("\x04PONG"), body[7:]...)); err != nil {
					return nil, err
				}
				if err := c.flush(); err != nil {
					return nil, err
				}
			}
			continue
		}
		frames = append(frames, body)
		if flag&0x01 == 0 {
			return frames, nil
		}
	}
}

// zmtpOpen does the ZMTP handshake as a socket of type typ (the server
// side) on c, within zmtpWriteTimeout; then writes are buffered
// (writeMsg, flush) and reads go through readMsg.
func zmtpOpen(c net.Conn, typ zmq4.SocketType) (*zmtpConn, error) {
	zc := &zmtpConn{Conn: c, greet: 64}
	c.SetDeadline(time.Now().Add(zmtpWriteTimeout))
	if _, err := zmq4.Open(zc, zmtpNull{}, typ, nil, true, nil); err != nil {
		return nil, err
	}
	c.SetDeadline(time.Time{})
	zc.buffered()
	return zc, nil
}

// zmtpNull is ZMTP's NULL mechanism (no authentication), which zmq4 does
// not export for a connection opened by hand: each side sends READY with
// its metadata (socket type, identity) and reads the other's.
type zmtpNull struct{}

func (zmtpNull) Type() zmq4.SecurityType { return zmq4.NullSecurity }

func (zmtpNull) Handshake(c *zmq4.Conn, server bool) error {
	meta, err := c.Meta.MarshalZMTP()
	if err != nil {
		return err
	}
	if err := c.SendCmd(zmq4.CmdReady, meta); err != nil {
		return err
	}
	cmd, err := c.RecvCmd()
	if err != nil {
		return err
	}
	if cmd.Name != zmq4.CmdReady {
		return fmt.Errorf("peer sent %q, want READY", cmd.Name)
	}
	return c.Peer.Meta.UnmarshalZMTP(cmd.Body)
}

func (zmtpNull) Encrypt(w io.Writer, data []byte) (int, error) { return w.Write(data) }
func (zmtpNull) Decrypt(w io.Writer, data []byte) (int, error) { return w.Write(data) }

// zmtpPub is a PUB socket: every subscriber gets every message (the
// topic is always empty: subscriptions are read and not filtered on),
// through a queue of its own of at most queue messages.
type zmtpPub struct {
	ln    net.Listener
	log   *slog.Logger
	queue int

	mu     sync.Mutex
	subs   map[*zmtpSub]struct{}
	closed bool
	wg     sync.WaitGroup

	// lost: messages a subscriber's full queue refused.
	lost atomic.Uint64
	// conns: connections served, from before their handshake on.
	conns atomic.Int32
}

type zmtpSub struct {
	c      *zmtpConn
	out    chan zmq4.Msg
	queued atomic.Int64 // payload bytes in out
}

func msgBytes(m zmq4.Msg) int64 {
	n := 0
	for _, f := range m.Frames {
		n += len(f)
	}
	return int64(n)
}

func newZMTPPub(ln net.Listener, queue int, log *slog.Logger) *zmtpPub {
	p := &zmtpPub{ln: ln, log: log, queue: queue, subs: map[*zmtpSub]struct{}{}}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.accept()
	}()
	return p
}

func (p *zmtpPub) accept() {
	acceptCapped(p.ln, p.isClosed, &p.conns, &p.wg, p.log, "subscriber", p.serve)
}

// acceptCapped accepts connections on ln until closed() says ln was
// closed on purpose, and runs serve for each on a goroutine of its own
// (counted in wg), at most zmtpMaxSubscribers at once in live: one more
// is logged and closed. A connection counts from its accept, before any
// handshake, so a peer that opens connections and never finishes one
// holds at most that many. what names the connections in the log.
func acceptCapped(ln net.Listener, closed func() bool, live *atomic.Int32, wg *sync.WaitGroup, log *slog.Logger, what string, serve func(net.Conn)) {
	for {
		c, err := ln.Accept()
		if err != nil {
			if closed() {
				return
			}
			log.Warn("kv events: accept failed", "connection", what, "err", err)
			time.Sleep(10 * time.Millisecond) // out of descriptors: do not spin
			continue
		}
		if live.Add(1) > zmtpMaxSubscribers {
			live.Add(-1)
			log.Warn("kv events: connection refused: too many at once", "connection", what, "peer", c.RemoteAddr(), "max", zmtpMaxSubscribers)
			c.Close()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer live.Add(-1)
			serve(c)
		}()
	}
}

func (p *zmtpPub) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

// serve runs one subscriber: the handshake, then a writer of its queue
// while this goroutine reads (and drops) what it sends.
func (p *zmtpPub) serve(c net.Conn) {
	defer c.Close()
	zc, err := zmtpOpen(c, zmq4.Pub)
	if err != nil {
		p.log.Warn("kv events: subscriber handshake failed", "peer", c.RemoteAddr(), "err", err)
		return
	}
	s := &zmtpSub{c: zc, out: make(chan zmq4.Msg, p.queue)}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.subs[s] = struct{}{}
	p.mu.Unlock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.write()
	}()
	r := bufio.NewReaderSize(zc, 512)
	for {
		if _, err := zc.readMsg(r); err != nil { // subscriptions: not filtered on
			break
		}
	}
	p.mu.Lock()
	delete(p.subs, s)
	p.mu.Unlock()
	close(s.out)
	<-done
}

// write sends s's queue, flushing whenever it is empty. On an error it
// closes the connection (the reader then ends and closes the queue) and
// drops what is left.
func (s *zmtpSub) write() {
	for m := range s.out {
		s.queued.Add(-msgBytes(m))
		err := s.c.writeMsg(false, m.Frames...) // each write to the socket has its deadline (deadlineWriter)
		if err == nil && len(s.out) == 0 {
			err = s.c.flush()
		}
		if err != nil {
			s.c.Close()
			for range s.out {
			}
			return
		}
	}
}

// send queues m for every subscriber; one whose queue is full (in
// messages, or in bytes: zmtpSubBytes) loses it.
func (p *zmtpPub) send(m zmq4.Msg) {
	size := msgBytes(m)
	p.mu.Lock()
	defer p.mu.Unlock()
	for s := range p.subs {
		if s.queued.Add(size) > zmtpSubBytes {
			s.queued.Add(-size)
			p.lost.Add(1)
			continue
		}
		select {
		case s.out <- m:
		default:
			s.queued.Add(-size)
			p.lost.Add(1)
		}
	}
}

// close stops accepting, ends every subscriber's connection once its
// queue is written, at most a second from now, and waits for them.
func (p *zmtpPub) close() {
	p.mu.Lock()
	p.closed = true
	subs := make([]*zmtpSub, 0, len(p.subs))
	for s := range p.subs {
		s.c.SetReadDeadline(time.Now()) // the reader returns; the writer finishes the queue
		subs = append(subs, s)
	}
	p.mu.Unlock()
	p.ln.Close()
	grace := time.AfterFunc(time.Second, func() {
		for _, s := range subs {
			s.c.Close() // a subscriber that takes nothing: its writer stops
		}
	})
	p.wg.Wait()
	grace.Stop()
}
