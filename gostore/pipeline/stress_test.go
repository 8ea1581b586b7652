package pipeline

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"
)

// TestStress runs many concurrent Enqueue/Cancel calls against fakes whose
// behaviour is drawn from a seeded rand per key, closes the pipeline while
// Enqueues are still arriving, and checks: every accepted item got exactly
// one done call, no pins are left, and no item reported cancelled was
// transferred.
func TestStress(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		stress(t, seed)
	}
}

type randStage struct{ seed uint64 }

func (r randStage) rng(k, salt int) *rand.Rand {
	return rand.New(rand.NewPCG(r.seed, uint64(k)<<8|uint64(salt)))
}

type stressPolicy struct{ randStage }

func (s stressPolicy) Admit(ctx context.Context, it Item[int]) bool {
	return s.rng(it.Key, 1).IntN(20) != 0
}

type stressPre struct{ randStage }

func (s stressPre) Wait(ctx context.Context, it Item[int]) error {
	r := s.rng(it.Key, 2)
	switch r.IntN(10) {
	case 0:
		return errors.New("precondition failed")
	case 1, 2:
		select { // a replica that is slow to complete
		case <-time.After(time.Duration(r.IntN(200)) * time.Microsecond):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for range r.IntN(4) {
		runtime.Gosched()
	}
	return nil
}

type stressUpgrader struct {
	fakeUpgrader
	randStage
}

func (s *stressUpgrader) Upgrade(ctx context.Context, items []Item[int]) (func(), error) {
	if s.rng(items[0].Key, 3).IntN(30) == 0 {
		return nil, errors.New("evicted")
	}
	return s.fakeUpgrader.Upgrade(ctx, items)
}

func stress(t *testing.T, seed uint64) {
	g0 := runtime.NumGoroutine()
	rs := randStage{seed}
	up := &stressUpgrader{randStage: rs}
	ex := &fakeExec{
		up: &up.fakeUpgrader,
		errFor: func(k int) error {
			if rs.rng(k, 4).IntN(20) == 0 {
				return errors.New("io error")
			}
			return nil
		},
		panicOn: func(items []Item[int]) bool { return rs.rng(items[0].Key, 5).IntN(50) == 0 },
	}
	rec := &recorder{}
	p := New[int](Config{MaxBatch: 8, MinBatch: 2, FlushInterval: 200 * time.Microsecond, QueueDepth: 16, Workers: 3},
		stressPolicy{rs}, stressPre{rs}, up, ex, rec.done)

	const producers, perProducer = 8, 300
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		accepted = map[int]Handle{}
	)
	closeAt := make(chan struct{})
	for g := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, uint64(1000+g)))
			for i := range perProducer {
				if i == perProducer*3/4 && g == 0 {
					close(closeAt)
				}
				k := g*perProducer + i
				ctx, cancel := context.Background(), context.CancelFunc(func() {})
				if r.IntN(10) == 0 {
					ctx, cancel = context.WithCancel(ctx)
				}
				hd, err := p.Enqueue(ctx, Item[int]{Key: k, Size: 1})
				if err != nil {
					cancel()
					continue
				}
				mu.Lock()
				accepted[k] = hd
				mu.Unlock()
				switch r.IntN(6) {
				case 0:
					hd.Cancel()
				case 1:
					spins := r.IntN(50)
					go func() {
						for range spins {
							runtime.Gosched()
						}
						hd.Cancel()
						cancel()
					}()
					continue
				}
				cancel()
			}
		}()
	}
	<-closeAt
	p.Close()
	wg.Wait()

	for k, hd := range accepted {
		select {
		case <-hd.Done():
		case <-time.After(waitLimit):
			t.Fatalf("seed %d: item %d never done", seed, k)
		}
		calls := rec.calls(k)
		if len(calls) != 1 {
			t.Fatalf("seed %d: item %d: %d done calls", seed, k, len(calls))
		}
		if errors.Is(calls[0], context.Canceled) && ex.transferred(k) {
			t.Fatalf("seed %d: item %d transferred after being reported cancelled", seed, k)
		}
	}
	if n := up.outstanding.Load(); n != 0 {
		t.Fatalf("seed %d: %d pins outstanding", seed, n)
	}
	if n := up.doubles.Load() + ex.unpin.Load(); n != 0 {
		t.Fatalf("seed %d: %d double releases or unpinned transfers", seed, n)
	}
	s := p.Stats()
	var cancelled uint64
	for _, c := range s.Cancelled {
		cancelled += c
	}
	if got := s.Rejected + cancelled + s.PreconditionFailed + s.UpgradeFailed + s.Transferred + s.Failed; got != s.Enqueued || s.Enqueued != uint64(len(accepted)) {
		t.Fatalf("seed %d: outcomes %d, enqueued %d, accepted %d: %+v", seed, got, s.Enqueued, len(accepted), s)
	}
	if s.Transferred == 0 || cancelled == 0 {
		t.Fatalf("seed %d: stress did not exercise both paths: %+v", seed, s)
	}
	t.Logf("seed %d: %+v", seed, s)
	waitGoroutines(t, g0)
}
