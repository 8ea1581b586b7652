// doc.go defines the package documentation of blockconn.

// Package blockconn holds Conn: a connected TCP socket taken out of Go's
// netpoller and read and written with blocking system calls on the calling
// thread. The master's RPC client and the transfer engine's lane for single
// small requests both use it; it imports nothing of gostore.
//
// Why: a call from Python arrives through cgo on a goroutine locked to the
// Python thread. When a net.Conn read would block, that goroutine parks,
// the netpoller wakes another thread when the reply lands, and that thread
// hands the goroutine back: two extra thread wake-ups per round trip, which
// measured 2–5× the whole round trip of a small get on these machines. A
// blocking read sleeps in the kernel on the caller's own thread and is
// woken once, directly, as a C client would be. The Go runtime lets other
// goroutines run meanwhile (the thread is in a system call).
//
// Invariants: a Conn is used by one goroutine at a time (its owner
// serialises calls); only Close may come from another goroutine. Deadlines
// are SO_RCVTIMEO/SO_SNDTIMEO: they bound each system call, not a whole
// frame, so a frame read of k calls may take up to k deadlines.
//
// Caller's duties: set a deadline before each exchange (SetDeadline is
// free when it did not move), and close the Conn after any error: its
// stream may be out of step.
package blockconn
