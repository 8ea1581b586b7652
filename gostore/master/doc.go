// Package master is the metadata core of the gostore master: which objects
// exist, where their replicas live, which segments form the pool and which
// clients are alive.
//
// The core does no I/O and reads no clock: time comes from the injected
// Config.Now, randomness from Config.Rand, and the driver (package
// master/server) calls Tick periodically to expire clients, remove segments
// whose graceful unmount is due, release quarantined ranges, fail orphaned
// tasks and run eviction. That keeps every rule testable in microseconds
// with a fake clock. (An eviction pass spreads its sweep over GOMAXPROCS
// goroutines and waits for them: the one place the core starts goroutines,
// all gone when Evict returns.)
//
// Invariants
//   - Objects are spread over NumShards shards by key hash; each shard's mutex
//     guards its map and the objects in it. Every insert and delete goes
//     through shard.set/remove, which keep the shard's atomic count, so
//     counting objects takes no lock. A sweep of every object (a client's
//     or segment's cleanup, reclaiming abandoned writes, a census, a
//     remove-all) goes through shard.sweep: a shard's lock is held for at
//     most sweepChunk objects at a time. An eviction pass that wants a
//     small share of the objects visits a number bound by what it evicts
//     (eviction.go), not by the number of objects.
//   - A replica's byte range belongs to its segment's allocator from PutStart
//     until the replica is dropped; it is returned to the allocator exactly
//     once, unless the segment was unmounted first (then the whole range went
//     with it).
//   - Lock order: the segment registry (segs), then a shard, then a segment,
//     then the quarantine (discarded), the task table or the promotion
//     state (promotion.go; its queues' lock after its own). segs is never taken
//     under a shard lock. Unmounting marks the segment dead under its own
//     lock before sweeping the shards, so an allocation racing with an
//     unmount either fails or is swept. The segment list is copy-on-write.
//   - A read of many keys at once (PrefixLookup: a router's question)
//     reads the segment list first, then takes each key's shard lock
//     alone, in turn, never two at once.
//   - A segment in a graceful unmount (DrainSegment) takes no new replica
//     (allocations on it fail under its lock) and counts for nothing in the
//     pool's usage; its objects stay readable until Tick removes it.
//   - Every write (put, upsert) has an epoch; PutEnd/PutRevoke and ReadDone
//     quote it, so a preempted write or a late reader never acts on a newer
//     object under the same key.
//   - An object's replica set has a name (wire.GetResult.Placed): its
//     write's epoch, renamed whenever a task adds a replica and at every
//     restore, never to a name it had before. Same epoch and same name
//     mean the listed ranges held the object's bytes all along.
//   - A segment name belongs to one client at a time. A mount of a name
//     another client holds takes it over only when that client has been
//     silent for TakeoverSilence (takeover.go: the new client has bound
//     the name's host:port, so on the same host the holder is dead; the
//     silence rules out a live one elsewhere), retiring it as ClientLeave
//     would; a holder heard from more recently keeps it (-102).
//   - Promotion on hit (promotion.go) counts a get served by a disk copy
//     alone after the shard's lock is let go (its watermark check takes
//     segs); queued plus running promotions never exceed
//     PromotionQueueLimit. A promotion is a task of the disk holder's
//     whose target is a range of its own segment, so TaskDone, a dead
//     holder and the task table end it as any task.
//   - A task the master started (a promotion, a hot object's extra
//     replica) has a deadline, its targets' write grant's expiry; expired,
//     or pre-empted by a remove or upsert of its key (preemptStarted), its
//     targets go to the quarantine, not back to the allocator: its
//     executor may still be writing.
//   - Hot-object replicas (hotreplicas.go) keep each shard's heat windows
//     in the shard, under its lock (at most heatEntriesPerShard). Their
//     extra replicas are tasks the master starts for the target segment's
//     owner (its ping carries them); the extras are remembered by object,
//     segment and offset, and Tick drops those eviction could take but
//     for the object's last copy (extraDroppable) before an eviction pass
//     runs; extras no longer among their object's replicas are pruned
//     (pruneExtras) each second and before they are counted. One client
//     runs at most hotTasksPerClient of them at once. Lock order: a shard,
//     then the hot state's lock.
//   - An object is readable only once it has a COMPLETE replica.
//   - An object's fields are read and set through its accessors
//     (objects.go): the first replica is inline and the rare fields (more
//     replicas, pins, holds, a disk copy, tasks) live in a side struct that
//     exists only while one of them is set, so the common object is one
//     80-byte allocation.
//   - An eviction pass never takes an object its writer's call still holds
//     (PutEndHold, until PutUnhold or the hold's end, at most
//     PutStartDiscardTimeout) unless it has a disk copy: the call waits
//     for room, and that room must not be its own objects. Holds are not
//     durable state.
//   - Every change of what survives a restart (durable.go: objects with
//     COMPLETE replicas, a disk copy or ranges being written; segments;
//     held ranges; pending SSD drops) is reported through Config.OnChange
//     under the lock that made it, so replaying the reports gives the live
//     durable state (a property test checks it after every step of a
//     random workload). A new mutation of those needs its report.
//   - Each report is made under the lock WriteState reads its subject
//     under (a shard's for objects, segs' for segments, held's for holds,
//     drops' for SSD drops), after the change it reports. So WriteState's
//     fuzzy snapshot, walking the state a chunk at a time while the core
//     serves, sees every part as it was at some moment after the log
//     position read before it; every change after that moment has a
//     report after that position; and each report sets the whole state of
//     its subject (ObjectSet/Gone an object's, SegmentMounted/Removed a
//     segment's and its grant key's, RangesHeld/Released a hold's by its
//     id, DropAdded/DropsDone one (directory, key) pair's; the high-water
//     marks only grow). Snapshot plus the reports after its position is
//     therefore the live state at the reports' end (a test checks it with
//     the walk letting go of each shard between any two objects). Hold ids
//     are never reused, across a Restore too.
//   - Restore's result depends on the state only (no map order): a
//     conflict over a range goes to the higher epoch, then the smaller
//     key; holds by id, the holds made for writes in progress numbered in
//     the order of their ranges. RestoreFrom (the stored state streamed,
//     the changes after it on top) gives the core Restore gives of the
//     State those replay to (the concurrent-snapshot test checks it); it
//     never holds a State of the objects, and of two records of one key
//     in the stream the later is restored, the earlier claiming nothing.
//   - KV events (kvevents.go, Config.Events): every report of an object's
//     state (report, recordGone) also brings what its events said
//     (object.announced) to what it is: readable from memory, from disk.
//     So an object's events alternate stored/removed per medium, in the
//     order of its changes, and need no call site of their own; a new
//     path that forgets an object with the object in hand goes through
//     recordGone. The events go into a bounded queue (oldest dropped,
//     counted, never an all-cleared; while held, as during a restore,
//     nothing dropped) that never blocks; the server publishes from it. Its lock
//     is the last taken: nothing is locked under it (RemoveAll's
//     all-cleared reads the object count, atomics, under it: PushIf).
//   - A range goes back to its segment only after the report that lets it
//     go (object.release, then free): a server acknowledging a new write
//     in its range has the release in its log before it.
//   - A request over one of Config's limits (limits.go: key length, keys
//     per batch, object size) changes nothing: it is refused whole before
//     any key is looked at. Restore applies no limit, so lowering one
//     across a restart loses nothing stored.
//   - Every range the core hands out comes with a grant (grants.go) signed
//     with its segment's key, for the direction and time it is the
//     caller's by the injected clock: a write's replicas until
//     PutStartDiscardTimeout, a read's until its lease, a task's for two
//     discard timeouts, each plus GrantSlack; a peek gets none. A segment
//     whose owner sent no key gets none either. The key is part of the
//     segment's durable state (SegmentMounted, State.GrantKeys) and is
//     never in a SegmentDesc: other clients receive those.
//   - Under Config.MultiTenants keys are stored scoped (wire.ScopeKey)
//     and each tenant is charged its objects' size times their memory
//     replicas (tenants.go): report moves an object's charge to its
//     replicas (o.charged remembers what was charged), shard.set and
//     shard.remove refund a replaced or deleted object, restore recounts.
//     A new path that changes replicas without a report would leave the
//     charge behind. Admission (startWrites) reserves a write's bytes
//     against its tenant's share before it starts and gives them back
//     after (its replicas are charged by then), so concurrent writes
//     never take a tenant beyond its share; the tenant's own objects are
//     evicted first to make room (evictTenant: no lock held by the
//     caller), and Evict takes what tenants hold beyond their shares
//     before anything else. Admission reserves before it reads the
//     charge, and startWrites charges before it unreserves: a write
//     starting meanwhile is seen in one reading or both. A write's charge
//     is size times the replicas the placer can place, saturated
//     (quotaCharge), never a wrapped product. Accounts exist for named
//     tenants, tenants holding objects (kept ones included: ledger.kept)
//     and a bounded number of refused ones; empty others go at the tick
//     (dropEmpty, with addCharge's mark against a charge landing on a
//     dropped account). Limits and messages use the user's key
//     (userKey), not the stored one.
package master
