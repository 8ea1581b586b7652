package pipeline

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

func TestHappyPath(t *testing.T) {
	h := newHarness(t, Config{MaxBatch: 4, Workers: 2}, nil)
	var hs []Handle
	for k := range 4 {
		hs = append(hs, h.enqueue(k))
	}
	for k, hd := range hs {
		if err := h.wait(k, hd); err != nil {
			t.Fatalf("item %d: %v", k, err)
		}
	}
	b := h.ex.allBatches()
	if len(b) != 1 || len(b[0]) != 4 {
		t.Fatalf("batches %v, want one of 4", b)
	}
	s := h.p.Stats()
	if s.Enqueued != 4 || s.Upgraded != 4 || s.Transferred != 4 || s.Batches != 1 {
		t.Fatalf("stats %+v", s)
	}
}

func TestFlushBySizeAndOnClose(t *testing.T) {
	h := newHarness(t, Config{MaxBatch: 3, MinBatch: 3, Workers: 1}, nil)
	var hs []Handle
	for k := range 7 {
		hs = append(hs, h.enqueue(k))
	}
	for k := range 6 {
		if err := h.wait(k, hs[k]); err != nil {
			t.Fatal(err)
		}
	}
	h.waitPending(1) // batcher reports arrive in order: 1 2 3 1 2 3 1
	h.waitPending(1)
	h.waitPending(1) // the seventh, below MinBatch, never ticked
	if got := len(h.ex.allBatches()); got != 2 {
		t.Fatalf("%d batches before Close, want 2", got)
	}
	h.p.Close()
	if err := h.wait(6, hs[6]); err != nil {
		t.Fatalf("item flushed on Close: %v", err)
	}
	for _, b := range h.ex.allBatches() {
		if len(b) > 3 {
			t.Fatalf("batch %v exceeds MaxBatch", b)
		}
	}
	if got := len(h.ex.allBatches()); got != 3 {
		t.Fatalf("%d batches, want 3", got)
	}
}

// Items' sizes (here: their keys) close a batch once they reach
// MaxBatchBytes; an item larger than that travels alone.
func TestFlushByBytes(t *testing.T) {
	h := newHarness(t, Config{MaxBatch: 100, MinBatch: 100, MaxBatchBytes: 10, Workers: 1}, nil)
	var hs []Handle
	for _, k := range []int{4, 5, 3, 20, 1, 2} {
		hs = append(hs, h.enqueue(k))
	}
	for i, k := range []int{4, 5, 3, 20} {
		if err := h.wait(k, hs[i]); err != nil {
			t.Fatal(err)
		}
	}
	h.waitPending(3) // reports arrive in order: 1 2 3, 1 (20), 1 2
	h.waitPending(1)
	h.waitPending(2) // 1 and 2: 3 bytes, below the limit, wait for Close
	h.p.Close()
	if got, want := h.ex.allBatches(), [][]int{{4, 5, 3}, {20}, {1, 2}}; !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("batches %v, want %v", got, want)
	}
}

func TestFlushByTime(t *testing.T) {
	h := newHarness(t, Config{MaxBatch: 10, MinBatch: 2}, nil)
	h0 := h.enqueue(0)
	h.waitPending(1)
	h.tick <- time.Now() // below MinBatch: no flush
	h.tick <- time.Now() // the first tick has been handled
	h1 := h.enqueue(1)
	h.waitPending(2) // would be 1 had the first tick flushed
	h.tick <- time.Now()
	for k, hd := range []Handle{h0, h1} {
		if err := h.wait(k, hd); err != nil {
			t.Fatal(err)
		}
	}
	if b := h.ex.allBatches(); len(b) != 1 || len(b[0]) != 2 {
		t.Fatalf("batches %v, want one of 2", b)
	}
}

