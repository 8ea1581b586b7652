package ucx

import (
	"bytes"
	"context"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A double fault does not take a live peer as gone. s's replies are held
// up (SIGSTOP) through its first stall, which renews the worker, and
// through its one retry on the new worker; while that retry waits, a
// second peer d stops too, with a read of it in flight on the new worker:
// a peer that died mid-send there would block the new receive queue the
// same way, so s's second stall no longer tells s from a live peer behind
// d. Before, s's second stall confirmed it gone and, once s ran again,
// every read of it was refused for GoneFor (30 s); now d's give-up, whose
// stall began before s's was confirmed, puts s back among the suspects,
// and the next read of s, running again, returns its bytes.
func TestASecondPeersStallUndoesAConfirmation(t *testing.T) {
	needUCX(t)
	s, d := startPeer(t, "posix"), startPeer(t, "posix")
	w := newInitiator(t, "posix")
	want := make([]byte, 1<<20)
	fill(want, peerSeed)
	read := func(p *peer) error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		buf := make([]byte, len(want))
		if err := w.Do(ctx, []Op{{Desc: p.desc, Parts: []Part{{Host: buf}}}})[0]; err != nil {
			return err
		}
		if !bytes.Equal(buf, want) {
			t.Error("bytes differ")
		}
		return nil
	}
	for _, p := range []*peer{s, d} {
		if err := read(p); err != nil {
			t.Fatal(err)
		}
	}
	ds, err := decodeDesc(s.desc)
	if err != nil {
		t.Fatal(err)
	}
	stopPeer(t, s)
	sErr := make(chan error, 1)
	go func() { sErr <- read(s) }()
	// s's first stall renewed the worker and its retry is posted on the
	// new one, from a suspect's endpoint.
	retrying := func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		ep := w.eps[string(ds.addr)]
		return w.renewals == 1 && ep != nil && ep.uw == w.cur && ep.suspect
	}
	for deadline := time.Now().Add(3 * PeerStallBound); !retrying(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("s's read was not retried on a renewed worker")
		}
	}
	stopPeer(t, d)
	dErr := make(chan error, 1)
	go func() { dErr <- read(d) }()
	err = <-sErr
	if err == nil {
		t.Fatal("the read of the stopped s succeeded")
	}
	t.Logf("s's read, its retry held up: %v", err)
	if err := <-dErr; err == nil {
		t.Fatal("the read of the stopped d succeeded")
	}
	for _, p := range []*peer{s, d} {
		if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	err = read(s)
	took := time.Since(start)
	if err != nil {
		if strings.Contains(err.Error(), "not connected again") {
			t.Fatalf("s, running again, is refused as gone after a double fault (%v): %v", took, err)
		}
		t.Fatalf("s's read once it runs again (%v): %v", took, err)
	}
	if took > PeerStallBound {
		t.Fatalf("s's read once it runs again took %v", took)
	}
}
