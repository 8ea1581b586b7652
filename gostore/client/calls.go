// calls.go bounds every call that waits on the network: its deadline
// (Config.RPCTimeout), the scopes that end it early (the master stopped
// answering pings, Close, an interrupt of the process's main thread), and
// the one log line per burst of calls the master did not answer.

package client

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gostore/gostore/gostore/internal/burstlog"
	"github.com/gostore/gostore/gostore/wire"
)

// DefaultRPCTimeout is Config.RPCTimeout's default: Mooncake's
// MC_RPC_TIMEOUT_MS default.
const DefaultRPCTimeout = 30 * time.Second

// DefaultPingTimeout is Config.PingTimeout's default.
const DefaultPingTimeout = 2 * time.Second

// SetupTimeout bounds what New waits for: the master's first answer and
// the segment's mount.
const SetupTimeout = 10 * time.Second

// DefaultCloseTimeout is Config.CloseTimeout's default.
const DefaultCloseTimeout = 2 * time.Second

// noBound stands for "no deadline" (a negative RPCTimeout, as Mooncake's
// MC_RPC_TIMEOUT_MS): the connections still need one to set.
const noBound = 100 * 365 * 24 * time.Hour

// Ended is why a call ended before its work did: the client knows the
// master is gone, the store closed, or the caller's thread was interrupted.
// It carries the call's code (wire.Coded) and is logged by the one line of
// its burst, not by each call it ends (Quiet).
type Ended struct {
	Code wire.Code
	Why  string
}

func (e *Ended) Error() string        { return e.Code.String() + ": " + e.Why }
func (e *Ended) WireCode() wire.Code  { return e.Code }
func (e *Ended) Is(target error) bool { t, ok := target.(*Ended); return ok && t == e }

var (
	// ErrMasterGone fails the calls made while the master does not answer
	// this client's pings (Health 2), until it answers again.
	ErrMasterGone = &Ended{wire.ErrRPCFail, "the master does not answer this client's pings (health_check 2); calls fail until it does"}
	// ErrInterrupted ends the calls of the process's main thread when the
	// bindings see SIGINT (Python's KeyboardInterrupt follows).
	ErrInterrupted = &Ended{wire.ErrRPCFail, "interrupted (SIGINT)"}
	// errClosing ends the calls still in flight when Close gives up
	// waiting for them.
	errClosing = &Ended{wire.ErrRPCFail, "store closed while the call was waiting"}
)

// Quiet reports whether err is one of the ends above, or a failure to
// reach the master: the client logged it once for its whole burst, so a
// caller need not log it again.
func Quiet(err error) bool {
	var e *Ended
	if errors.As(err, &e) {
		return true
	}
	c := wire.CodeOf(err)
	return c == wire.ErrRPCFail || c == wire.ErrRPCTimeout
}

// scopes are the parents of every call's context: all of them, and those
// of the process's main thread (a child of all). The main thread's is
// replaced by a fresh one when its calls are interrupted; all of them end
// for good when the client closes.
type scopes struct {
	mu   sync.Mutex
	all  atomic.Pointer[scope]
	main atomic.Pointer[scope]
	// mainEnded: the main thread's scope was interrupted and stays ended
	// for the rest of that API call (its later steps make contexts of
	// their own), until BeginCall of the next one.
	mainEnded atomic.Bool
}

type scope struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
}

func newScope(parent context.Context) *scope {
	ctx, cancel := context.WithCancelCause(parent)
	return &scope{ctx, cancel}
}

func (s *scopes) init() {
	all := newScope(context.Background())
	s.all.Store(all)
	s.main.Store(newScope(all.ctx))
}

// parent is the scope of a call made now.
func (s *scopes) parent(main bool) context.Context {
	if main {
		return s.main.Load().ctx
	}
	return s.all.Load().ctx
}

// end ends every call in flight and every call made later.
func (s *scopes) end(why error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.all.Load().cancel(why)
}

// interruptMain ends the main thread's calls, in flight and made until
// the next API call begins (renewMain).
func (s *scopes) interruptMain() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.main.Load().cancel(ErrInterrupted)
	s.mainEnded.Store(true)
}

// renewMain gives the main thread a live scope again after an interrupt.
func (s *scopes) renewMain() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mainEnded.Load() {
		s.main.Store(newScope(s.all.Load().ctx))
		s.mainEnded.Store(false)
	}
}

// mainTID is the process's main thread: the thread group leader, whose id
// is the process's.
var mainTID = unix.Getpid()

// OnMainThread reports whether the caller runs on the process's main
// thread (one system call, without the Go scheduler's bookkeeping).
func OnMainThread() bool {
	tid, _, _ := unix.RawSyscall(unix.SYS_GETTID, 0, 0, 0)
	return int(tid) == mainTID
}

// goneCtx is the context of the calls made while the master does not
// answer pings: ended already, with ErrMasterGone.
var goneCtx = func() context.Context {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(ErrMasterGone)
	return ctx
}()

// ctx is the context of one API call: bounded by Config.RPCTimeout, ended
// early by the scopes (see scopes); ended from the start while the master
// does not answer pings (Health 2). Calls already waiting when a ping goes
// unanswered keep their bound: a master that pauses for a moment answers
// them.
func (c *core) ctx() (context.Context, context.CancelFunc) {
	if !c.healthy.Load() {
		return goneCtx, func() {}
	}
	parent := c.scopes.parent(c.cfg.InterruptMain && c.cfg.OnMainThread())
	if c.cfg.RPCTimeout < 0 {
		return context.WithTimeout(parent, noBound)
	}
	return context.WithTimeout(parent, c.cfg.RPCTimeout)
}

// InterruptMain ends the API call the process's main thread is making,
// with ErrInterrupted: what it waits for now and every step it would take
// next. Its next API call (BeginCall) runs as usual. Only a client set up
// with Config.InterruptMain makes its calls interruptible.
func (c *Client) InterruptMain() {
	if c.cfg.InterruptMain {
		c.scopes.interruptMain()
	}
}

// BeginCall marks the start of an API call (the bindings call it as each
// export begins): an interrupt of the main thread's previous call stops
// applying. One atomic load unless there was one.
func (c *Client) BeginCall() {
	if c.scopes.mainEnded.Load() && c.cfg.OnMainThread() {
		c.scopes.renewMain()
	}
}

// masterLog is the burst of calls that the master did not answer (or that
// failed at once because it is gone): one line at the first, one with the
// count when a call gets through again. Pings are the heartbeat's to log.
type masterLog struct {
	burst burstlog.Log
	log   *slog.Logger
	bound time.Duration
}

func (m *masterLog) observe(op wire.Op, _ time.Duration, err error) {
	if op == wire.OpPing {
		return
	}
	if err == nil {
		if m.burst.On() {
			m.burst.OK(func(more int) {
				m.log.Warn("the master answers calls again", "calls_failed_meanwhile", more+1)
			})
		}
		return
	}
	if errors.Is(err, ErrInterrupted) || errors.Is(err, errClosing) || !Quiet(err) {
		return
	}
	m.burst.Fail(1, func(int) {
		m.log.Error("a call could not reach the master; later ones failing alike are counted, not logged",
			"op", op.String(), "code", int(wire.CodeOf(err)), "rpc_timeout", m.bound, "err", err)
	})
}
