// Package ha is a master's leadership and its change log on etcd: the
// pieces high availability is built from.
//
// # What it owns
//
// Keys under one prefix (default "/gostore/master/"): "leader" (the
// leader's address, on its lease), "log/<seq>" (a batch of change
// records, the first of them seq, zero-padded to 20 digits so key order is
// sequence order: a count, then each record's length and bytes),
// "trimmed" (u64: the last record Trim may have deleted) and
// "snapshot_source" (the URL where the leader serves its newest snapshot,
// on its lease). Snapshots are not here: each master keeps them on its
// own disk. Log is the leader's writer, with the local journal's
// interface; Trim bounds the log; ReadLog is what a standby follows.
//
// Older gostores also kept snapshots here ("snap/<seq>/<chunk>" and
// "snaphead"): Recover still reads them, so such a cluster is taken over
// once, and the new leader's first Trim deletes them.
//
// # Invariants
//
//   - One leader at a time: Campaign creates the leader key only where it
//     does not exist, on a lease the leader keeps alive; the key's create
//     revision names the term.
//   - Fencing: every Append is a transaction that holds only while the
//     leader key still has this term's create revision. A deposed leader
//     (its lease expired, say, while it was paused or cut off) can never
//     write the log again, even before it notices: its Append returns
//     ErrDeposed.
//   - A leader whose lease could not be kept closes Lost: it must stop
//     answering writes (step down).
//   - Trim is fenced likewise (a deposed leader deletes nothing) and only
//     deletes batches all of whose records a snapshot includes, keeping
//     the newest of them within a Tail (records and bytes): etcd holds the
//     records since the leader's newest snapshot plus that tail, whatever
//     the cache holds. "trimmed" only grows.
//
// # The caller's duties
//
// Append records in sequence order with no gap; before serving as a new
// leader, hold a state that includes every record up to Trimmed (a
// snapshot) and read the log after it, and open the Log after what it
// read; Trim only at a snapshot that is durable and whose records are all
// in the log (Wait), since what Trim deletes is gone; step down when Lost
// closes or a Wait answers ErrDeposed; give every call a deadline.
// CurrentLeader is what clients resolve "etcd://" master addresses with.
package ha
