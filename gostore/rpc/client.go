// client.go defines the RPC client: a pool of connections, one call at a time on each.

package rpc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/gostore/gostore/gostore/auth"
	"github.com/gostore/gostore/gostore/internal/blockconn"
	"github.com/gostore/gostore/gostore/wire"
)

// DefaultCallTimeout bounds a call whose context has no deadline.
const DefaultCallTimeout = 10 * time.Second

const maxIdle = 64

// Client calls one master address. It is safe for concurrent use.
type Client struct {
	addr   string
	opt    ClientOptions
	nextID atomic.Uint64

	mu struct {
		sync.Mutex
		idle   []*clientConn
		closed bool
		// Notifications (Notify) ride the pooled connections: their
		// answers are read by the next call to take the connection
		// (those come before it sends, the rest ahead of its reply), or
		// by NotifyFlush. sent numbers them;
		// owing holds the connections with answers unread; settled is
		// signalled when one has none left (or is closed) and when one
		// goes back idle.
		sent    uint64
		owing   map[*clientConn]struct{}
		settled sync.Cond
		// later holds the frames of notifications that wait for the
		// next request (NotifyLater), laterCount how many; laterDue
		// sends them when no request comes in time.
		later      []byte
		laterCount int
		laterDue   *time.Timer
	}
	// waiting mirrors mu.laterCount > 0, so that a call need not lock to
	// learn that it has nothing to carry.
	waiting atomic.Bool
}

// ErrNotifyUnavailable is Notify's answer when it sent nothing because it
// cannot send at once (every connection is in use, or this client's
// connections are not blocking ones): send the request another way.
var ErrNotifyUnavailable = errors.New("rpc: no connection free to notify on")

// notifyBacklog is how many answers of notifications one connection
// leaves unread before a Notify on it reads them.
const notifyBacklog = 64

type conn interface {
	Read([]byte) (int, error)
	Write([]byte) (int, error)
	SetDeadline(time.Time) error
	Close() error
}

// ClientOptions tune a Client. The zero value is NewClient's choice.
type ClientOptions struct {
	// Netpoll reads replies through Go's netpoller instead of with
	// blocking system calls on the calling thread (blockconn.Conn, the
	// lower-latency choice when the master is another process). A process
	// that runs the master itself sets it: a thread blocked in a syscall
	// keeps its P until sysmon takes it back, which starved the in-process
	// master and doubled the round trip in the same measurement.
	Netpoll bool
	// Observe, when set, is told of every Call as it returns: the op, how
	// long the call took (connection wait included) and its error (nil,
	// a master's code, or ErrRPCFail/ErrRPCTimeout). It runs on the
	// caller's goroutine and must be cheap and safe for concurrent use.
	Observe func(op wire.Op, d time.Duration, err error)
	// Resolve, when set, names the master to dial at each new connection
	// (the leader of an HA cluster, which changes): the address given to
	// NewClientWith then only labels errors.
	Resolve func(ctx context.Context) (string, error)
	// Auth, when set, runs its handshake on every new connection before
	// the first call. With a shared secret the connection stays a plain
	// one (and blocking, unless Netpoll); with mutual TLS it is read
	// through the netpoller.
	Auth *auth.Auth
	// Spin is how long a blocking read polls before it sleeps (0:
	// blockconn.DefaultSpin; negative: never polls).
	Spin time.Duration
	// ConnectTimeout bounds making a connection: the dial, the leader's
	// look-up and the handshake, each (0: DefaultConnectTimeout; the
	// call's own bound when shorter). Mooncake's MC_RPC_CONNECT_TIMEOUT_MS.
	ConnectTimeout time.Duration
	// Stamp, when set, completes every request before it is encoded (the
	// client sets its tenant on the requests that carry one). It runs on
	// the caller's goroutine and may change only the request.
	Stamp func(req any)
}

// DefaultConnectTimeout is ClientOptions.ConnectTimeout's default.
const DefaultConnectTimeout = 3 * time.Second

type clientConn struct {
	c   conn
	r   *bufio.Reader
	out []byte
	in  []byte
	// unread is the answers of notifications sent on the connection and
	// not read yet, firstOwed the number (Client.mu.sent) of the oldest.
	// Both change under Client.mu; the connection's holder reads them.
	unread    int
	firstOwed uint64
	// first: nothing has been read yet, and the peer was not
	// authenticated (no Auth): a failed read then says what the peer is
	// (readFirst).
	first bool
	addr  string
}

