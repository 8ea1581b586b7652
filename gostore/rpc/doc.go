// Package rpc carries master RPCs: wire frames with msgpack bodies over TCP.
//
// The Server runs one goroutine per connection that reads a frame, calls the
// handler registered for its opcode and appends the response; responses are
// flushed when no further request is already buffered, so a pipelining
// caller gets one write per burst. A frame that cannot be parsed or decoded
// closes that connection only (and is logged): a peer can never take the
// server down.
//
// Two clients serve two kinds of caller. Client keeps a pool of connections
// and runs one call at a time on each; it reads replies with blocking system
// calls on the calling thread (blocking.go), the lowest latency for a call
// from Python. MuxClient pipelines many concurrent callers over a few shared
// connections, coalescing their frames into single writes: the throughput
// choice for a process with many goroutines calling at once.
package rpc
