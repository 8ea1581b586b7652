// Package ucx moves bytes between processes with UCX's UCP one-sided
// operations (put/get to a peer's registered memory), over whatever
// transport UCX picks: tcp, shared memory (posix, sysv), cma, verbs, CUDA.
//
// libucp is opened at run time (dlopen) and every entry point is bound
// from its handle, so gostore builds without libucx (the headers are
// vendored in third_party/ucx, UCX 1.13: UCX keeps its ABI within 1.x by
// field masks) and runs where no UCX exists, with Probe saying why not.
// The library is one per process: the edge chooses it with
// Configure(Options{Library}) before the first Probe or NewContext (the
// bindings pass GOSTORE_LIBUCX); this package reads no environment.
//
// Owns: a Context (features RMA and WAKEUP; NET_DEVICES, TLS and
// MAX_RNDV_RAILS from ContextOptions, the process's UCX_* env otherwise);
// Exposures, each a registered range with its own worker progressed by a
// goroutine locked to an OS thread that sleeps on the worker's event fd;
// Workers, the initiators, with endpoints and unpacked rkeys cached per
// peer worker address.
//
// Invariants:
//   - A Desc is checked (magic, version, lengths, checksum) before any of
//     it reaches UCX; malformed is wire.ErrInvalidParams. An op is checked
//     against the exposed size before it is posted.
//   - Do returns only when no request references the caller's memory: on
//     ctx end the endpoints involved are force-closed and progressed until
//     every request ended. Go memory is pinned while in flight.
//   - Writes are flushed: when Do returns nil for a put, the bytes are in
//     the peer's memory.
//   - Endpoints use UCP_ERR_HANDLING_MODE_PEER: a dead peer or a closed
//     exposure is an error (wire.ErrTransferFail) and drops the endpoint
//     and its rkeys from the cache.
//   - Closing an Exposure destroys its worker before unregistering the
//     memory: a peer holding the old Desc gets an error, never bytes.
//
// Callers' duties: close Workers and Exposures before their Context (a
// Context with live children refuses to close and logs it); close an
// Exposure before freeing its memory; hand Descs (they hold remote keys)
// only to authenticated peers. The owner cannot police peers' one-sided
// ops: on verbs the NIC checks the rkey's range; on tcp and shared memory
// UCX's software RMA does not.
package ucx
