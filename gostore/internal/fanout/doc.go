// doc.go defines the package documentation of fanout.

// Package fanout spreads a loop over goroutines: Each hands out indexes to
// workers that take the next one as they finish one (the master's shard
// sweeps, a batch of copies), Ranges cuts [0, n) into one contiguous range
// per worker (a large copy split by bytes).
//
// Both return when every call of f returned, so the caller's memory may be
// used again at once; f runs concurrently with itself and must not touch
// state another call writes. With fewer than two workers f runs on the
// caller's goroutine and no goroutine is started. The package owns no
// state and imports only the standard library, so any package may use it.
package fanout
