// Package alloc owns the offset allocator the master keeps for each memory
// segment a client contributes to the pool: it hands out aligned byte ranges
// [offset, offset+size) of [0, capacity) for object replicas and takes them
// back. It knows nothing about segments, clients or objects; the master owns
// the Allocator, serialises calls to it under its own lock, and decides what
// the ranges mean. The package does no I/O and starts no goroutines.
//
// Invariants, which hold after every call (including a Free that returns an
// error, which changes nothing):
//
//   - Every byte of [0, Capacity()) is in exactly one live allocation or one
//     free extent; Used() plus the free bytes equals Capacity().
//   - Free extents are maximal: no two are adjacent, because Free coalesces
//     with both neighbours. FreeExtents() is therefore an exact count of the
//     holes, i.e. a fragmentation metric.
//   - All offsets and sizes are multiples of the alignment; sizes are rounded
//     up to it on Alloc and on Free alike.
//   - Alloc is complete: it fails only if no free extent is at least the
//     rounded size, so LargestFree() < size is the one reason for failure.
//
// The design is TLSF-like: free extents are indexed by start and by end for
// O(1) coalescing, and sit in segregated size-class bins (exact classes for
// tiny sizes, then eight linear sub-classes per power of two) with a bitmap
// of non-empty bins, so Alloc finds a fitting extent in O(1) expected time
// with no scan over all extents. See Allocator for the search order.
package alloc