// NewClient returns a client for addr with the default ClientOptions;
// connections are made on demand.
func NewClient(addr string) *Client { return NewClientWith(addr, ClientOptions{}) }

// NewClientWith returns a client for addr with opt; connections are made
// on demand.
func NewClientWith(addr string, opt ClientOptions) *Client {
	c := &Client{addr: addr, opt: opt}
	c.mu.owing = map[*clientConn]struct{}{}
	c.mu.settled.L = &c.mu.Mutex
	return c
}

// Addr is the master address this client calls.
func (c *Client) Addr() string { return c.addr }

// Call sends req (msgpack-encoded) as op and decodes the reply into resp
// (which may be nil). A master-side failure comes back as a *wire.Error with
// the master's code; transport failures are ErrRPCFail / ErrRPCTimeout.
func (c *Client) Call(ctx context.Context, op wire.Op, req, resp any) error {
	if c.opt.Observe == nil {
		return c.call(ctx, op, req, resp)
	}
	began := time.Now()
	err := c.call(ctx, op, req, resp)
	c.opt.Observe(op, time.Since(began), err)
	return err
}

func (c *Client) call(ctx context.Context, op wire.Op, req, resp any) error {
	if ctx.Err() != nil {
		return c.ended(ctx, op)
	}
	cc, err := c.get(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return c.ended(ctx, op)
		}
		return err
	}
	setDeadline(ctx, cc)
	stop := context.AfterFunc(ctx, cc.wake)
	h, body, err := c.roundTrip(cc, c.nextID.Add(1), op, req)
	woken := !stop()
	if err != nil {
		c.settle(cc) // what it still owed will never be read
		cc.c.Close()
		if ctx.Err() != nil {
			return c.ended(ctx, op)
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return wire.Errorf(wire.ErrRPCTimeout, "%s to %s: %v", op, c.addr, err)
		}
		return wire.Errorf(wire.ErrRPCFail, "%s to %s: %v", op, c.addr, err)
	}
	// After decoding: body aliases the connection's buffer.
	if woken { // the reply came, but the connection was shut as the context ended
		c.settle(cc)
		defer cc.c.Close()
	} else {
		defer c.put(cc)
	}
	return DecodeReply(op, h.Status, body, resp)
}

// errWoken: the call's context ended as its reply came; the connection it
// shut cannot be used again.
var errWoken = errors.New("connection shut as the call's context ended")

// ended is the error of a call whose context ended: ErrRPCTimeout at its
// deadline, else the reason it was cancelled with (context.Cause) when
// that carries a code, else ErrRPCFail.
func (c *Client) ended(ctx context.Context, op wire.Op) error {
	cause := context.Cause(ctx)
	var coded wire.Coded
	switch {
	case errors.Is(cause, context.DeadlineExceeded):
		return wire.Errorf(wire.ErrRPCTimeout, "%s to %s: no answer within the call's bound", op, c.addr)
	case errors.As(cause, &coded):
		return fmt.Errorf("%s to %s: %w", op, c.addr, cause)
	}
	return wire.Errorf(wire.ErrRPCFail, "%s to %s: %v", op, c.addr, cause)
}

// wake makes a read or write blocked on cc return at once (its call's
// context ended). The connection is broken afterwards.
func (cc *clientConn) wake() {
	if s, ok := cc.c.(interface{ Shutdown() }); ok {
		s.Shutdown()
		return
	}
	cc.c.SetDeadline(time.Unix(1, 0))
}

// DecodeReply turns a reply into the caller's result: the master's code
// as a *wire.Error, or the body decoded into resp (which may be nil).
// Client uses it; so may other clients of the protocol (the benchmark's
// pipelined one), so that every caller reads replies alike.
func DecodeReply(op wire.Op, status wire.Code, body []byte, resp any) error {
	// A reply is vetted as a request is (wire.Unmarshal): msgpack would
	// allocate what its lengths claim.
	if status != wire.OK {
		var msg string
		_ = wire.Unmarshal(body, &msg)
		return &wire.Error{Code: status, Msg: msg}
	}
	if resp == nil {
		return nil
	}
	if err := wire.Unmarshal(body, resp); err != nil {
		return wire.Errorf(wire.ErrRPCFail, "%s: undecodable reply: %v", op, err)
	}
	return nil
}

