// Package master is the metadata core of the gostore master: which objects
// exist, where their replicas live, which segments form the pool and which
// clients are alive.
//
// The core does no I/O and reads no clock: time comes from the injected
// Config.Now, randomness from Config.Rand, and the driver (package
// master/server) calls Tick periodically to expire clients. That keeps every
// rule testable in microseconds with a fake clock.
//
// Invariants
//   - Objects are spread over NumShards shards by key hash; each shard's mutex
//     guards its map and the objects in it.
//   - A replica's byte range belongs to its segment's allocator from PutStart
//     until the replica is dropped; it is returned to the allocator exactly
//     once, unless the segment was unmounted first (then the whole range went
//     with it).
//   - Lock order: shard, then segment. Unmounting marks the segment dead under
//     its own lock before sweeping the shards, so an allocation racing with an
//     unmount either fails or is swept.
//   - An object is readable only once it has a COMPLETE replica.
package master