// TestCancelAtEveryStage holds each stage open in turn, cancels the item
// there, and checks the cancellation error, the stage counter, and that
// nothing was upgraded (newHarness checks pins at Cleanup).
func TestCancelAtEveryStage(t *testing.T) {
	type stageCase struct {
		name  string
		stage int
		cfg   Config
		setup func(h *harness)
		reach func(h *harness) // returns once item 1 is held at the stage
	}
	cases := []stageCase{{
		name: "policy", stage: StagePolicy,
		setup: func(h *harness) {
			h.pol.hold[1] = make(chan struct{})
			h.pol.entered = make(chan int, 10)
		},
		reach: func(h *harness) { recv(h.t, h.pol.entered, "policy") },
	}, {
		name: "precondition", stage: StagePrecondition,
		setup: func(h *harness) {
			h.pre.hold[1] = make(chan error)
			h.pre.entered = make(chan int, 10)
		},
		reach: func(h *harness) { recv(h.t, h.pre.entered, "precondition") },
	}, {
		name: "batcher", stage: StageBatcher, cfg: Config{MinBatch: 2},
		reach: func(h *harness) { h.waitPending(1) },
	}, {
		// One executor busy with item 0; item 1's batch waits for it.
		name: "executor-queue", stage: StageBatcher, cfg: Config{MaxBatch: 1, Workers: 1},
		setup: func(h *harness) {
			h.ex.hold = make(chan struct{})
			h.ex.entered = make(chan []int, 10)
		},
		reach: func(h *harness) {
			recv(h.t, h.ex.entered, "transfer of item 0")
			h.waitPending(1) // item 0
			h.waitPending(1) // item 1
		},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, tc.cfg, tc.setup)
			var h0 Handle
			if tc.name == "executor-queue" {
				h0 = h.enqueue(0)
			}
			h1 := h.enqueue(1)
			tc.reach(h)
			h1.Cancel()
			if err := h.wait(1, h1); !errors.Is(err, context.Canceled) {
				t.Fatalf("err %v, want context.Canceled", err)
			}
			s := h.p.Stats()
			if s.Cancelled[tc.stage] != 1 {
				t.Fatalf("stats %+v, want one cancelled at stage %d", s, tc.stage)
			}
			if h.ex.transferred(1) {
				t.Fatal("cancelled item transferred")
			}
			if h0 != nil {
				close(h.ex.hold)
				if err := h.wait(0, h0); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestCancelBeforeUpgrade cancels one container of a batch an executor
// has taken: the final sweep drops it and the rest is upgraded.
func TestCancelBeforeUpgrade(t *testing.T) {
	at, resume := make(chan int), make(chan struct{})
	h := newHarness(t, Config{MaxBatch: 3}, func(h *harness) {
		h.sweep = func(n int) { at <- n; <-resume }
		h.up.entered = make(chan []int, 10)
	})
	hs := []Handle{h.enqueue(0), h.enqueue(1), h.enqueue(2)}
	if n := recv(t, at, "executor"); n != 3 {
		t.Fatalf("batch of %d", n)
	}
	hs[1].Cancel()
	close(resume)
	if got := recv(t, h.up.entered, "upgrade"); !slices.Equal(sorted(got), []int{0, 2}) {
		t.Fatalf("upgraded %v, want [0 2]", got)
	}
	for k, hd := range hs {
		err := h.wait(k, hd)
		if k == 1 {
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled item: %v", err)
			}
		} else if err != nil {
			t.Fatalf("item %d: %v", k, err)
		}
	}
	if s := h.p.Stats(); s.Cancelled[StageUpgrade] != 1 || s.Upgraded != 2 || s.Transferred != 2 {
		t.Fatalf("stats %+v", s)
	}
}

func TestCancelByParentContext(t *testing.T) {
	h := newHarness(t, Config{}, func(h *harness) {
		h.pre.hold[1] = make(chan error)
		h.pre.entered = make(chan int, 1)
	})
	ctx, cancel := context.WithCancel(context.Background())
	hd, err := h.p.Enqueue(ctx, Item[int]{Key: 1})
	if err != nil {
		t.Fatal(err)
	}
	recv(t, h.pre.entered, "precondition")
	cancel()
	if err := h.wait(1, hd); !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v", err)
	}
	if _, err := h.p.Enqueue(ctx, Item[int]{Key: 2}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Enqueue with a done parent: %v", err)
	}
	if len(h.rec.calls(2)) != 0 {
		t.Fatal("done called for an item Enqueue refused")
	}
}

// TestCancelAfterUpgrade cancels during the upgrade and during the
// transfer: both are past the point of no return.
func TestCancelAfterUpgrade(t *testing.T) {
	h := newHarness(t, Config{MaxBatch: 1, Workers: 1}, func(h *harness) {
		h.up.hold = make(chan struct{})
		h.up.entered = make(chan []int, 10)
		h.ex.hold = make(chan struct{})
		h.ex.entered = make(chan []int, 10)
	})
	h0 := h.enqueue(0)
	recv(t, h.up.entered, "upgrade")
	h0.Cancel() // while Upgrade runs
	h.up.hold <- struct{}{}
	recv(t, h.ex.entered, "transfer")
	h0.Cancel() // while Transfer runs
	close(h.ex.hold)
	if err := h.wait(0, h0); err != nil {
		t.Fatalf("committed item: %v", err)
	}
	if s := h.p.Stats(); s.Transferred != 1 || s.Upgraded != 1 {
		t.Fatalf("stats %+v", s)
	}
	close(h.up.hold)
}

func TestOutcomes(t *testing.T) {
	errPre := errors.New("replica incomplete")
	errUp := errors.New("evicted")
	errIO := errors.New("disk full")
	h := newHarness(t, Config{MaxBatch: 1}, func(h *harness) {
		h.pol.reject = func(k int) bool { return k == 1 }
		h.pre.hold[2] = make(chan error, 1)
		h.pre.hold[2] <- errPre
		h.up.fail = func(items []Item[int]) error {
			if items[0].Key == 3 {
				return errUp
			}
			return nil
		}
		h.ex.errFor = func(k int) error {
			if k == 4 {
				return errIO
			}
			return nil
		}
	})
	want := map[int]error{0: nil, 1: ErrRejected, 2: errPre, 3: errUp, 4: errIO}
	hs := map[int]Handle{}
	for k := range want {
		hs[k] = h.enqueue(k)
	}
	for k, w := range want {
		if err := h.wait(k, hs[k]); !errors.Is(err, w) || (w == nil && err != nil) {
			t.Fatalf("item %d: %v, want %v", k, err, w)
		}
	}
	s := h.p.Stats()
	if s.Rejected != 1 || s.PreconditionFailed != 1 || s.UpgradeFailed != 1 ||
		s.Failed != 1 || s.Transferred != 1 || s.Upgraded != 2 {
		t.Fatalf("stats %+v", s)
	}
}

func TestExecutorPanicReleases(t *testing.T) {
	h := newHarness(t, Config{MaxBatch: 2, Workers: 1}, func(h *harness) {
		h.ex.panicOn = func(items []Item[int]) bool { return items[0].Key < 2 }
	})
	h0, h1 := h.enqueue(0), h.enqueue(1)
	for k, hd := range []Handle{h0, h1} {
		if err := h.wait(k, hd); !errors.Is(err, ErrTransferPanic) {
			t.Fatalf("item %d: %v", k, err)
		}
	}
	if n := h.up.outstanding.Load(); n != 0 {
		t.Fatalf("%d pins after a panic", n)
	}
	// The pipeline keeps working.
	h2, h3 := h.enqueue(2), h.enqueue(3)
	if err := h.wait(2, h2); err != nil {
		t.Fatal(err)
	}
	if err := h.wait(3, h3); err != nil {
		t.Fatal(err)
	}
}

func TestExecutorBadResult(t *testing.T) {
	h := newHarness(t, Config{MaxBatch: 2}, func(h *harness) { h.ex.short = true })
	h0, h1 := h.enqueue(0), h.enqueue(1)
	for k, hd := range []Handle{h0, h1} {
		if err := h.wait(k, hd); !errors.Is(err, ErrBadResult) {
			t.Fatalf("item %d: %v", k, err)
		}
	}
}

// TestClose: items before the batcher are cancelled with ErrClosed, the
// batcher's are flushed, a committed transfer finishes, and Enqueue then
// fails.
func TestClose(t *testing.T) {
	h := newHarness(t, Config{MinBatch: 5, MaxBatch: 5, Workers: 2}, func(h *harness) {
		h.pol.hold[0] = make(chan struct{})
		h.pol.entered = make(chan int, 10)
		h.pre.hold[1] = make(chan error)
		h.pre.entered = make(chan int, 10)
	})
	h0, h1, h2 := h.enqueue(0), h.enqueue(1), h.enqueue(2)
	for range 3 {
		recv(t, h.pol.entered, "policy")
	}
	recv(t, h.pre.entered, "precondition 1")
	h.waitPending(1) // item 2
	h.p.Close()
	for k, hd := range []Handle{h0, h1} {
		if err := h.wait(k, hd); !errors.Is(err, ErrClosed) || !errors.Is(err, context.Canceled) {
			t.Fatalf("item %d: %v, want ErrClosed", k, err)
		}
	}
	if err := h.wait(2, h2); err != nil {
		t.Fatalf("ready item not flushed on Close: %v", err)
	}
	if _, err := h.p.Enqueue(context.Background(), Item[int]{Key: 9}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Enqueue after Close: %v", err)
	}
	h.p.Close() // idempotent
}

// TestEnqueueBlocked: Enqueue blocks on a full queue and gives up, done
// never called, when its parent is cancelled or the pipeline closes.
func TestEnqueueBlocked(t *testing.T) {
	h := newHarness(t, Config{QueueDepth: 1, Workers: 1}, func(h *harness) {
		h.pol.hold[0] = make(chan struct{})
		h.pol.entered = make(chan int, 10)
	})
	h.enqueue(0)
	recv(t, h.pol.entered, "policy")
	h.enqueue(1) // fills the queue
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 2)
	go func() {
		_, err := h.p.Enqueue(ctx, Item[int]{Key: 2})
		errc <- err
	}()
	cancel()
	if err := recv(t, errc, "Enqueue 2"); !errors.Is(err, context.Canceled) {
		t.Fatalf("blocked Enqueue: %v", err)
	}
	go func() {
		_, err := h.p.Enqueue(context.Background(), Item[int]{Key: 3})
		errc <- err
	}()
	h.p.Close()
	// Close frees the queue as it cancels what is in it, so the blocked
	// Enqueue may still get its item in; either way the item ends once,
	// as closed: refused by Enqueue, or reported to done.
	switch err := recv(t, errc, "Enqueue 3"); {
	case errors.Is(err, ErrClosed):
		if len(h.rec.calls(3)) != 0 {
			t.Fatal("done called for an item Enqueue refused")
		}
	case err == nil:
		if calls := h.rec.calls(3); len(calls) != 1 || !errors.Is(calls[0], ErrClosed) {
			t.Fatalf("item accepted during Close: done calls %v, want one ErrClosed", calls)
		}
	default:
		t.Fatalf("Enqueue blocked at Close: %v", err)
	}
	if len(h.rec.calls(2)) != 0 {
		t.Fatal("done called for a refused item")
	}
	if len(h.rec.calls(0)) != 1 || len(h.rec.calls(1)) != 1 {
		t.Fatal("accepted items not finished exactly once")
	}
}

func sorted(s []int) []int { s = slices.Clone(s); slices.Sort(s); return s }