// roundTrip sends req and reads its reply. The answers cc still owes to
// notifications come first on the stream (the master handles a
// connection's requests in order): they are read, and cc settled, after
// the request has gone out, so the call does not wait for them.
func (c *Client) roundTrip(cc *clientConn, id uint64, op wire.Op, req any) (wire.Header, []byte, error) {
	if c.opt.Stamp != nil {
		c.opt.Stamp(req)
	}
	body, err := msgpack.Marshal(req)
	if err != nil {
		return wire.Header{}, nil, err
	}
	cc.out = c.takeLater(cc, cc.out[:0])
	cc.out = wire.AppendFrame(cc.out, id, op, wire.OK, body)
	if _, err := cc.c.Write(cc.out); err != nil {
		return wire.Header{}, nil, err
	}
	if err := c.readOwed(cc, false); err != nil {
		return wire.Header{}, nil, fmt.Errorf("answers of notifications ahead of the reply: %w", err)
	}
	h, b, err := cc.readFrame()
	if err != nil {
		return h, nil, err
	}
	if h.ID != id || h.Op != op {
		return h, nil, fmt.Errorf("reply for request %d/%s, want %d/%s", h.ID, h.Op, id, op)
	}
	return h, b, nil
}

func (c *Client) get(ctx context.Context) (*clientConn, error) {
	for {
		cc, err := c.popIdle()
		if err != nil {
			return nil, err
		}
		if cc == nil {
			break
		}
		// An idle connection whose master went away (a restart) would
		// fail this call; drop it and try the next, or dial. (Retrying
		// a failed call instead could apply it twice.) The answers its
		// notifications are owed that have come are read first: a
		// master that answered them and then went away left them ahead
		// of its end of the stream. Answers not come yet are read after
		// this call's request goes out (roundTrip): the master is still
		// handling the notifications, and the call does not wait for it
		// before it sends. The checks are syscalls: they run outside the
		// pool's lock.
		if cc.unread > 0 && c.drain(ctx, cc, true) != nil {
			continue
		}
		if pc, ok := cc.c.(interface{ PeerClosed() bool }); ok && pc.PeerClosed() {
			cc.c.Close()
			continue
		}
		return cc, nil
	}
	timeout := c.opt.ConnectTimeout
	if timeout <= 0 {
		timeout = DefaultConnectTimeout
	}
	if d, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(d))
	}
	addr := c.addr
	if c.opt.Resolve != nil {
		rctx, cancel := context.WithTimeout(ctx, timeout)
		a, err := c.opt.Resolve(rctx)
		cancel()
		if err != nil || a == "" {
			return nil, wire.Errorf(wire.ErrRPCFail, "finding the master through %s: %v (no leader?)", c.addr, err)
		}
		addr = a
	}
	nc, err := (&net.Dialer{Timeout: timeout}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, wire.Errorf(wire.ErrRPCFail, "dial master %s: %v", addr, err)
	}
	nc.(*net.TCPConn).SetNoDelay(true)
	if c.opt.Auth != nil {
		hctx, cancel := context.WithTimeout(ctx, timeout)
		sc, err := c.opt.Auth.Client(hctx, nc)
		cancel()
		if err != nil {
			nc.Close()
			return nil, wire.Errorf(wire.ErrRPCFail, "authenticating to %s (%s): %v", addr, c.opt.Auth.Mode(), err)
		}
		nc = sc
	}
	var conn conn = nc
	if !c.opt.Netpoll && !c.opt.Auth.Encrypts() {
		bc, err := blockconn.FromTCP(nc.(*net.TCPConn))
		if err != nil {
			return nil, wire.Errorf(wire.ErrRPCFail, "dial master %s: %v", addr, err)
		}
		if c.opt.Spin != 0 {
			bc.SetSpin(c.opt.Spin)
		}
		conn = bc
	}
	return &clientConn{c: conn, r: bufio.NewReaderSize(conn, 64<<10), first: c.opt.Auth == nil, addr: addr}, nil
}

