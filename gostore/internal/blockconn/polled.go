// polled.go defines Polled: a server's netpoller connection whose read of
// the next request polls the socket for a while before it parks.

package blockconn

import (
	"io"
	"net"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"
)

// DefaultServerSpin is how long a server's connection polls for the next
// request after an answer, unless its owner says otherwise.
const DefaultServerSpin = 200 * time.Microsecond

// Polled is a server-side *net.TCPConn that stays in Go's netpoller (its
// deadlines and Close work as ever) but, after it has written an answer,
// polls the socket for up to its spin before the next read parks. A
// client that sends its next request within the spin is served without
// the netpoller's wake-up: on this project's 2-core VM a Go server's
// round trip measured 29.5 µs at the median parking at once and 6.2 µs
// polling for up to 50 µs (a spinning Python client either way).
//
// Polling costs CPU only where it pays:
//   - only the first read after an answer polls: a payload that streams
//     in behind its header is read as any netpoller read is;
//   - only on a hot connection, whose last two requests each came within
//     the spin of the answer before: a poll that would not be met is not
//     repeated (a client calling every millisecond, or pinging every
//     second, is never polled for, nor one whose requests alternate a
//     short and a long wait, as a large read and the note that ends it
//     do), and a burst pays two parked reads to heat its connection;
//   - each poll yields the CPU (sched_yield) to any thread that can run,
//     so it keeps an idle CPU awake rather than taking a busy one;
//   - at most a few reads of a process poll at once (SharedGate).
type Polled struct {
	tc       *net.TCPConn
	raw      syscall.RawConn
	spin     time.Duration
	gate     *SpinGate
	answered time.Time // when the last answer was written; zero once a read began
	streak   int       // requests in a row that came within the spin of their answers
}

// hot is the streak from which a connection is polled for.
const hot = 2

// NewPolled wraps tc; spin 0 or less, or a nil gate, never polls.
func NewPolled(tc *net.TCPConn, spin time.Duration, gate *SpinGate) (*Polled, error) {
	raw, err := tc.SyscallConn()
	if err != nil {
		return nil, err
	}
	return &Polled{tc: tc, raw: raw, spin: spin, gate: gate}, nil
}

// Poll is raw made a Polled under SharedGate, for a server to read its
// requests through: raw itself when it is not TCP or spin is 0 or less.
func Poll(raw net.Conn, spin time.Duration) net.Conn {
	tc, ok := raw.(*net.TCPConn)
	if !ok || spin <= 0 {
		return raw
	}
	p, err := NewPolled(tc, spin, sharedGate)
	if err != nil {
		return raw
	}
	return p
}

// Write writes b: an answer, after which the next read may poll.
func (p *Polled) Write(b []byte) (int, error) {
	n, err := p.tc.Write(b)
	p.answered = time.Now()
	return n, err
}

// WriteBuffers writes bufs with one writev where it can, as
// net.Buffers.WriteTo does on a TCP connection; an answer too.
func (p *Polled) WriteBuffers(bufs *net.Buffers) (int64, error) {
	n, err := bufs.WriteTo(p.tc)
	p.answered = time.Now()
	return n, err
}

// Read reads what is there, at least one byte, as net.Conn's Read does.
func (p *Polled) Read(b []byte) (int, error) {
	if p.answered.IsZero() || len(b) == 0 {
		return p.tc.Read(b)
	}
	since := p.answered
	p.answered = time.Time{}
	var n int
	var err error
	if p.streak >= hot && p.spin > 0 && p.gate != nil && p.gate.enter() {
		n, err = p.pollRead(b)
	} else {
		n, err = p.tc.Read(b)
	}
	if time.Since(since) < p.spin {
		p.streak = min(p.streak+1, hot)
	} else {
		p.streak = 0
	}
	return n, err
}

// pollRead is Read polling for up to the spin first; the caller entered
// the gate, and pollRead leaves it once it stops polling.
func (p *Polled) pollRead(b []byte) (int, error) {
	p.gate.polls.Add(1)
	polling := true
	end := time.Now().Add(p.spin)
	var n int
	var rerr error
	err := p.raw.Read(func(fd uintptr) bool {
		var until time.Time // after the poll: one try per wake-up
		if polling {
			until = end
		}
		m, e, got := recvUntil(int(fd), b, until)
		if polling {
			polling = false
			p.gate.leave()
			if got {
				p.gate.hits.Add(1)
			}
		}
		if !got {
			return false // park until the netpoller says readable
		}
		n, rerr = m, e
		if e == nil && m == 0 {
			rerr = io.EOF
		}
		return true
	})
	if polling {
		// The read ended before its first try (the connection closed, or
		// its deadline passed, before it began): the gate is still held.
		// Kept, it would stop every poll of the process for good.
		p.gate.leave()
	}
	if err != nil {
		return 0, err
	}
	if rerr == io.EOF {
		return 0, io.EOF // as net.Conn says the end of the stream
	}
	if rerr != nil {
		return 0, &net.OpError{Op: "read", Net: "tcp", Source: p.tc.LocalAddr(), Addr: p.tc.RemoteAddr(), Err: rerr}
	}
	return n, nil
}

// Close closes the connection.
func (p *Polled) Close() error { return p.tc.Close() }

// LocalAddr and RemoteAddr are the connection's.
func (p *Polled) LocalAddr() net.Addr  { return p.tc.LocalAddr() }
func (p *Polled) RemoteAddr() net.Addr { return p.tc.RemoteAddr() }

// SetDeadline, SetReadDeadline and SetWriteDeadline are the connection's.
// A read that polls notices its deadline once the poll ends: up to the
// spin late.
func (p *Polled) SetDeadline(t time.Time) error      { return p.tc.SetDeadline(t) }
func (p *Polled) SetReadDeadline(t time.Time) error  { return p.tc.SetReadDeadline(t) }
func (p *Polled) SetWriteDeadline(t time.Time) error { return p.tc.SetWriteDeadline(t) }

// SharedGate is the gate of every server in the process (a process may
// run a master and transfer servers): a polling read holds a thread and
// its P, and the process must keep one free.
func SharedGate() *SpinGate { return sharedGate }

var sharedGate = NewSpinGate(0)

// SpinGate bounds how many reads poll at once.
type SpinGate struct {
	busy  atomic.Int32
	max   int32
	polls atomic.Uint64 // reads that polled
	hits  atomic.Uint64 // reads that polled and found their bytes within the spin
}

// Counts reports the reads through the gate that polled, and those of them
// served by the poll.
func (g *SpinGate) Counts() (polls, hits uint64) { return g.polls.Load(), g.hits.Load() }

// NewSpinGate allows n polling reads at once; n 0 or less means
// GOMAXPROCS-1, at least 1 and at most 4. A polling goroutine keeps its P
// (its system calls are too short to lose it), so at least one P must stay
// free for what the netpoller wakes: with every P polling, a request on
// another connection waited out a whole spin.
func NewSpinGate(n int) *SpinGate {
	if n <= 0 {
		n = min(4, max(1, runtime.GOMAXPROCS(0)-1))
	}
	return &SpinGate{max: int32(n)}
}

func (g *SpinGate) enter() bool {
	for {
		b := g.busy.Load()
		if b >= g.max {
			return false
		}
		if g.busy.CompareAndSwap(b, b+1) {
			return true
		}
	}
}

func (g *SpinGate) leave() { g.busy.Add(-1) }
