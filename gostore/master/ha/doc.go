// Package ha is a master's leadership and its change log on etcd: the
// pieces high availability is built from.
//
// # What it owns
//
// Keys under one prefix (default "/gostore/master/"): "leader" (the
// leader's address, on its lease), "log/<seq>" (a batch of change
// records, the first of them seq, zero-padded to 20 digits so key order is
// sequence order: a count, then each record's length and bytes),
// "snap/<seq>/<chunk>" (a snapshot in chunks under etcd's request limit)
// and "snaphead" (which snapshot is whole: its sequence number, length and
// checksum, written after its chunks). Log is the leader's writer, with
// the local journal's interface; Recover is what a new leader reads.
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
//
// # The caller's duties
//
// Append records in sequence order with no gap; Recover before serving as
// a new leader and open the Log after what it read; step down when Lost
// closes or a Wait answers ErrDeposed; give every call a deadline.
// CurrentLeader is what clients resolve "etcd://" master addresses with.
package ha
