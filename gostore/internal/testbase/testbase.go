// testbase.go defines LogBuffer and WaitFor.

package testbase

import (
	"bytes"
	"sync"
	"testing"
	"time"
)

// LogBuffer collects what loggers write from any goroutine; String reads
// it at any time.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// WaitFor polls cond until it holds, failing the test after 20 s: for
// states no event announces (a background pass finished, a file appeared,
// a server logged).
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ServedByPolls runs n calls (call(i), which checks its own answer) and
// checks the poll counters counts reads (a process-wide gate's, as
// blockconn.SharedGate().Counts): with polling, at least half the calls
// were served by a poll; without, no read polled. Other tests' servers
// may poll meanwhile: they only add to the counts.
func ServedByPolls(t testing.TB, polling bool, n int, counts func() (polls, hits uint64), call func(i int)) {
	t.Helper()
	polls0, hits0 := counts()
	for i := range n {
		call(i)
	}
	polls, hits := counts()
	if polling && hits-hits0 < uint64(n/2) {
		t.Fatalf("%d of %d calls served by the poll", hits-hits0, n)
	}
	if !polling && polls != polls0 {
		t.Fatalf("no spin, yet %d reads polled", polls-polls0)
	}
}
