// Package plan owns the object header of the plan API (the Nano Mooncake
// seed): the 64-byte record at the start of a plan object in its owner's
// memory, its state machine RESERVED → WRITING → READY → DEAD, and the
// atomic operations that publish and check it. It knows nothing of
// masters, segments or transports: callers hand it the 64 bytes, in a
// shared mapping or in a copy.
//
// # Layout (little endian, 64 bytes, 8-byte aligned)
//
//	0   key_hash     u64   FNV-1a 64 of the key
//	8   n_pages      u32
//	12  page_size    u32
//	16  payload_off  u64   offset of page 0 in the owner's segment
//	24  bytes_total  u64
//	32  state        u32   0 RESERVED, 1 WRITING, 2 READY, 3 DEAD
//	36  epoch        u32   low 32 bits of the master's write epoch
//	40  last_access  u64   unix nanoseconds, best effort
//	48  flags        u32
//	52  _pad         u32
//	56  check        u64   FNV-1a 64 of bytes 0..31 and the epoch
//
// The seed's fields, plus a check word over the immutable ones, so a reader
// of a copy (over TCP) can tell a header from bytes that only look like
// one.
//
// # Ordering
//
// The producer writes every field but state, then stores WRITING; it
// writes the payload; it stores READY with release semantics (Go's atomic
// store) after the last payload byte. A reader loads state with acquire
// semantics (Go's atomic load) and reads the payload only after seeing
// READY with the epoch it expects, and loads state and epoch again after
// copying: if either changed, the slot was reclaimed and reused meanwhile
// and the copy is discarded (a seqlock).
package plan
