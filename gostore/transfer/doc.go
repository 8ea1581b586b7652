// doc.go defines the package documentation of transfer, gostore's data plane.

// Package transfer owns how object bytes move between a caller's memory
// and a segment, the memory a client contributed to the pool: it is the one
// place that decides the route, and the client only hands it ops.
//
// A process contributes memory with NewLocalSegment: a memfd mapped
// MAP_SHARED whose /proc/<pid>/fd/<n> path (ShmPath) lets peers on the same
// host (same HostID) map the very same pages. The kernel frees the memory
// when the owner and every peer have unmapped it, so nothing is left behind
// in /dev/shm when a process dies. Each client runs a Server over its
// segment (host memory, or a GPU segment through DeviceMemory).
//
// # Routes
//
// Engine.Do takes a batch of ops and routes each by its peer (Route): the
// own segment (SetOwn) is copied to directly; a same-host host segment is
// mapped once and copied with copy(); a same-host GPU segment is opened
// from its IPC handle and copied by the driver; anything else, or what
// cannot be opened, goes over TCP to the peer's Server: a small call to
// one peer (Options.LaneBytes) on the lane, written and answered on the
// calling thread (tcp_lane.go), anything larger over pooled, pipelined
// streams, which other calls share: a call whose ctx ends lets go of its
// requests on the wire (their answers are read and dropped) rather than
// break the stream, unless one of its requests is being written or its
// payload read, which only breaking it can stop. Engine.Begin (begin.go) starts one small read, on the lane or
// posted over UCX (at most 1 MiB), and returns, for a caller with
// something to do before the answer. Each route is a
// Transport; Options.Wrap puts a test's fake in front of any of them. TCP
// starts first so the network works while the caller's goroutine copies
// the local routes.
//
// The UCX route (ucx.go) takes a peer whose owner exposed its segment with
// UCX (Peer.UCX, the exposure's desc from the master) when the Engine has
// a worker (Options.UCX) and the peer is on another host, or on this one
// with Options.ForceUCX: one-sided puts and gets straight into the owner's
// memory, a batch's ops all in flight at once, writes flushed (in the
// owner's memory) before Do returns. It runs beside the local routes on a
// goroutine of its own. A peer without a desc goes over TCP as before;
// an op that fails on UCX fails (ErrTransferFail), it is not retried over
// TCP: the worker drops the endpoint that failed itself, and the next op
// reconnects; Forget(segID) drops the segment's current endpoint (and the
// worker's record of a peer taken as gone), for a segment that is gone.
// Route.Cost orders own < shm, ipc < ucx < tcp; RouteOps counts the ops
// each route took.
//
// # Where the caller's memory lives
//
// Op.Bufs are host parts; Op.Device names parts on a GPU (nil placeholders
// in Bufs). A device part moves GPU to GPU into an IPC or own GPU segment,
// in one DMA into a mapping the engine page-locked (Pins), to UCX as a GPU
// pointer when its context has CUDA (Options.UCXCUDA), and through
// pinned bounce memory (staging.go) on a route that cannot reach the GPU
// (TCP, UCX without CUDA, a mapping that cannot be locked, Engine.Staged
// for the SSD tier).
// The GPU is reached only through the Driver the caller supplies: this
// package links no driver, and tests supply a fake. A device part may
// instead name another process's memory (DevicePart.Pid): it moves with
// process_vm_readv/writev (procmem.go) straight to or from a mapped
// segment, through plain bounces over TCP; the caller must hold ptrace
// rights over that process.
//
// # Grants
//
// A Server serves a request only inside a grant (gostore/grant) made
// under its key (NewServer draws it at random; the owner gives it to the
// master at mount, GrantKey) for the segment it serves (SetSegID), the
// request's range and direction (a write grant also reads its range
// back), before the grant's expiry. Op.Grant
// carries it; the TCP route sends it after each request's header, and
// the server verifies a connection's token once, then only checks ranges
// and expiry for the slices that repeat it. A request without a valid
// grant is answered ErrIllegalClient (ErrLeaseExpired for an expired one),
// touches nothing (a write's payload is drained, or the connection closed
// past maxDiscard), and is logged: the first of a burst, with the remote
// and the range. Server.Mint is the owner's own grant, for a peer it
// invites into its memory.
//
// On the UCX route no server of the owner sees an op, so the engine
// refuses, before anything is posted, an op without a grant, or whose
// grant is for another segment, range or direction, or expired, with the
// codes the TCP route's server answers (whether the grant is authentic
// only the owner's key could tell); the op must also lie inside the
// exposure (gostore/ucx checks its desc). The desc
// is the capability: the master hands it only to the clients it
// authenticated, and the owner revokes it by closing the exposure (at
// unmount and after a remount), after which an op holding it fails rather
// than move bytes. The owner cannot police one-sided ops once a peer
// holds the desc: on verbs the NIC checks the rkey's range; on tcp and
// shared memory UCX's software RMA does not.
//
// The local routes are not policed: the own segment is this process's,
// and a same-host peer maps the owner's memfd (/proc/<pid>/fd/<n>) or
// opens its GPU memory from an IPC handle, which takes ptrace rights over
// the owner (its user, or root): rights to read and write its memory
// anyway.
//
// # Invariants and the caller's duties
//
//   - Do returns one error per op, carrying a wire.Code (ErrInvalidParams
//     for a bad range, device parts or a grant that cannot cover the op,
//     refused before anything moves; ErrIllegalClient or ErrLeaseExpired
//     from a server that refused the grant; ErrTransferFail for I/O,
//     cancellation included). When Do returns the caller's memory is no
//     longer used, also after ctx ended.
//   - The caller keeps its memory valid until Do returns, and never hands
//     an op a range it does not own.
//   - A TCP stream that broke drops itself from its pool (the next op
//     dials afresh), and a UCX endpoint that failed is dropped by the
//     worker; Forget is for a segment that is gone (the client calls it
//     for segments the master dropped, not after an op failed): it cuts
//     short the ops other calls have in flight to the segment, on every
//     connection of the pool to its transfer server (when no other known
//     segment lives there) and on its UCX endpoint. Close fails what is
//     in flight on TCP, unmaps, unpins and frees the bounces.
//   - The UCX worker (Options.UCX) is the caller's: it outlives the Engine
//     (closed after Engine.Close); UCX ops in flight end with their ctx.
//
// # TCP protocol
//
// Little endian, on each connection a stream of requests answered in order:
//
//	request:  u8 op | u64 id | u64 offset | u64 length | [grant] | write payload
//	response: u64 id | i32 status (0 or a wire.Code) | u64 length | read payload
//
// Ops 3 (write) and 4 (read) are followed by a grant (grant.Size bytes);
// ops 1 (write) and 2 (read), the protocol's first version, carry none and
// are refused (ErrIllegalClient), their write payloads drained. The
// response length is the number of payload bytes that follow it: the
// requested length for a successful read, zero otherwise. A range outside
// the segment is ErrInvalidParams, checked before the grant. Write
// payloads are read straight into the segment and read payloads are
// written straight from it. A request with an unknown op, or a header or
// grant cut short, closes the connection.
package transfer
