// doc.go defines the package documentation of grant.

// Package grant owns the capabilities that bound what a peer may do to a
// segment over the network: a grant names one byte range of one segment,
// what it allows (reading, or writing and reading back) and an expiry, and
// carries a MAC under the segment's key, so the segment's owner can check
// it without asking anyone.
//
// Who holds what: the owner of a segment makes a random key for it (the
// transfer server does, crypto/rand) and tells the master at mount; the
// master mints grants for the ranges it hands out (a write's replicas, a
// read's replicas under its lease, a task's sources and targets), and the
// owner mints grants itself for the flows where it invites a peer into its
// own memory (the SSD tier's staging buffer). Whoever holds a grant sends
// it with each request; the owner's transfer server verifies every one.
//
// # Token (56 bytes, little endian)
//
//	0   version  u8    1
//	1   flags    u8    bit 0: write (else read); no other bit is set
//	2   reserved 6 B   zero
//	8   segment  u64   the segment's id at the master (or the owner's own id)
//	16  offset   u64   first byte of the range
//	24  length   u64   bytes of the range (offset+length does not wrap)
//	32  expiry   i64   unix nanoseconds; not valid at or after it
//	40  mac      16 B  HMAC-SHA256(key, bytes 0..39), first 16 bytes
//
// # Invariants
//
//   - Only a holder of the key can make a token Verify accepts: the MAC
//     covers every other byte, and it is compared in constant time.
//   - Verify accepts a request only inside the range, for the segment and
//     before the expiry the token names, and a write only under a write
//     grant. A write grant also reads its range back: the writer that put
//     an object reads it from where it wrote it (client/spots.go) without
//     asking the master for a read grant first.
//   - The package does no I/O, reads no clock and starts no goroutines:
//     callers pass the time (the master its injected clock) and the key.
//
// What a grant does not bound: a holder may use it as often as it likes
// until it expires, so a writer can rewrite its own range (even after its
// write ended, or after the range went to another object) until then, and
// a write grant's holder may read the range in that same window. Keys
// never leave the owner and the master (nor the master's state directory,
// which must stay private).
package grant
