package ucx

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// A same-host peer killed while it answers reads must not take a live peer
// with it: on UCX 1.13's shared memory a sender hung between reserving a
// slot of the initiator's receive FIFO and marking it written blocks that
// FIFO for every later sender, so without the worker's renewal every read
// of the live peer c stalled past PeerStallBound (about half the runs).
// c is read throughout, by one goroutine while b dies and is given up on,
// and after: every read returns c's bytes.
func TestLivePeerAfterAnotherDied(t *testing.T) {
	for _, tls := range []string{"posix", "cma,posix,self"} {
		t.Run(tls, func(t *testing.T) {
			needUCX(t)
			b, c := startPeer(t, tls), startPeer(t, tls)
			w := newInitiator(t, tls)
			want := make([]byte, peerSize)
			fill(want, peerSeed)

			read := func(p *peer, buf []byte, d time.Duration) error {
				ctx, cancel := context.WithTimeout(context.Background(), d)
				defer cancel()
				return w.Do(ctx, []Op{{Desc: p.desc, Parts: []Part{{Host: buf}}}})[0]
			}
			got := make([]byte, 16<<20)
			if err := read(c, got, time.Minute); err != nil || !bytes.Equal(got, want[:len(got)]) {
				t.Fatalf("c before the kill: %v", err)
			}
			// Readers of b, each until its first error.
			var wg sync.WaitGroup
			var mu sync.Mutex
			var reads int
			firstErr := make(chan error, 4)
			for g := 0; g < 4; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					buf := make([]byte, 16<<20)
					for {
						if err := read(b, buf, time.Hour); err != nil {
							firstErr <- err
							return
						}
						mu.Lock()
						reads++
						mu.Unlock()
					}
				}()
			}
			deadline := time.Now().Add(10 * time.Second)
			for {
				mu.Lock()
				n := reads
				mu.Unlock()
				if n >= 4 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("no reads of b before the kill")
				}
				time.Sleep(time.Millisecond)
			}
			// c's reader, through the kill until b's readers are done.
			bDone := make(chan struct{})
			cErr := make(chan error, 1)
			go func() {
				buf := make([]byte, 4<<20)
				for n := 0; ; n++ {
					select {
					case <-bDone:
						cErr <- nil
						return
					default:
					}
					if err := read(c, buf, 20*time.Second); err != nil {
						cErr <- fmt.Errorf("read %d of c during b's death: %w", n, err)
						return
					}
					if !bytes.Equal(buf, want[:len(buf)]) {
						cErr <- fmt.Errorf("read %d of c during b's death: bytes differ", n)
						return
					}
				}
			}()
			if err := b.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			killed := time.Now()
			wg.Wait()
			t.Logf("b's reads failed %v after the kill: %v", time.Since(killed), <-firstErr)
			close(bDone)
			if err := <-cErr; err != nil {
				t.Fatal(err)
			}

			for i := 0; i < 3; i++ {
				clear(got)
				start := time.Now()
				if err := read(c, got, 20*time.Second); err != nil {
					t.Fatalf("read %d of the live peer c after b died, %v: %v", i, time.Since(start), err)
				}
				if !bytes.Equal(got, want[:len(got)]) {
					t.Fatalf("read %d of c: bytes differ", i)
				}
			}
		})
	}
}

// renewals reads how many times w's UCP worker was renewed.
func renewals(w *Worker) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.renewals
}

// A peer taken as gone stays gone for a while: the next read of it fails
// at once instead of connecting again, stalling PeerStallBound and renewing
// the worker again (which cut every live Do each time). The peer is hung
// (SIGSTOP), not killed: a killed one's shared memory is gone, so
// connecting to it already fails at once.
func TestGonePeerFailsFast(t *testing.T) {
	needUCX(t)
	b := startPeer(t, "posix")
	w := newInitiator(t, "posix")
	read := func() error { return readPeer(t, w, b, time.Minute) }
	if err := read(); err != nil {
		t.Fatalf("b alive: %v", err)
	}
	stopPeer(t, b)
	start := time.Now()
	err := read()
	if err == nil {
		t.Fatal("read of the hung b succeeded")
	}
	n := renewals(w)
	t.Logf("first read of the hung b failed after %v, %d renewals: %v", time.Since(start), n, err)
	if n == 0 {
		t.Fatal("b was not given up on by the stall path (no renewal)")
	}
	for i := 0; i < 2; i++ {
		start = time.Now()
		err = read()
		took := time.Since(start)
		if err == nil {
			t.Fatalf("read %d of the hung b succeeded", i)
		}
		if took > time.Second || renewals(w) != n {
			t.Fatalf("read %d of the hung b, already taken as gone: %v, renewals %d -> %d: %v", i, took, n, renewals(w), err)
		}
		if !strings.Contains(err.Error(), "taken as gone") {
			t.Fatalf("read %d: the error does not say the peer was taken as gone: %v", i, err)
		}
	}
}

