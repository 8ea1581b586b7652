// Package client is the store client that lives inside every Python process:
// it mounts this process's segment into the pool, talks to the master, and
// hands the bytes to the transfer engine. It orchestrates; it does not
// decide how bytes move.
//
// The map. Client orchestrates: New (setup.go) runs the named steps of
// setup; Client keeps the client known to the master (heartbeat, rejoin),
// mounts what the master forgot and closes it all (Close, release). The
// work of the API calls is done by objects of their own, which Client
// hands out, each over core (core.go: configuration, the master's
// connection, the transfer engine, the segment cache, the call bounds
// and the close lock, shared by all):
//
//	Reads      get.go, spots.go, places.go, leases.go   gets: lookup, reads from replicas and disk, reads again past a lease
//	readEnds   readdone.go                              tells the master which reads ended (ReadDone), batched
//	Writes     put.go, device.go                        puts and upserts, waits for room
//	Sessions   session.go, leases.go                    put and get sessions, GetRanges
//	Tasks      tasks.go                                 replica copy and move tasks
//	Keys       keys.go                                  exist, size, remove, replica descriptors and clears
//	Buffers    buffers.go                               registered buffers, where caller memory lives
//	Segments   segments.go                              segments mounted at run time, the SSD tier's unmount
//	ownSegment own.go                                   setup's segment, its server, its UCX exposure, its mount
//
// Locks: core.inFlight is read-held by every call that may touch segment
// or caller memory (enter, taken once by the exported call; calls must
// not nest it) and write-held by Close while it waits for them. Every
// other lock guards one structure and is held only while it is read or
// changed, never across an RPC or a transfer: peerCache.mu, registry.mu,
// spots.mu, laterReads.mu, unsureKeys.mu and the batches' inside their
// own methods; sessions.mu by Sessions' calls around their map;
// extraSegs.mu by Segments' calls around theirs; each segment's
// exposure lock (segExposure) from its expose to the master's answer.
//
// The get path, hop by hop: Reads.GetStart → locate (GetReplicas to the
// master; a waiting ReadDone of the same key goes first, on its own) →
// Pending (sizes for Python) → Reads.GetFinishDevice → finish → readInto
// (trims each destination) → readReplicas (core.resolve of the segments
// not cached, orderReplicas by the engine's route, one Engine.Do per
// round of replicas) → readDisk for what no memory replica gave → the
// lease checks, readAgain for what outlived its lease → noteRead (metrics)
// → readEnds.endReads (ReadDone, on the back of the next call or in a
// batch). A get of one key (GetIntoOne) first tries where it was last
// found (spots.go), confirmed by the lookup's answer.
//
// The put path, hop by hop: Writes.PutBatchDevice (or PutBatch,
// UpsertBatch) → write (an upsert first flushes this client's ended
// reads: readEnds.flushReadEnds) → writeRound: PutStart (or UpsertStart)
// to the master → core.resolve of the replicas' segments → one
// transfer.Op per replica from the caller's memory, one Engine.Do for the
// round (core.timedWrite) → finishWrites: PutEnd for what every replica
// took, PutRevoke for the rest → Reads.rememberWritten (the next get of
// the key may read from there) → spaceWait for a round refused for space
// → noteWrite (metrics).
//
// A put is PutStart (the master picks replica ranges), one transfer.Op per
// replica straight from the caller's memory, then PutEnd — or PutRevoke if
// an op failed. A get is GetReplicas, then one op per object on its
// cheapest replica (as the engine would route it), the next replica in the
// next round for the ops that failed, and the disk copy last. Batches do
// the same with one RPC per phase and one Engine.Do per round for the
// whole batch. Where a part of the caller's memory lives (host or GPU,
// PutItem.Device) travels in the op: the engine picks the route, copies
// GPU memory directly where it can and stages it where it cannot
// (gostore/transfer).
//
// Grants: every op the client hands the engine carries the grant
// (gostore/grant) its range came with: the master's, in the replicas of
// PutStart, GetReplicas and a task's plan, or an SSD holder's for what it
// staged. The client's own segments are served by transfer servers whose
// keys go to the master at each mount (mount, mountAtMaster), and which
// learn the segment's id from the answer.
//
// Invariants: a put returns only after PutEnd (visible) or PutRevoke
// (never half-visible); a get reports bytes only from a transfer that
// ended inside the object's lease, and an object whose read outlived it
// is looked up and read again (finish's readAgain, every whole-object
// read API's one path: at most leaseTries times, in groups sized to end
// inside the new lease; readRangesAgain, with the same bound, for ranged
// reads: GetRanges and get sessions) before its result is -707, never
// "absent"; a segment whose transfer failed is
// forgotten (asked of the master again on next use), one whose op was
// refused (bad range, bad device parts) is not.
//
// Ranged calls (session.go): a put session reserves objects with one
// PutStart and keeps them invisible while byte ranges are written into
// every replica, until PutEnd or PutRevoke; a get session holds a
// lookup of each key for ranged reads until it ends, and replaces it with
// a new one when a read finds its lease over (the session then reads the
// object as it is now); GetRanges reads ranges without one. The caller must not end a session while its own reads or
// writes of it are in flight: the end releases what those rely on.
//
// Caller memory (MemoryOf): a zero-copy range is inside a registered
// buffer or memory the caller never registered (its own, as Mooncake
// takes it); ranges that straddle a registered buffer's edge, and host
// memory that is not mapped, are refused before anything touches them.
//
// Memory taken up front (checkMemory, AllocateAndMount): setup's segment,
// local buffer and SSD staging buffer, and each allocated run-time
// segment, are populated when taken, so their sizes are first weighed
// against what the host and its memory cgroup can give (gostore/memlimit)
// and refused with ErrInvalidParams and one log line when they exceed it;
// setup asks before it talks to the master.
//
// Segments mounted at run time (segments.go): besides setup's segment a
// client may mount a file's pages or allocated memory, each served by a
// transfer server of its own, and unmount them at once or after a grace
// period; their memory is released only once no call is copying in or out
// of it (Close's inFlight lock) and the master has let them go.
//
// The UCX route (transport.go, ucx.go): setup's protocol "ucx" or "rdma"
// (or GOSTORE_TRANSPORT=ucx: Config.ForceUCX) loads UCX (gostore/ucx) and
// plans the route (planTransport: off, with the reason, where UCX cannot
// load or "rdma" meets a UCX without a verbs transport; then TCP); one
// log line says which UCX, which transports, or why not. On, the client
// makes one UCX context (NET_DEVICES: the NICs near the segment, for
// "rdma") and the engine's worker, and exposes each segment (setup's and
// those mounted at run time; a GPU segment only where UCX has CUDA) afresh
// at each of its mounts: the desc goes to the master in the mount; the
// exposure before is closed once the new mount succeeded. Each segment's
// exposure (segExposure) belongs to the owner of its memory, the
// ownSegment or the extraSeg, which revokes it before the memory goes
// (Close, unmount, a failed mount). Invariant: a mount holds the exposure's lock from the
// expose to the master's answer, and none runs after the revoke, so a
// heartbeat remount never re-exposes memory being freed and a peer's stale
// desc fails rather than reach memory. A remount that reached the master
// after an unmount began is undone there (remountOne). On the reader's
// side, the get, put and put-session rounds, replica tasks' reads and
// writes, and the plan API's transfers (clientHost.Transfer) go through
// core.doRefreshing: an op that failed over UCX with a desc the master
// has since replaced (same segment id, new exposure) is sent once more
// with the new one, within the same call; a desc the master still gives
// leaves the error as it was. A final failure then drops only what it
// showed to be unusable (core.opFailed): the cached desc, if it is still
// the one that failed, over every route, never the engine's connections
// or endpoints to the segment (a broken TCP stream and a failed UCX
// endpoint already dropped themselves; the others may carry other calls'
// ops, and over UCX forgetting the endpoint would also clear the worker's
// record of a peer taken as gone). Only a segment the master dropped is
// forgotten in the engine (prunePeers, which asks the master of the
// cached segments and of those a failed op dropped from the cache). An op the engine refused (range,
// grant, device parts) drops nothing. Since any call may so drop a cached
// desc at any moment, callers reach segments through what resolve
// returned, not a second lookup of the cache.
//
// Two subsystems live in packages of their own and reach the client only
// through the interfaces they declare, which host.go implements: the SSD
// tier (gostore/ssdtier; the client holds its Tier, and a Reader that
// serves the get path's disk fallback) and the plan API
// (gostore/planclient, reached through Plans).
//
// With Config.HTTPPort set, the client measures itself and serves the
// numbers over HTTP (gostore/clientmetrics, metrics.go): every RPC through
// an rpc.ClientOptions observer, the bytes and time of each write round's
// transfers, and each read and write call once it ended. Without it the
// metrics are nil and cost one nil check per call.
//
// Listeners (listen.go): without authentication a client's servers (its
// segment's, the segments mounted at run time, the SSD tier's) listen
// only on loopback. A local_hostname that is not loopback is refused
// (auth.Check) unless the operator allowed it, or unless the pool is one
// host: the master's address is loopback and local_hostname is an address
// of this host. Then the servers listen on loopback and local_hostname
// still names the segments; peers dial TransferAddr, never the name.
//
// Bounds (calls.go): every call's context comes from core.ctx: it ends
// at Config.RPCTimeout, at Close, and, for calls of the process's main
// thread with Config.InterruptMain, at InterruptMain (and the rest of
// that API call: the caller marks where each begins, BeginCall); while the heartbeat
// finds the master gone (Health 2) it is ended from the start
// (ErrMasterGone), until a ping is answered. Whatever waits inside a call
// (RPCs, transfers) must wait on that context. Failures to reach the
// master are logged once per burst (masterLog), not by each call: callers
// that log errors skip those Quiet reports. Close returns within
// Config.CloseTimeout.
//
// Buffers: callers own every []byte they pass and must keep it valid until
// the call returns. Memory handed back by GetBuffers is the client's, lent
// until FreeBuffer.
package client
