// Package rpc carries master RPCs: wire frames with msgpack bodies over TCP.
//
// The Server runs one goroutine per connection that reads a frame, calls the
// handler registered for its opcode and appends the response; responses are
// flushed when no further request is already buffered, so a pipelining
// caller gets one write per burst. A frame that cannot be parsed or decoded
// closes that connection only (and is logged): a peer can never take the
// server down.
//
// Client keeps a pool of connections and runs one call at a time on each.
// By default it reads replies with blocking system calls on the calling
// thread (blocking.go), the lowest latency for a call from Python; a
// process that runs the master itself asks for the netpoller instead
// (ClientOptions.Netpoll). The choice is per Client, made by whoever
// creates it: this package keeps no process-wide setting.
//
// A caller that wants to measure its calls installs ClientOptions.Observe,
// told of each Call's op, duration and error; this package holds no
// metrics of its own.
package rpc
