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
// MAX_RNDV_RAILS from ContextOptions, the process's UCX_* env otherwise;
// tcp's TX/RX segment size DefaultTCPSegSize unless ContextOptions or the
// process's UCX_TCP_*_SEG_SIZE say otherwise);
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
//     ctx end it progresses until its requests ended, and force-closes
//     the endpoints of those still in flight CloseDrainBound later, which
//     cancels them. Go memory is pinned while in flight.
//   - One Do's ctx end, or a Forget, does not cut short another Do's ops:
//     only a Do whose own requests outlived its ctx by CloseDrainBound,
//     or Close, force-closes an endpoint others use (UCX has no cancel
//     for one RMA request).
//   - No endpoint with peer-failure detection is closed under its own
//     requests while its peer lives (Forget, Close, a stale desc): it
//     leaves the cache at once and closes once no Do holds it (orphaned
//     canary reads get CloseDrainBound), or when cut as above; a failed
//     peer's closes at once, and Close destroys the UCP worker only after.
//     UCX's software RMA (tcp, shared memory) has the owner send a get's
//     bytes (a put's completion) from its handler, and UCX (1.13.1 to at
//     least 1.22.0: ucp_request_try_send's ucs_fatal) aborts the OWNER's
//     process when that send meets the connection of a reader that went
//     (closeEP says how). What remains: a reader that dies (or cancels
//     past the bound and then closes) while the owner answers it, which
//     no owner-side setting prevents: Info.Limits names it
//     (LimitReaderDeath) for every context with tcp.
//   - Writes are flushed: when Do returns nil for a put, the bytes are in
//     the peer's memory.
//   - A dead peer or a closed exposure is an error (wire.ErrTransferFail)
//     and drops the endpoint and its rkeys from the cache; so does Forget.
//   - Closing an Exposure zeroes its canary (16 bytes of C memory holding
//     the Desc's nonce, never freed), destroys its worker, then unregisters
//     the memory: a peer holding the old Desc gets an error, never bytes.
//     Each new endpoint reads the canary before any op and compares it with
//     the nonce, because UCX's software RMA (tcp, shared memory) honours no
//     registration at the target and a tcp port may be reused by a later
//     worker of the same process. An endpoint whose RMA lanes bypass the
//     target's worker (bypass.go: cma in UCX >= 1.16, PyPI's 1.22, which
//     is the initiator's process_vm_readv/writev; knem, xpmem, cuda_ipc;
//     lanes it cannot read) never sees the close while the owner process
//     lives, so it reads the canary on every Do: before any put is posted,
//     and after the gets of a Do of gets only (posted behind them, judged
//     when they ended: a get that fails so may have written the caller's
//     memory, the op an error). Endpoints with no RMA lane (software RMA
//     over tcp, shared memory: the target's worker serves each op), tcp's
//     and verbs' (mem_unmap invalidates the rkey) read it once. Residual:
//     on a bypassing endpoint, a Close that runs between a put's canary
//     read and the put's post (microseconds, within one begin) does not
//     stop the put, which may land after Close returned; no read after a
//     put can undo it.
//   - Endpoints use UCP_ERR_HANDLING_MODE_PEER where the context has a
//     transport that detects peer failure (tcp, cma, verbs). Where none does
//     (UCX 1.13's posix/sysv alone) they connect without it, logged once,
//     and UCX never ends a request to a dead peer: their parts move through
//     C bounce buffers that the Worker keeps (freed when the request ends,
//     or at Close), and a request that sees no request of its endpoint
//     complete for PeerStallBound fails with wire.ErrTransferFail (the
//     peer taken as gone, the endpoint dropped), or earlier at ctx end.
//   - Giving up on such a peer after PeerStallBound renews the Worker's UCP
//     worker (renew.go): over shared memory a peer killed mid-send blocks
//     the worker's one receive FIFO for every peer. Endpoints of the old
//     UCP worker leave the cache, their requests are abandoned (C memory
//     only), and Do posts the ops cut short once more on the new one; the
//     old one is progressed by Do (tcp/verbs requests may still be on it)
//     and destroyed when no Do holds an endpoint of it. A ctx end does not
//     renew at once (the peer may be slow): the request it abandoned
//     renews once it saw no progress for PeerStallBound (stalledOrphans,
//     run by Do's wait). A peer that stalls again on an endpoint made
//     after that give-up is taken as gone: connect refuses it for
//     GoneFor (Forget clears that; callers call it when the peer's
//     exposure is gone, not after an op failed), with no second renewal.
//     Another peer's first give-up whose stall began before that
//     confirmation undoes it (the peer is a suspect again): a queue the
//     other blocked explains both stalls. More than
//     maxKept (32) endpoints kept open on the current UCP worker (closed
//     ones UCX cannot close, see closingEP) also renew it. An Exposure's
//     worker is not renewed.
//   - An endpoint with peer-failure detection is force-closed only once
//     its wireup is over (a request on it completed) or its peer failed;
//     before that it is closed in flush mode. UCX 1.13 aborts the process
//     (ucp_request.c:684, "got REP message") when the peer's worker is
//     destroyed with its wireup reply to a force-closed endpoint still
//     queued. Until its wireup is over an endpoint carries only canary
//     reads, through C memory, so a ctx end leaves them to the worker.
//
// Do is Begin then Wait: Begin posts every op (connecting and reading a
// new endpoint's canary first) and returns; Wait progresses until they
// ended. A caller may work between the two (the client asks the master
// while a get is in flight); it must Wait exactly once and not touch the
// ops' memory before, and Close waits for that Wait.
//
// Progress: an Exposure's goroutine sleeps on its worker's event fd and
// wakes for peers' software RMA, its whole loop in one C call
// (gs_ucx_serve), so a wake never goes through the Go scheduler; a Worker
// is progressed by the goroutines in Do, under its mutex, which poll 16
// idle rounds without yielding (Do runs on the caller's locked cgo thread,
// where a yield is a thread handoff) and then sleep on the worker's event
// fd (2 ms at most). Bounds: one request per Part, UCX fragments and pipelines;
// a Desc's address and keys are at most 64 KiB each.
//
// Callers' duties: give every Do a ctx with a deadline; close Workers and Exposures before their Context (a
// Context with live children refuses to close and logs it); close an
// Exposure before freeing its memory; hand Descs (they hold remote keys)
// only to authenticated peers. The owner cannot police peers' one-sided
// ops: on verbs the NIC checks the rkey's range; on tcp and shared memory
// UCX's software RMA (the target's worker copies what the op names) checks
// nothing, so a peer that holds a Desc and ignores this package's range
// check can read or write any address of the owner's process. Do's range
// check protects honest peers from mistakes, not the owner from a hostile
// one.
package ucx
