// Package rpc carries master RPCs: wire frames with msgpack bodies over TCP.
//
// The Server runs one goroutine per connection that reads a frame, calls the
// handler registered for its opcode and appends the response; responses are
// flushed when no further request is already buffered, so a pipelining
// caller gets one write per burst. A frame that cannot be parsed or decoded
// closes that connection only (and is logged): a peer can never take the
// server down.
//
// The Client keeps a pool of connections and runs one call at a time on
// each, which measured the lowest single-call latency (no goroutine hand-off
// on the reply path); concurrency comes from the pool.
package rpc
