// fanout.go runs f over indexes or ranges on several goroutines.

package fanout

import (
	"sync"
	"sync/atomic"
)

// Each calls f(i) for every i in [0, n) on up to workers goroutines, each
// taking the next index as it finishes one.
func Each(n, workers int, f func(i int)) {
	workers = min(workers, n)
	if workers < 2 {
		for i := range n {
			f(i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				f(i)
			}
		}()
	}
	wg.Wait()
}

// Ranges cuts [0, n) into up to workers contiguous ranges of equal size
// (the last may be shorter) and calls f(w, lo, hi) for range w on a
// goroutine of its own.
func Ranges(n, workers int, f func(w, lo, hi int)) {
	if workers < 2 || n < 2 {
		if n > 0 {
			f(0, 0, n)
		}
		return
	}
	share := (n + workers - 1) / workers
	var wg sync.WaitGroup
	for w := 0; w*share < n; w++ {
		lo, hi := w*share, min((w+1)*share, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(w, lo, hi)
		}()
	}
	wg.Wait()
}
