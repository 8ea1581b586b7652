// Package burstlog logs one line per burst of a repeated failure: a full
// pool or a full disk refuses every call for a while, and the first
// failure's line, with the reason, says it all; the others are counted
// and reported when a success ends the burst.
//
// Some failures have no success to end their burst: a client that keeps
// breaking one of the master's limits while everyone else is served. Every
// logs those at most once an interval, with the count of the others.
//
// It owns only the burst's state; callers pass the logging as closures, so
// the line's wording and fields stay theirs. A Log is safe for concurrent
// use, and a success outside a burst costs one atomic load, so callers may
// report every success on a hot path. So is an Every; the caller reads the
// clock and passes it in.
package burstlog

import (
	"sync"
	"sync/atomic"
	"time"
)

// Log is one kind of failure's burst state. The zero value is ready.
type Log struct {
	active atomic.Bool // a burst is on; read without the lock
	mu     sync.Mutex
	more   int // failures since the logged one
}

// Fail records n failures; logFirst runs (under the lock) when they start
// a burst, with the count of the others in this report.
func (b *Log) Fail(n int, logFirst func(others int)) {
	if n <= 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.active.Load() {
		b.more += n
		return
	}
	b.active.Store(true)
	b.more = 0
	logFirst(n - 1)
}

// On reports whether a burst is on (one atomic load).
func (b *Log) On() bool { return b.active.Load() }

// OK ends a burst; logEnd runs with the failures counted since the logged
// one, when there were any.
func (b *Log) OK(logEnd func(more int)) {
	if !b.active.Load() {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.active.Load() {
		return
	}
	b.active.Store(false)
	if b.more > 0 {
		logEnd(b.more)
	}
	b.more = 0
}

// Every logs one line per Interval of a failure that repeats. The zero
// value logs every failure; set Interval before use.
type Every struct {
	Interval time.Duration
	mu       sync.Mutex
	last     time.Time // when the last line was logged
	logged   bool
	more     int // failures since that line
}

// Fail records one failure at now; log runs (under the lock) when no line
// was logged within Interval before now, with the count of the failures
// not logged since the last line.
func (e *Every) Fail(now time.Time, log func(others int)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.logged && now.Sub(e.last) < e.Interval {
		e.more++
		return
	}
	e.logged, e.last = true, now
	others := e.more
	e.more = 0
	log(others)
}
