package fileio

import "sync"

// ForEach runs fn(i) for every i in [0, n) on up to workers goroutines and
// returns when all have returned. A disk serves concurrent requests far
// faster than a sequence of them; callers without a ring use this to keep
// several in flight.
func ForEach(n, workers int, fn func(i int)) {
	if n <= 1 || workers <= 1 {
		for i := range n {
			fn(i)
		}
		return
	}
	var wg sync.WaitGroup
	next := make(chan int)
	for range min(n, workers) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				fn(i)
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}