// popIdle takes the most recently used idle connection, or nil when there
// is none.
func (c *Client) popIdle() (*clientConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.closed {
		return nil, wire.Errorf(wire.ErrRPCFail, "client closed")
	}
	n := len(c.mu.idle)
	if n == 0 {
		return nil, nil
	}
	cc := c.mu.idle[n-1]
	c.mu.idle = c.mu.idle[:n-1]
	return cc, nil
}

func (c *Client) put(cc *clientConn) {
	if cap(cc.out) > 1<<20 {
		cc.out = nil
	}
	c.mu.Lock()
	if c.mu.closed || len(c.mu.idle) >= maxIdle {
		c.settleLocked(cc) // its notifications' answers will not be read
		c.mu.Unlock()
		cc.c.Close()
		return
	}
	c.mu.idle = append(c.mu.idle, cc)
	if cc.unread > 0 {
		c.mu.settled.Broadcast() // a flush may read its answers now
	}
	c.mu.Unlock()
}

// Notify sends req as op and returns without waiting for the answer: one
// write on the calling thread, for requests whose answers the caller does
// not need (ReadDone), where handing the request to another goroutine
// would cost a thread wake-up. It writes on the idle connection the next
// call will take, so the master handles it before that call, on the
// connection the master already polls for this client's next request;
// that call reads the answer ahead of its own reply (or NotifyFlush does).
//
// ErrNotifyUnavailable means nothing was sent: every connection is in
// use, or this client's connections are not blocking ones (Netpoll,
// mutual TLS). After any other error the request may or may not have
// reached the master.
func (c *Client) Notify(ctx context.Context, op wire.Op, req any) error {
	body, err := c.notifyBody(op, req)
	if err != nil {
		return err
	}
	cc, err := c.popIdle()
	if err != nil {
		return err
	}
	if cc == nil {
		return ErrNotifyUnavailable
	}
	if cc.unread >= notifyBacklog {
		if err := c.drain(ctx, cc, false); err != nil {
			return wire.Errorf(wire.ErrRPCFail, "answers of notifications from %s: %v", c.addr, err)
		}
	}
	setDeadline(ctx, cc)
	cc.out = wire.AppendFrame(cc.out[:0], c.nextID.Add(1), op, wire.OK, body)
	if _, err := cc.c.Write(cc.out); err != nil {
		c.settle(cc)
		cc.c.Close()
		return wire.Errorf(wire.ErrRPCFail, "%s to %s: %v", op, c.addr, err)
	}
	c.mu.Lock()
	c.oweLocked(cc, 1)
	c.mu.Unlock()
	c.put(cc)
	return nil
}

// notifyBody is req encoded for Notify or NotifyLater, or
// ErrNotifyUnavailable when this client's connections are not blocking
// ones: then there is nothing to write on, and the caller learns it before
// any connection is taken, on every read's path.
func (c *Client) notifyBody(op wire.Op, req any) ([]byte, error) {
	if c.opt.Netpoll || c.opt.Auth.Encrypts() {
		return nil, ErrNotifyUnavailable
	}
	if c.opt.Stamp != nil {
		c.opt.Stamp(req)
	}
	body, err := msgpack.Marshal(req)
	if err != nil {
		return nil, wire.Errorf(wire.ErrInvalidParams, "%s: %v", op, err)
	}
	return body, nil
}

// oweLocked records that n more notifications were sent on cc, which the
// caller holds: their answers are owed, ahead of anything sent after them.
func (c *Client) oweLocked(cc *clientConn, n int) {
	c.mu.sent += uint64(n)
	if cc.unread == 0 {
		cc.firstOwed = c.mu.sent - uint64(n) + 1
		c.mu.owing[cc] = struct{}{}
	}
	cc.unread += n
}

