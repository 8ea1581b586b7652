// fakes_test.go defines the fake stages and the test harness: stages that
// can be held open with channels, an Upgrader that counts pins, and a done
// recorder that checks exactly-once delivery.

package pipeline

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const waitLimit = 5 * time.Second

type fakePolicy struct {
	reject  func(int) bool
	hold    map[int]chan struct{} // Admit blocks until closed or ctx done
	entered chan int
}

func (f *fakePolicy) Admit(ctx context.Context, it Item[int]) bool {
	if f.entered != nil {
		f.entered <- it.Key
	}
	if ch := f.hold[it.Key]; ch != nil {
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
	return f.reject == nil || !f.reject(it.Key)
}

type fakePre struct {
	hold    map[int]chan error // Wait returns what is sent, or ctx's error
	entered chan int
}

func (f *fakePre) Wait(ctx context.Context, it Item[int]) error {
	if f.entered != nil {
		f.entered <- it.Key
	}
	if ch := f.hold[it.Key]; ch != nil {
		select {
		case err := <-ch:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

type fakeUpgrader struct {
	outstanding atomic.Int64 // pinned items not yet released
	doubles     atomic.Int64 // release called more than once
	calls       atomic.Int64
	fail        func([]Item[int]) error
	hold        chan struct{}
	entered     chan []int
}

func (f *fakeUpgrader) Upgrade(_ context.Context, items []Item[int]) (func(), error) {
	f.calls.Add(1)
	if f.entered != nil {
		f.entered <- keys(items)
	}
	if f.hold != nil {
		<-f.hold
	}
	if f.fail != nil {
		if err := f.fail(items); err != nil {
			return nil, err
		}
	}
	n := int64(len(items))
	f.outstanding.Add(n)
	var once atomic.Bool
	return func() {
		if !once.CompareAndSwap(false, true) {
			f.doubles.Add(1)
			return
		}
		f.outstanding.Add(-n)
	}, nil
}

type fakeExec struct {
	up      *fakeUpgrader
	mu      sync.Mutex
	batches [][]int
	seen    map[int]bool
	unpin   atomic.Int64 // transfers that ran without pins
	errFor  func(int) error
	panicOn func([]Item[int]) bool
	short   bool // return a wrong-length result
	hold    chan struct{}
	entered chan []int
}

func (f *fakeExec) Transfer(ctx context.Context, items []Item[int]) []error {
	if ctx.Err() != nil {
		panic("transfer context is cancelled")
	}
	if f.up != nil && f.up.outstanding.Load() < int64(len(items)) {
		f.unpin.Add(1)
	}
	f.mu.Lock()
	f.batches = append(f.batches, keys(items))
	if f.seen == nil {
		f.seen = map[int]bool{}
	}
	for _, it := range items {
		f.seen[it.Key] = true
	}
	f.mu.Unlock()
	if f.entered != nil {
		f.entered <- keys(items)
	}
	if f.hold != nil {
		<-f.hold
	}
	if f.panicOn != nil && f.panicOn(items) {
		panic("boom")
	}
	if f.short {
		return []error{nil}
	}
	if f.errFor == nil {
		return nil
	}
	errs := make([]error, len(items))
	for i, it := range items {
		errs[i] = f.errFor(it.Key)
	}
	return errs
}

func (f *fakeExec) transferred(k int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.seen[k]
}

func (f *fakeExec) allBatches() [][]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.batches)
}

type recorder struct {
	mu   sync.Mutex
	errs map[int][]error
}

func (r *recorder) done(it Item[int], err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.errs == nil {
		r.errs = map[int][]error{}
	}
	r.errs[it.Key] = append(r.errs[it.Key], err)
}

func (r *recorder) calls(k int) []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.errs[k])
}

func keys(items []Item[int]) []int {
	ks := make([]int, len(items))
	for i, it := range items {
		ks[i] = it.Key
	}
	return ks
}

// harness wires fakes into a pipeline whose flush clock is driven by
// hand (tick) and whose batcher reports its size (pending).
type harness struct {
	t       *testing.T
	p       *Pipeline[int]
	pol     *fakePolicy
	pre     *fakePre
	up      *fakeUpgrader
	ex      *fakeExec
	rec     *recorder
	tick    chan time.Time
	pending chan int
	sweep   func(n int) // beforeSweep hook, set before enqueueing
}

func newHarness(t *testing.T, cfg Config, setup func(*harness)) *harness {
	t.Helper()
	g0 := runtime.NumGoroutine()
	h := &harness{
		t:       t,
		pol:     &fakePolicy{hold: map[int]chan struct{}{}},
		pre:     &fakePre{hold: map[int]chan error{}},
		up:      &fakeUpgrader{},
		rec:     &recorder{},
		tick:    make(chan time.Time),
		pending: make(chan int, 1024),
	}
	h.ex = &fakeExec{up: h.up}
	if setup != nil {
		setup(h)
	}
	hk := hooks{
		tick:      h.tick,
		onPending: func(n int) { h.pending <- n },
		beforeSweep: func(n int) {
			if h.sweep != nil {
				h.sweep(n)
			}
		},
	}
	h.p = start[int](cfg, h.pol, h.pre, h.up, h.ex, h.rec.done, hk)
	t.Cleanup(func() {
		h.p.Close()
		if n := h.up.outstanding.Load(); n != 0 {
			t.Errorf("%d pins outstanding after Close", n)
		}
		if n := h.up.doubles.Load(); n != 0 {
			t.Errorf("release called twice %d times", n)
		}
		if n := h.ex.unpin.Load(); n != 0 {
			t.Errorf("%d transfers ran without pins", n)
		}
		waitGoroutines(t, g0)
	})
	return h
}

// waitGoroutines polls until the goroutine count is back to g0.
func waitGoroutines(t *testing.T, g0 int) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for runtime.NumGoroutine() > g0 {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("goroutine leak: %d > %d\n%s", runtime.NumGoroutine(), g0, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(time.Millisecond)
	}
}

func (h *harness) enqueue(k int) Handle {
	h.t.Helper()
	hd, err := h.p.Enqueue(context.Background(), Item[int]{Key: k, Size: uint64(k)})
	if err != nil {
		h.t.Fatalf("Enqueue(%d): %v", k, err)
	}
	return hd
}

// wait returns the handle's error once done, and checks done was called
// exactly once with it.
func (h *harness) wait(k int, hd Handle) error {
	h.t.Helper()
	select {
	case <-hd.Done():
	case <-time.After(waitLimit):
		h.t.Fatalf("item %d: not done", k)
	}
	calls := h.rec.calls(k)
	if len(calls) != 1 {
		h.t.Fatalf("item %d: done called %d times", k, len(calls))
	}
	if !errors.Is(calls[0], hd.Err()) && calls[0] != hd.Err() {
		h.t.Fatalf("item %d: done got %v, handle %v", k, calls[0], hd.Err())
	}
	return hd.Err()
}

// waitPending waits until the batcher reports holding n containers.
func (h *harness) waitPending(n int) {
	h.t.Helper()
	timeout := time.After(waitLimit)
	for {
		select {
		case got := <-h.pending:
			if got == n {
				return
			}
		case <-timeout:
			h.t.Fatalf("batcher never held %d", n)
		}
	}
}

func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitLimit):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}
