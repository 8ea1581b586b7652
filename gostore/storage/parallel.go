package storage

import "sync"

// offloadWorkers is how many objects of one batch the file-per-key and
// offset-allocator backends write at once: each write ends with its own
// datasync, and a disk serves many of those in parallel far faster than
// one after the other.
const offloadWorkers = 16

// forEach runs fn(i) for every i in [0, n) on up to workers goroutines and
// returns when all have returned.
func forEach(n, workers int, fn func(i int)) {
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