// NotifyLater is Notify for a request that may wait a moment: it goes out
// in the same write as this client's next request, on whatever connection
// that takes, or, when no request comes within wait, on its own (a timer's
// goroutine writes it, off every caller's path). A get over TCP saves a
// write this way, and the master a read and a write: its ReadDone rides on
// the next get's GetReplicas. Once notifyBacklog of them wait, the call
// that adds the last sends them all at once. NotifyFlush sends those
// waiting before it waits for answers; Close drops them.
//
// ErrNotifyUnavailable means nothing was queued, as for Notify. An error
// from sending the backlog means those requests may or may not have
// reached the master; they are not kept.
func (c *Client) NotifyLater(ctx context.Context, op wire.Op, req any, wait time.Duration) error {
	body, err := c.notifyBody(op, req)
	if err != nil {
		return err
	}
	c.mu.Lock()
	if c.mu.closed {
		c.mu.Unlock()
		return wire.Errorf(wire.ErrRPCFail, "client closed")
	}
	c.mu.later = wire.AppendFrame(c.mu.later, c.nextID.Add(1), op, wire.OK, body)
	c.mu.laterCount++
	full := c.mu.laterCount >= notifyBacklog
	if c.mu.laterCount == 1 {
		c.waiting.Store(true)
		if c.mu.laterDue == nil {
			c.mu.laterDue = time.AfterFunc(wait, c.laterDue)
		} else {
			c.mu.laterDue.Reset(wait)
		}
	}
	c.mu.Unlock()
	if full {
		return c.SendLater(ctx)
	}
	return nil
}

// laterDue sends the notifications no request carried in time.
func (c *Client) laterDue() {
	ctx, cancel := context.WithTimeout(context.Background(), DefaultCallTimeout)
	defer cancel()
	_ = c.SendLater(ctx) // the requests are advisory: a failure loses them, as a failed Notify does
}

// SendLater sends the notifications NotifyLater queued now, on their own.
// An error means they may or may not have reached the master; they are
// not kept.
func (c *Client) SendLater(ctx context.Context) error {
	if !c.waiting.Load() {
		return nil
	}
	cc, err := c.get(ctx)
	if err != nil {
		c.mu.Lock()
		c.dropLaterLocked()
		c.mu.Unlock()
		return err
	}
	if cc.out = c.takeLater(cc, cc.out[:0]); len(cc.out) == 0 {
		c.put(cc) // another caller took them
		return nil
	}
	setDeadline(ctx, cc)
	if _, err := cc.c.Write(cc.out); err != nil {
		c.settle(cc)
		cc.c.Close()
		return wire.Errorf(wire.ErrRPCFail, "notifications to %s: %v", c.addr, err)
	}
	c.put(cc)
	return nil
}

// takeLater appends the notifications waiting to out, for the caller to
// write on cc (which it holds), and records their answers as owed by cc.
func (c *Client) takeLater(cc *clientConn, out []byte) []byte {
	if !c.waiting.Load() {
		return out
	}
	c.mu.Lock()
	if c.mu.laterCount > 0 {
		out = append(out, c.mu.later...)
		c.oweLocked(cc, c.mu.laterCount)
		c.dropLaterLocked()
	}
	c.mu.Unlock()
	return out
}

// dropLaterLocked forgets the notifications waiting (taken, or lost).
func (c *Client) dropLaterLocked() {
	if cap(c.mu.later) > 64<<10 {
		c.mu.later = nil
	}
	c.mu.later, c.mu.laterCount = c.mu.later[:0], 0
	c.waiting.Store(false)
	if c.mu.laterDue != nil {
		c.mu.laterDue.Stop()
	}
}

