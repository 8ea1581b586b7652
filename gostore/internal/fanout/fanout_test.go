// fanout_test.go checks that every index and every byte of a range is
// handed out exactly once, whatever the worker count.

package fanout

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
)

func TestEachCallsEveryIndexOnce(t *testing.T) {
	for _, tc := range []struct{ n, workers int }{{0, 4}, {1, 4}, {5, 1}, {5, 0}, {7, 3}, {100, 8}, {3, 10}} {
		t.Run(fmt.Sprintf("%d/%d", tc.n, tc.workers), func(t *testing.T) {
			seen := make([]atomic.Int32, tc.n)
			Each(tc.n, tc.workers, func(i int) { seen[i].Add(1) })
			for i := range seen {
				if c := seen[i].Load(); c != 1 {
					t.Fatalf("index %d called %d times", i, c)
				}
			}
		})
	}
}

func TestRangesCoverEveryPositionOnce(t *testing.T) {
	for _, tc := range []struct{ n, workers, ranges int }{
		{0, 4, 0}, {1, 4, 1}, {10, 1, 1}, {10, 3, 3}, {10, 4, 4}, {9, 4, 3}, {2, 8, 2},
	} {
		t.Run(fmt.Sprintf("%d/%d", tc.n, tc.workers), func(t *testing.T) {
			cover := make([]int, tc.n)
			var mu sync.Mutex
			var ws []int
			Ranges(tc.n, tc.workers, func(w, lo, hi int) {
				mu.Lock()
				defer mu.Unlock()
				ws = append(ws, w)
				for i := lo; i < hi; i++ {
					cover[i]++
				}
			})
			for i, c := range cover {
				if c != 1 {
					t.Fatalf("position %d covered %d times", i, c)
				}
			}
			if len(ws) != tc.ranges {
				t.Fatalf("%d ranges, want %d", len(ws), tc.ranges)
			}
		})
	}
}