// Endpoints without peer-failure detection cannot be closed, only kept
// until their UCP worker goes: forgetting many peers renews the worker
// rather than keeping them all.
func TestKeptEndpointsBounded(t *testing.T) {
	needUCX(t)
	w := newInitiator(t, "posix")
	c, err := NewContext(ContextOptions{Transports: "posix"})
	if err != nil {
		t.Fatal(err)
	}
	var xs []*Exposure
	t.Cleanup(func() {
		for _, x := range xs {
			x.Close()
		}
		c.Close()
	})
	maxKept := 0
	for i := 0; i < 40; i++ {
		mem := make([]byte, 4096)
		fill(mem, int64(i))
		x, err := c.Expose(uintptrOf(mem), uint64(len(mem)), MemHost)
		if err != nil {
			t.Fatal(err)
		}
		xs = append(xs, x)
		got := make([]byte, len(mem))
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		err = w.Do(ctx, []Op{{Desc: x.Desc(), Parts: []Part{{Host: got}}}})[0]
		cancel()
		if err != nil || !bytes.Equal(got, mem) {
			t.Fatalf("read of exposure %d: %v", i, err)
		}
		w.Forget(x.Desc())
		w.mu.Lock()
		kept := 0
		for _, ce := range w.closing {
			if ce.keep && ce.uw == w.cur {
				kept++
			}
		}
		w.mu.Unlock()
		maxKept = max(maxKept, kept)
	}
	t.Logf("at most %d kept endpoints on the current worker, %d renewals", maxKept, renewals(w))
	if maxKept > 32 {
		t.Fatalf("%d kept endpoints on the current worker after forgetting 40 peers", maxKept)
	}
}

// An op's deadline on a slow but live same-host peer abandons its request
// without renewing the worker, which would cut short every other Do; the
// peer serves the next read.
func TestDeadlineDoesNotRenew(t *testing.T) {
	needUCX(t)
	b := startPeer(t, "posix")
	w := newInitiator(t, "posix")
	read := func(d time.Duration) error { return readPeer(t, w, b, d) }
	if err := read(time.Minute); err != nil {
		t.Fatalf("b alive: %v", err)
	}
	stopPeer(t, b)
	err := read(500 * time.Millisecond)
	if err == nil {
		t.Fatal("read of the stopped b succeeded")
	}
	t.Logf("read of the stopped b: %v", err)
	if n := renewals(w); n != 0 {
		t.Fatalf("a deadline on a slow peer renewed the worker %d times", n)
	}
	if err := b.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if err := read(time.Minute); err != nil {
		t.Fatalf("b resumed: %v", err)
	}
}

// A deadline shorter than PeerStallBound never reaches the stall path: a
// request it abandoned that then sees no progress for the bound still
// renews the worker, once, so a peer that died mid-send cannot block the
// receive queue for good; a live peer is read throughout.
func TestAbandonedStallRenews(t *testing.T) {
	needUCX(t)
	b, c := startPeer(t, "posix"), startPeer(t, "posix")
	w := newInitiator(t, "posix")
	read := func(p *peer, d time.Duration) error { return readPeer(t, w, p, d) }
	if err := read(b, time.Minute); err != nil {
		t.Fatalf("b alive: %v", err)
	}
	stopPeer(t, b)
	if err := read(b, 500*time.Millisecond); err == nil {
		t.Fatal("read of the stopped b succeeded")
	}
	deadline := time.Now().Add(3 * PeerStallBound)
	for renewals(w) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no renewal %v after the abandoned read of b", 3*PeerStallBound)
		}
		if err := read(c, time.Second); err != nil {
			t.Fatalf("read of the live c: %v", err)
		}
	}
	for i := 0; i < 3; i++ {
		if err := read(c, time.Second); err != nil {
			t.Fatalf("read of the live c after the renewal: %v", err)
		}
	}
	if n := renewals(w); n != 1 {
		t.Fatalf("%d renewals", n)
	}
}

// readPeer reads the first MiB of p's exposure through w within d; bytes
// that differ from what the peer holds fail the test (call it from the
// test's goroutine). The error is Do's.
func readPeer(t *testing.T, w *Worker, p *peer, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	buf := make([]byte, 1<<20)
	err := w.Do(ctx, []Op{{Desc: p.desc, Parts: []Part{{Host: buf}}}})[0]
	want := make([]byte, len(buf))
	fill(want, peerSeed)
	if err == nil && !bytes.Equal(buf, want) {
		t.Fatal("bytes differ")
	}
	return err
}

// stopPeer stops p with SIGSTOP and returns once the kernel shows it
// stopped: the signal is delivered asynchronously, and a read posted
// before it takes effect is still served (CI saw "read of the hung b
// succeeded").
func stopPeer(t *testing.T, p *peer) {
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stat := fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		b, err := os.ReadFile(stat)
		if err != nil {
			t.Fatal(err)
		}
		// The state follows the command name's closing parenthesis.
		if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) && (b[i+2] == 'T' || b[i+2] == 't') {
			return
		}
	}
	t.Fatalf("peer %d not stopped 10 s after SIGSTOP", p.cmd.Process.Pid)
}