// NotifyFlush returns once the master has handled every request Notify
// sent before it was called (it has answered them all), reading the
// answers of idle connections itself and waiting for a connection another
// caller holds (a Notify, a flush, or a call, which reads them ahead of
// its reply) to come back or settle. A connection that fails
// counts as flushed: what it carried may or may not have been handled,
// and the error says so.
func (c *Client) NotifyFlush(ctx context.Context) error {
	var failed error
	if err := c.SendLater(ctx); err != nil {
		failed = err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	target := c.mu.sent
	for {
		cc, busy := c.owedLocked(target)
		switch {
		case cc == nil && !busy:
			return failed
		case cc == nil:
			c.mu.settled.Wait() // its holder (a Notify, a flush) puts it back or settles it
			continue
		}
		c.mu.Unlock()
		if err := c.drain(ctx, cc, false); err != nil {
			failed = wire.Errorf(wire.ErrRPCFail, "answers of notifications from %s: %v", c.addr, err)
		} else {
			c.put(cc)
		}
		c.mu.Lock()
	}
}

// owedLocked takes out of the pool an idle connection owing an answer to a
// notification numbered target or less; busy reports whether a connection
// in use owes one.
func (c *Client) owedLocked(target uint64) (idle *clientConn, busy bool) {
	for cc := range c.mu.owing {
		if cc.firstOwed > target {
			continue
		}
		for i, ic := range c.mu.idle {
			if ic == cc {
				c.mu.idle = append(c.mu.idle[:i], c.mu.idle[i+1:]...)
				return cc, false
			}
		}
		busy = true
	}
	return nil, busy
}

// settle records that cc owes no answer any more: they were read, or
// will never be (the connection failed).
func (c *Client) settle(cc *clientConn) {
	c.mu.Lock()
	c.settleLocked(cc)
	c.mu.Unlock()
}

func (c *Client) settleLocked(cc *clientConn) {
	if cc.unread > 0 {
		cc.unread = 0
		delete(c.mu.owing, cc)
		c.mu.settled.Broadcast()
	}
}

// drain reads (and drops) the answers cc owes, within ctx: all of them,
// or with arrivedOnly those that have come (the rest stay owed, for the
// call that holds cc to read ahead of its reply). After a failure cc is
// settled and closed and must not be used again.
func (c *Client) drain(ctx context.Context, cc *clientConn, arrivedOnly bool) error {
	setDeadline(ctx, cc)
	stop := context.AfterFunc(ctx, cc.wake)
	err := c.readOwed(cc, arrivedOnly)
	if !stop() && err == nil {
		err = errWoken
	}
	if err != nil {
		c.settle(cc)
		cc.c.Close()
	}
	return err
}

// readOwed reads (and drops) the answers of the notifications sent on cc,
// which the caller holds: all of them, or with arrivedOnly those whose
// first byte has come (a frame is written whole, so the rest of it
// follows at once). cc is settled when the last one is read.
func (c *Client) readOwed(cc *clientConn, arrivedOnly bool) error {
	readable, canPeek := cc.c.(interface{ Readable() bool })
	for cc.unread > 0 {
		if arrivedOnly && cc.r.Buffered() == 0 && (!canPeek || !readable.Readable()) {
			return nil
		}
		if _, _, err := cc.readFrame(); err != nil {
			return err
		}
		c.mu.Lock()
		if cc.unread == 1 {
			c.settleLocked(cc) // the last one
		} else {
			cc.unread--
		}
		c.mu.Unlock()
	}
	return nil
}

// readFrame reads the next frame, keeping a grown input buffer unless it
// is huge.
func (cc *clientConn) readFrame() (wire.Header, []byte, error) {
	if cc.first {
		return cc.readFirst()
	}
	h, b, err := wire.ReadFrame(cc.r, cc.in)
	if err == nil && cap(b) <= 1<<20 {
		cc.in = b
	}
	return h, b, err
}

// readFirst is readFrame for a connection's first frame: when it fails,
// the error says what the peer is if its first bytes tell (an HTTP port,
// a master that requires a secret or TLS: wire.FirstReadError).
func (cc *clientConn) readFirst() (wire.Header, []byte, error) {
	got, err := cc.r.Peek(wire.HeaderSize)
	if n := cc.r.Buffered(); err == nil && n > len(got) {
		got, _ = cc.r.Peek(min(n, 128)) // an HTTP answer's first line
	}
	if err != nil {
		return wire.Header{}, nil, wire.FirstReadError(cc.addr, got, err)
	}
	got = append([]byte(nil), got...)
	h, b, err := wire.ReadFrame(cc.r, cc.in)
	if err != nil {
		return h, nil, wire.FirstReadError(cc.addr, got, err)
	}
	cc.first = false
	if cap(b) <= 1<<20 {
		cc.in = b
	}
	return h, b, nil
}

// setDeadline bounds cc's reads and writes by ctx (DefaultCallTimeout
// without a deadline).
func setDeadline(ctx context.Context, cc *clientConn) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(DefaultCallTimeout)
	}
	cc.c.SetDeadline(deadline)
}

// Close closes idle connections; calls in flight finish and then close theirs.
func (c *Client) Close() {
	c.mu.Lock()
	c.mu.closed = true
	c.dropLaterLocked() // the caller flushed what it wanted sent (NotifyFlush)
	idle := c.mu.idle
	c.mu.idle = nil
	c.mu.Unlock()
	for _, cc := range idle {
		c.settle(cc)
		cc.c.Close()
	}
}
