// Package planclient is a store client's side of the plan API (the Nano
// Mooncake seed): a producer opens a write plan on an owner's memory,
// writes the payload straight into it and commits; readers locate READY
// objects and read them, through the master or in one hop from an
// ObjMeta.
//
// # The split with gostore/plan
//
// A plan object is an ordinary object of the store whose bytes are the
// 64-byte header followed by the payload: the master allocates, leases,
// evicts and removes it like any other. gostore/plan owns the header — its
// layout, its state machine and the atomics that publish and check it —
// and knows nothing of masters or transports. This package owns what a
// client does around it: membership and routing (which member owns a
// key), the plans this process has open, the RPCs to the master, reaching
// the owner's memory (mapped here, or over TCP), and the plan counters.
//
// # Invariants
//
//   - Only the process that opened a plan commits it; a commit is one
//     release store of READY in the header, and the master hears of it
//     later, batched (FlushCommits waits for that).
//   - A reader trusts a payload only if the header showed READY with the
//     expected epoch both before and after its copy (a seqlock): a slot
//     reclaimed or reused meanwhile gives an error and a cleared
//     destination, never another object's bytes.
//   - Over TCP every transfer carries its grant: a producer the write
//     grant PutStart gave it for the whole object (header and payload),
//     a reader the read grant of its lookup (ObjMeta.Grant, good for the
//     lease plus slack: a meta read over TCP later, or one made by hand,
//     is refused). A producer keeps the header it last wrote and
//     changes that copy (its grant would read the header back, at the
//     cost of a round trip). A Remove of another
//     process's plan kills the header only where the owner is mapped
//     here; over TCP its readers see the epoch change once the slot is
//     reused.
//   - The package never reaches the store client itself: all it needs is
//     the Host interface.
//
// # The caller's duties
//
// The host implements Host, batches QueueCommitEnd's keys into PutEnd
// calls (CommitEndDelay apart) and hands every batch's answer to
// CommitsEnded, flushes them before it leaves the master, and keeps the
// memory it maps for SegmentMemory valid while calls it admitted with
// Enter run. Callers own the buffers they pass until a call returns; a
// WritePlan's Writable view stays valid while the owner lives.
package planclient
