// burstlog.go defines burstLog: one log line per burst of a repeated failure.

package client

import (
	"sync"
	"sync/atomic"
)

// burstLog logs the first failure of a burst and only counts the ones
// after it, until a success ends the burst: a full pool or a full disk
// refuses every call for a while, and one line with the reason says it
// all. It is safe for concurrent use; a success outside a burst costs one
// atomic load.
type burstLog struct {
	active atomic.Bool // a burst is on; read without the lock
	mu     sync.Mutex
	more   int // failures since the logged one
}

// fail records n failures; logFirst runs (under the lock) when they start
// a burst, with the count of the others in this report.
func (b *burstLog) fail(n int, logFirst func(others int)) {
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

// on reports whether a burst is on (one atomic load).
func (b *burstLog) on() bool { return b.active.Load() }

// ok ends a burst; logEnd runs with the failures counted since the logged
// one, when there were any.
func (b *burstLog) ok(logEnd func(more int)) {
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
