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
