// Package burstlog logs one line per burst of a repeated failure: a full
// pool or a full disk refuses every call for a while, and the first
// failure's line, with the reason, says it all; the others are counted
// and reported when a success ends the burst.
//
// It owns only the burst's state; callers pass the logging as closures, so
// the line's wording and fields stay theirs. A Log is safe for concurrent
// use, and a success outside a burst costs one atomic load, so callers may
// report every success on a hot path.
package burstlog

import (
	"sync"
	"sync/atomic"
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
