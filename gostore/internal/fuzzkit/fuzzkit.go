// fuzzkit.go: the in-memory connection, its listener and the allocation
// meter.

package fuzzkit

import (
	"io"
	"net"
	"runtime"
	"sync"
	"time"
)

// Conn is one end of an in-memory connection. Unlike net.Pipe it can close
// its sending half alone (CloseWrite); unlike TCP it never resets, so what
// the server wrote before it closed always arrives. Each direction is an
// io.Pipe, which also orders the server's writes before the test's reads
// for the race detector.
type Conn struct {
	r *io.PipeReader
	w *io.PipeWriter
}

// Pair returns the two ends of a new connection.
func Pair() (client, server *Conn) {
	serverReads, clientWrites := io.Pipe()
	clientReads, serverWrites := io.Pipe()
	return &Conn{r: clientReads, w: clientWrites}, &Conn{r: serverReads, w: serverWrites}
}

func (c *Conn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c *Conn) Write(p []byte) (int, error)      { return c.w.Write(p) }
func (c *Conn) CloseWrite() error                { return c.w.Close() }
func (c *Conn) LocalAddr() net.Addr              { return addr{} }
func (c *Conn) RemoteAddr() net.Addr             { return addr{} }
func (c *Conn) SetDeadline(time.Time) error      { return nil }
func (c *Conn) SetReadDeadline(time.Time) error  { return nil }
func (c *Conn) SetWriteDeadline(time.Time) error { return nil }

// Close closes both halves; a Read blocked on this end returns
// net.ErrClosed, as on a closed socket.
func (c *Conn) Close() error {
	c.r.CloseWithError(net.ErrClosed)
	return c.w.Close()
}

// Exchange sends in, half-closes, and returns every byte the peer sent
// until it closed the connection, or ok false if it did neither within
// wait (the connection is closed either way).
func (c *Conn) Exchange(in []byte, wait time.Duration) (out []byte, ok bool) {
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(c)
		got <- b
	}()
	go func() {
		c.Write(in) // fails once the server stops reading: it may close early
		c.CloseWrite()
	}()
	defer c.Close()
	select {
	case out = <-got:
		return out, true
	case <-time.After(wait):
		return nil, false
	}
}

type addr struct{}

func (addr) Network() string { return "pipe" }
func (addr) String() string  { return "pipe" }

// Listener hands a server's Serve loop the server ends of the connections
// Dial makes.
type Listener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

// NewListener returns a listener with no connection yet.
func NewListener() *Listener {
	return &Listener{conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *Listener) Close() error   { l.once.Do(func() { close(l.done) }); return nil }
func (l *Listener) Addr() net.Addr { return addr{} }

// Dial connects to the server behind l (once its Serve loop accepts) and
// returns the client's end; net.ErrClosed once l is closed.
func (l *Listener) Dial() (*Conn, error) {
	client, server := Pair()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Allocated runs fn and returns the bytes it allocated on the heap (the
// fuzz worker's own bookkeeping adds a little noise: bounds leave room).
func Allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}
