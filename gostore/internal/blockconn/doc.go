// doc.go defines the package documentation of blockconn.

// Package blockconn holds the two ways gostore keeps thread wake-ups off a
// small request's path, one per side of a connection; it imports nothing of
// gostore.
//
// Conn, the client side: a connected TCP socket taken out of Go's
// netpoller and read and written with blocking system calls on the calling
// thread. The master's RPC client and the transfer engine's lane for single
// small requests both use it.
//
// Polled, the server side: a connection that stays in the netpoller but,
// once it has answered a client that keeps calling, polls for the next
// request before it parks (polled.go says when it polls and what bounds
// it). The master's RPC server and the transfer servers use it, all of a
// process's under one SharedGate.
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
// Invariants: a Conn or a Polled is used by one goroutine at a time (its
// owner serialises calls); only Close may come from another goroutine. A
// Conn's deadlines are SO_RCVTIMEO/SO_SNDTIMEO: they bound each system
// call, not a whole frame, so a frame read of k calls may take up to k
// deadlines, each up to a 64th shorter than asked (SetDeadline keeps a
// timeout that close). A Polled's are the netpoller's, noticed once a
// poll ends.
//
// Caller's duties: set a deadline before each exchange (SetDeadline makes
// no system call while the timeout already set is no longer than the time
// left and short of it by at most a 64th), and close the Conn after any
// error: its stream may be out of step.
package blockconn
