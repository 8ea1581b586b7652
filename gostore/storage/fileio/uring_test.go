package fileio

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// newURing returns a fresh io_uring Engine and its pool; it fails the test if
// io_uring is unavailable (it must work on the test machines).
func newURing(t *testing.T) (Engine, *uringPool) {
	t.Helper()
	e, err := New(true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	p, ok := e.(*engine).b.(*uringPool)
	if !ok {
		t.Fatalf("New(true) gave %q, want a uring pool", e.Name())
	}
	return e, p
}

// poolState reads the pool bookkeeping under its lock.
func poolState(p *uringPool) (live, idle int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.live, len(p.idle)
}

// checkout takes a ring out of the pool the way an Engine call does, so a test
// can hold it and force the next call onto another ring. The ring goes back at
// the latest when the test ends (before the engine's Close, which would wait
// for it forever), or after holdLimit with a test error, so that a call wrongly
// waiting for a held ring fails the test instead of hanging it.
func checkout(t *testing.T, p *uringPool) *heldRing {
	t.Helper()
	r, err := p.get()
	if err != nil {
		t.Fatal(err)
	}
	u, ok := r.(*uringRing)
	if !ok {
		t.Fatalf("get returned %T, want a ring", r)
	}
	h := &heldRing{uringRing: u, p: p}
	h.timer = time.AfterFunc(holdLimit, func() {
		t.Errorf("a test held a ring for %v; some call must have waited for it", holdLimit)
		h.put()
	})
	t.Cleanup(h.put)
	return h
}

const holdLimit = 5 * time.Second

type heldRing struct {
	*uringRing
	p     *uringPool
	timer *time.Timer
	once  sync.Once
}

// put returns the ring to the pool; later calls do nothing.
func (h *heldRing) put() {
	h.timer.Stop()
	h.once.Do(func() { h.p.put(h.uringRing) })
}

// writeFile creates a file holding data (written with the os package, so the
// engine under test is only trusted for what it reads).
func writeFile(t *testing.T, name string, data []byte) *os.File {
	t.Helper()
	f := tempFile(t, name)
	if _, err := f.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestConcurrentMixed hammers one io_uring Engine from many goroutines with
// every kind of call, checks every byte, and checks that the calls really
// spread over several rings.
func TestConcurrentMixed(t *testing.T) {
	e, p := newURing(t)
	const (
		workers = 16
		rounds  = 25
		region  = 48<<10 + 100 // per worker; odd so offsets and lengths are unaligned
	)
	shared := tempFile(t, "shared")
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	start := make(chan struct{})
	for g := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			base := int64(g) * region
			for r := range rounds {
				want := pattern(region, byte(g*rounds+r))
				if err := e.WriteAt(shared, want, base); err != nil {
					errc <- fmt.Errorf("worker %d round %d write: %w", g, r, err)
					return
				}
				got := make([]byte, region)
				if err := e.ReadAt(shared, got, base); err != nil || !bytes.Equal(got, want) {
					errc <- fmt.Errorf("worker %d round %d read: %v (equal=%v)", g, r, err, bytes.Equal(got, want))
					return
				}
				// A batch of 40 (> QueueDepth) small pieces of the region.
				reqs := make([]Request, 40)
				for i := range reqs {
					off := (i * 1187) % (region - 700)
					reqs[i] = Request{File: shared, Buf: make([]byte, 700), Off: base + int64(off)}
				}
				for i, err := range e.ReadBatch(reqs) {
					off := reqs[i].Off - base
					if err != nil || !bytes.Equal(reqs[i].Buf, want[off:off+700]) {
						errc <- fmt.Errorf("worker %d round %d batch %d: %v", g, r, i, err)
						return
					}
				}
				if r%5 == 0 {
					if err := e.Datasync(shared); err != nil {
						errc <- fmt.Errorf("worker %d datasync: %w", g, err)
						return
					}
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	// The file must hold every worker's last round, byte for byte.
	disk, err := os.ReadFile(shared.Name())
	if err != nil {
		t.Fatal(err)
	}
	if len(disk) != workers*region {
		t.Fatalf("file is %d bytes, want %d", len(disk), workers*region)
	}
	for g := range workers {
		if !bytes.Equal(disk[g*region:(g+1)*region], pattern(region, byte(g*rounds+rounds-1))) {
			t.Fatalf("worker %d: final bytes on disk differ", g)
		}
	}
	if n := p.created.Load(); n < 2 {
		t.Fatalf("%d ring(s) created for %d concurrent workers; want several", n, workers)
	}
	if n := p.created.Load(); n > int64(p.max) {
		t.Fatalf("%d rings created, cap is %d", n, p.max)
	}
	live, idle := poolState(p)
	if live != idle {
		t.Fatalf("after all calls returned: %d live rings but %d idle", live, idle)
	}
}

// While one ring is checked out, a call must run on a second ring instead of
// waiting for the first.
func TestCallRunsOnAnotherRing(t *testing.T) {
	e, p := newURing(t)
	f := writeFile(t, "r", pattern(8192, 1))
	held := checkout(t, p)
	got := make([]byte, 8192)
	if err := e.ReadAt(f, got, 0); err != nil || !bytes.Equal(got, pattern(8192, 1)) {
		t.Fatalf("read while a ring is held: %v", err)
	}
	if n := p.created.Load(); n != 2 {
		t.Fatalf("%d rings created, want 2", n)
	}
	held.put()
	if live, idle := poolState(p); live != 2 || idle != 2 {
		t.Fatalf("live %d idle %d, want 2 and 2", live, idle)
	}
	// With both idle, the next call reuses one instead of creating a third.
	if err := e.ReadAt(f, got, 0); err != nil {
		t.Fatal(err)
	}
	if n := p.created.Load(); n != 2 {
		t.Fatalf("%d rings created after reuse, want 2", n)
	}
}

// At the cap, a call waits for a ring to come back rather than creating one.
func TestPoolCapWaits(t *testing.T) {
	e, p := newURing(t)
	p.max = 2 // before any concurrent use
	f := writeFile(t, "cap", pattern(4096, 2))
	a, b := checkout(t, p), checkout(t, p)
	done := make(chan error, 1)
	got := make([]byte, 4096)
	go func() { done <- e.ReadAt(f, got, 0) }()
	select {
	case err := <-done:
		t.Fatalf("call at the cap did not wait (err %v)", err)
	case <-time.After(50 * time.Millisecond):
	}
	a.put()
	select {
	case err := <-done:
		if err != nil || !bytes.Equal(got, pattern(4096, 2)) {
			t.Fatalf("read after a ring came back: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("call still waiting after a ring was returned")
	}
	b.put()
	if n := p.created.Load(); n != 2 {
		t.Fatalf("%d rings created, want 2 (the cap)", n)
	}
}

// If an extra ring cannot be created, the call runs on pread and succeeds.
func TestRingCreateFallback(t *testing.T) {
	e, p := newURing(t)
	logs := captureLog(t)
	data := pattern(20000, 3)
	f := writeFile(t, "fb", data)
	held := checkout(t, p)
	defer held.put()
	probeHook = func() error { return errors.New("simulated ring creation failure") }
	t.Cleanup(func() { probeHook = nil })

	_, plain0 := e.Counters()
	got := make([]byte, len(data))
	if err := e.ReadAt(f, got, 0); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read on the pread fallback: %v", err)
	}
	if err := e.WriteAt(f, []byte("hello"), 7); err != nil {
		t.Fatal(err)
	}
	errs := e.ReadBatch([]Request{{File: f, Buf: got[:10], Off: 5}})
	if errs[0] != nil || string(got[2:7]) != "hello" {
		t.Fatalf("batch on the pread fallback: %v %q", errs[0], got[:10])
	}
	if err := e.Datasync(f); err != nil {
		t.Fatal(err)
	}
	if _, plain := e.Counters(); plain <= plain0 {
		t.Fatal("fallback reads not counted as plain reads")
	}
	if n := p.created.Load(); n != 1 {
		t.Fatalf("%d rings created, want only the first", n)
	}
	if live, _ := poolState(p); live != 1 {
		t.Fatalf("failed creations leaked slots: live %d, want 1", live)
	}
	if c := strings.Count(logs.String(), "level=WARN"); c != 1 {
		t.Fatalf("want exactly one warning for repeated creation failures, got %d: %s", c, logs.String())
	}
}

// A ring that breaks fails the call that was using it, is dropped, and the
// next call gets a fresh ring and succeeds.
func TestBrokenRingReplaced(t *testing.T) {
	e, p := newURing(t)
	data := pattern(100000, 4)
	f := writeFile(t, "br", data)
	first := checkout(t, p)
	first.put()

	var fails atomic.Int32
	fails.Store(1)
	injected := errors.New("injected ring failure")
	submitHook = func() error {
		if fails.Add(-1) >= 0 {
			return injected
		}
		return nil
	}
	t.Cleanup(func() { submitHook = nil })

	errs := e.ReadBatch([]Request{{File: f, Buf: make([]byte, 10), Off: 0}, {File: f, Buf: make([]byte, 10), Off: 50}})
	for i, err := range errs {
		if !errors.Is(err, injected) {
			t.Fatalf("req %d on the broken ring: err %v, want the injected failure", i, err)
		}
	}
	if first.broken == nil || first.ring != nil {
		t.Fatal("the failed ring was not marked broken and closed")
	}
	if live, idle := poolState(p); live != 0 || idle != 0 {
		t.Fatalf("broken ring kept in the pool: live %d idle %d", live, idle)
	}
	got := make([]byte, len(data))
	if err := e.ReadAt(f, got, 0); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read after the ring broke: %v", err)
	}
	if n := p.created.Load(); n != 2 {
		t.Fatalf("%d rings created, want 2 (the broken one and its replacement)", n)
	}
	next := checkout(t, p)
	defer next.put()
	if next.uringRing == first.uringRing || next.broken != nil {
		t.Fatal("pool handed out the broken ring again")
	}
}

func TestCloseIdle(t *testing.T) {
	e, p := newURing(t)
	f := tempFile(t, "ci")
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if live, idle := poolState(p); live != 0 || idle != 0 {
		t.Fatalf("after Close: live %d idle %d", live, idle)
	}
	checkClosed(t, e, f)
}

func TestCloseAfterUse(t *testing.T) {
	e, p := newURing(t)
	f := writeFile(t, "cu", pattern(4096, 5))
	held := checkout(t, p)
	if err := e.ReadAt(f, make([]byte, 100), 0); err != nil { // creates a second ring
		t.Fatal(err)
	}
	held.put()
	rings := append([]*uringRing(nil), p.idle...)
	if len(rings) != 2 {
		t.Fatalf("%d idle rings, want 2", len(rings))
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	for i, u := range rings {
		if u.ring != nil {
			t.Fatalf("ring %d still open after Close", i)
		}
	}
	checkClosed(t, e, f)
	if err := e.Close(); err != nil {
		t.Fatal("second Close:", err)
	}
}

// Close must wait for a ring that is checked out, then close it, and wake
// calls waiting for a ring with os.ErrClosed.
func TestCloseWaitsForCheckedOut(t *testing.T) {
	e, p := newURing(t)
	p.max = 1
	f := writeFile(t, "cw", pattern(4096, 6))
	held := checkout(t, p)
	waiter := make(chan error, 1)
	go func() { waiter <- e.ReadAt(f, make([]byte, 10), 0) }() // blocks at the cap
	time.Sleep(20 * time.Millisecond)
	closed := make(chan error, 1)
	go func() { closed <- e.Close() }()
	select {
	case err := <-waiter:
		if !errors.Is(err, os.ErrClosed) {
			t.Fatalf("call waiting for a ring: err %v, want os.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not wake the waiting call")
	}
	select {
	case <-closed:
		t.Fatal("Close returned while a ring was checked out")
	case <-time.After(50 * time.Millisecond):
	}
	// The holder can still finish its I/O on the ring it has.
	buf := make([]byte, 4096)
	o := &op{fd: int(f.Fd()), buf: buf}
	held.run([]*op{o})
	if o.err != nil || !bytes.Equal(buf, pattern(4096, 6)) {
		t.Fatalf("in-flight call during Close: %v", o.err)
	}
	held.put()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return after the ring came back")
	}
	if held.ring != nil {
		t.Fatal("returned ring not closed")
	}
	if live, idle := poolState(p); live != 0 || idle != 0 {
		t.Fatalf("after Close: live %d idle %d", live, idle)
	}
	checkClosed(t, e, f)
}

// Close racing with many calls: each call either succeeds with the right
// bytes or fails with os.ErrClosed; no ring survives.
func TestCloseDuringIO(t *testing.T) {
	e, p := newURing(t)
	data := pattern(64<<10, 7)
	f := writeFile(t, "cd", data)
	var wg sync.WaitGroup
	errc := make(chan error, 8)
	var ok atomic.Int64
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				got := make([]byte, 4096)
				off := int64((g*7 + i) % 15 * 4096)
				var err error
				if i%3 == 2 {
					err = e.ReadBatch([]Request{{File: f, Buf: got, Off: off}})[0]
				} else {
					err = e.ReadAt(f, got, off)
				}
				if errors.Is(err, os.ErrClosed) {
					return
				}
				if err != nil || !bytes.Equal(got, data[off:off+4096]) {
					errc <- fmt.Errorf("goroutine %d call %d: %v", g, i, err)
					return
				}
				ok.Add(1)
			}
		}()
	}
	for deadline := time.Now().Add(5 * time.Second); ok.Load() < 200 && len(errc) == 0; {
		if time.Now().After(deadline) {
			t.Fatal("calls made no progress")
		}
		time.Sleep(time.Millisecond)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if live, idle := poolState(p); live != 0 || idle != 0 {
		t.Fatalf("Close returned with live %d idle %d", live, idle)
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
}

func checkClosed(t *testing.T, e Engine, f *os.File) {
	t.Helper()
	if err := e.ReadAt(f, make([]byte, 1), 0); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("ReadAt after Close: %v", err)
	}
	if err := e.WriteAt(f, []byte("x"), 0); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("WriteAt after Close: %v", err)
	}
	if err := e.ReadBatch([]Request{{File: f, Buf: make([]byte, 1)}})[0]; !errors.Is(err, os.ErrClosed) {
		t.Fatalf("ReadBatch after Close: %v", err)
	}
	if err := e.Datasync(f); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("Datasync after Close: %v", err)
	}
	mem := AlignedBuffer(4096, 0)
	defer FreeAligned(mem)
	if err := e.RegisterFixed(mem); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("RegisterFixed after Close: %v", err)
	}
}
