// Package rpc carries master RPCs: wire frames with msgpack bodies over TCP.
//
// The Server runs one goroutine per connection that reads a frame, calls the
// handler registered for its opcode and appends the response; responses are
// flushed when no further request is already buffered, so a pipelining
// caller gets one write per burst. A frame that cannot be parsed or decoded
// closes that connection only (and is logged): a peer can never take the
// server down.
//
// ServerOptions bound what one peer may ask (limits.go): the largest
// request body (a larger one within wire.MaxBody is dropped and answered
// INVALID_PARAMS, the connection goes on), the connections from one IP
// address (one more has its first request answered RPC_FAIL, then is
// closed) and the requests in flight from one IP address (one more waits
// for a slot: backpressure, not an error). Admit lets the master vet each
// decoded request against its own limits before the handler runs. Every
// refusal names the limit and the setting behind it, and each kind logs
// one line per 10 s at most.
//
// Invariants
//   - A connection runs one request at a time: it reads the next frame
//     only once the last one's answer is written (buffered).
//   - A request holds one of its address's in-flight slots from before its
//     body is read until its handler returns; nothing holding a slot waits
//     for another slot, so every wait ends.
//   - An address is counted (Server.mu.peers) exactly while it has a served
//     connection; a refused connection is never counted.
//
// Client keeps a pool of connections and runs one call at a time on each.
// By default it reads replies with blocking system calls on the calling
// thread (gostore/internal/blockconn), the lowest latency for a call from Python; a
// process that runs the master itself asks for the netpoller instead
// (ClientOptions.Netpoll). The choice is per Client, made by whoever
// creates it: this package keeps no process-wide setting.
//
// A connection the client made without authentication whose first read
// fails says what the peer is when its bytes tell (wire.FirstReadError:
// an HTTP port, a master that requires a secret or TLS), instead of the
// body length a header of foreign bytes would announce.
//
// Notifications are requests whose answers the caller does not wait for
// (the client's ReadDone): Notify writes one at once on the connection the
// next call will take; NotifyLater queues one for the next call's write,
// or for a timer when no call comes in time. Their answers are read by the
// next call on that connection, ahead of its own, or by NotifyFlush, which
// returns once the master has handled every one sent before it.
//
// A call ends when its context does: a reply awaited on a blocking
// connection is woken by shutting the connection down (which is then
// dropped), and the error carries the context's cause when that has a
// code (context.Cause), RPC_TIMEOUT at its deadline. A call on an ended
// context fails without touching the network.
//
// A caller that wants to measure its calls installs ClientOptions.Observe,
// told of each Call's op, duration and error; this package holds no
// metrics of its own.
package rpc
