package alloc

import (
	"cmp"
	"errors"
	"fmt"
	"math/bits"
	"slices"
)

// Errors returned by Free, wrapped with the offending offset and size. A
// Free that returns one of them has changed nothing.
var (
	// ErrMisaligned: the offset is not a multiple of the alignment, so no
	// Alloc can have returned it.
	ErrMisaligned = errors.New("alloc: offset not aligned")
	// ErrOutOfRange: the range does not lie inside [0, capacity).
	ErrOutOfRange = errors.New("alloc: range outside capacity")
	// ErrNotAllocated: no live allocation starts at the offset. This covers
	// a double free, a never-allocated range, an offset inside an
	// allocation and a range overlapping a free extent.
	ErrNotAllocated = errors.New("alloc: range not allocated")
	// ErrSizeMismatch: an allocation starts at the offset but its rounded
	// size differs from the one given.
	ErrSizeMismatch = errors.New("alloc: size does not match allocation")
)

// Size classes, in alignment units. Sizes below linearLimit get one exact
// class each, so every extent in such a bin fits a request of that class.
// Above it, each power of two [2^fl, 2^(fl+1)) is split into slCount linear
// sub-classes, so extents in one bin differ by less than 1/slCount of their
// size: the "next non-empty bin" is then at most ~12% bigger than needed.
const (
	slBits      = 3
	slCount     = 1 << slBits
	linearLimit = 2 * slCount
	firstFL     = slBits + 1 // bits.Len64(linearLimit) - 1
	numClasses  = linearLimit + (64-firstFL)*slCount
	bitmapWords = (numClasses + 63) / 64

	// scanBound caps the first, best-fit look into the request's own bin.
	// It keeps the hot path O(1) while still preferring a near-exact hole
	// (which keeps larger extents whole) when one is near the bin's head.
	scanBound = 16

	nilNode = -1
)

// class returns the size class of an extent or request of u units (u >= 1).
func class(u uint64) int {
	if u < linearLimit {
		return int(u)
	}
	fl := bits.Len64(u) - 1
	sl := int(u>>(uint(fl)-slBits)) - slCount
	return linearLimit + (fl-firstFL)*slCount + sl
}

// node is one free extent, in alignment units. Nodes live in a slab
// (Allocator.nodes) and are linked into their bin by index rather than by
// pointer, so removal of an arbitrary extent is O(1) and the slab is reused
// through a free list instead of producing garbage.
type node struct {
	start, size uint64
	prev, next  int // bin neighbours; next also links the slab's free list
}

// Allocator hands out aligned byte ranges of [0, capacity). It does no I/O
// and is not safe for concurrent use: the caller holds a lock.
//
// Alloc searches, in order: (1) the first scanBound extents of the
// request's own bin, taking the smallest that fits; (2) the head of the next
// non-empty bigger bin, every extent of which is guaranteed to fit (found
// through the bitmap in O(1)); (3) the rest of the own bin. Step 3 keeps the
// allocator complete; it runs only when no bigger bin has anything, i.e.
// the own bin is the top one, and a cached per-bin maximum makes repeated
// failures O(1). The chosen extent is split at its start, so the remainder
// stays one extent and the low part of the segment fills first.
type Allocator struct {
	align    uint64
	shift    uint   // log2(align): bytes = units << shift
	capUnits uint64 // capacity in units
	used     uint64 // allocated units

	nodes     []node
	freeNodes int // head of the slab's free list

	// Both keyed in units; both point at the extent's node. byStart finds
	// the right neighbour of a freed range, byEnd the left one.
	byStart map[uint64]int
	byEnd   map[uint64]int

	heads  [numClasses]int
	bitmap [bitmapWords]uint64
	// binMax[c] is always an upper bound on the extents in bin c, and exact
	// when binMaxOK[c]. Removing the maximum only clears binMaxOK; the
	// exact value is recomputed lazily by the scans that need it (step 3 of
	// Alloc, LargestFree). That keeps both O(1) in the common case without
	// an ordered structure per bin, and the bound alone lets Alloc skip a
	// bin that cannot fit.
	binMax   [numClasses]uint64
	binMaxOK [numClasses]bool

	// allocated maps the start of each live allocation Alloc made to its
	// size, both in units; restored holds Restore's, sorted by start, a
	// freed one with size 0 (an allocation is in one or the other, never
	// both: Alloc can only return a start no live allocation has). Together
	// they let Free reject double and bogus frees instead of corrupting the
	// free lists. Restore fills a slice rather than the map: a restore of
	// millions of ranges then costs an append each, not a map insert, and
	// 16 bytes a range.
	allocated map[uint64]uint64
	restored  []unitRange
	// restoredLive counts restored's allocations not yet freed; at 0 the
	// slice goes.
	restoredLive int
}

// unitRange is an allocation in units.
type unitRange struct{ start, size uint64 }

// New returns an allocator over [0, capacity) with every byte free. align
// must be a power of two >= 1 (New panics otherwise: it is a programming
// error, not a runtime condition); capacity is rounded down to a multiple
// of align.
func New(capacity, align uint64) *Allocator {
	a := empty(capacity, align)
	if a.capUnits > 0 {
		a.insertFree(0, a.capUnits)
	}
	return a
}

// Range is an allocation to restore: Size bytes at Offset.
type Range struct{ Offset, Size uint64 }

// Restore builds an allocator of capacity bytes in which exactly the given
// ranges are allocated (as if Alloc had returned them), for a master that
// rebuilds its pool from a journal. A range that is misaligned, empty,
// outside the capacity or overlapping an earlier one (in the order given)
// is not restored: its index is returned in refused.
func Restore(capacity, align uint64, ranges []Range) (a *Allocator, refused []int) {
	a = empty(capacity, align)
	type indexed struct {
		unitRange
		index int
	}
	kept := make([]indexed, 0, len(ranges))
	for i, r := range ranges {
		if r.Size == 0 || r.Offset&(align-1) != 0 || r.Offset >= capacity || r.Size > capacity-r.Offset {
			refused = append(refused, i)
			continue
		}
		u := (r.Size + align - 1) >> a.shift
		if (r.Offset>>a.shift)+u > a.capUnits {
			refused = append(refused, i)
			continue
		}
		kept = append(kept, indexed{unitRange{r.Offset >> a.shift, u}, i})
	}
	// Sorted by start, and for one start in the order given; an overlap
	// (an exact repeat included) refuses the range given later. A state
	// written in offset order is sorted already, which the check finds in
	// one pass.
	byStart := func(x, y indexed) int { return cmp.Or(cmp.Compare(x.start, y.start), cmp.Compare(x.index, y.index)) }
	if !slices.IsSortedFunc(kept, byStart) {
		kept = bucketSort(kept, a.capUnits, func(r indexed) uint64 { return r.start }, byStart)
	}
	final := kept[:0] // in place: final never passes the range it reads
	for _, r := range kept {
		if n := len(final); n > 0 && final[n-1].start+final[n-1].size > r.start {
			if final[n-1].index > r.index {
				refused = append(refused, final[n-1].index)
				final[n-1] = r
			} else {
				refused = append(refused, r.index)
			}
			continue
		}
		final = append(final, r)
	}
	a.restored, a.restoredLive = make([]unitRange, len(final)), len(final)
	// The free extents are the gaps: their maps are sized once.
	gaps, next := 1, uint64(0)
	for _, r := range final {
		if r.start > next {
			gaps++
		}
		next = r.start + r.size
	}
	a.byStart, a.byEnd = make(map[uint64]int, gaps), make(map[uint64]int, gaps)
	a.nodes = make([]node, 0, gaps)
	next = 0
	for i, r := range final {
		if r.start > next {
			a.insertFree(next, r.start-next)
		}
		a.restored[i] = r.unitRange
		a.used += r.size
		next = r.start + r.size
	}
	if next < a.capUnits {
		a.insertFree(next, a.capUnits-next)
	}
	slices.Sort(refused)
	return a, refused
}

// bucketSort sorts s by cmp, key(x) in [0, limit) being the first thing
// cmp compares: each element goes to one of len(s) buckets by key, then
// each bucket is sorted. Allocations spread over a segment, so a bucket
// holds about one: linear time for a restore of millions of ranges, where
// a comparison sort's log factor shows; crowded buckets cost at most that
// sort. It returns the sorted copy.
func bucketSort[T any](s []T, limit uint64, key func(T) uint64, cmp func(a, b T) int) []T {
	n := uint64(len(s))
	if n < 2 || limit == 0 {
		return s
	}
	bucket := func(x T) uint64 { // key*n/limit without overflow: the key's share of limit
		hi, lo := bits.Mul64(key(x), n)
		q, _ := bits.Div64(hi, lo, limit)
		return q
	}
	start := make([]int, n+1)
	for _, x := range s {
		start[bucket(x)+1]++
	}
	for b := uint64(1); b <= n; b++ {
		start[b] += start[b-1]
	}
	out := make([]T, n)
	at := slices.Clone(start[:n])
	for _, x := range s {
		b := bucket(x)
		out[at[b]] = x
		at[b]++
	}
	for b := uint64(0); b < n; b++ {
		if part := out[start[b]:start[b+1]]; len(part) > 1 {
			slices.SortFunc(part, cmp)
		}
	}
	return out
}

func empty(capacity, align uint64) *Allocator {
	if align == 0 || align&(align-1) != 0 {
		panic(fmt.Sprintf("alloc: align %d is not a power of two", align))
	}
	a := &Allocator{
		align:     align,
		shift:     uint(bits.TrailingZeros64(align)),
		freeNodes: nilNode,
		byStart:   make(map[uint64]int),
		byEnd:     make(map[uint64]int),
		allocated: make(map[uint64]uint64),
	}
	a.capUnits = capacity >> a.shift
	for i := range a.heads {
		a.heads[i] = nilNode
		a.binMaxOK[i] = true // empty bin: max 0 is exact
	}
	return a
}

// Capacity returns the managed size in bytes (rounded down to align).
func (a *Allocator) Capacity() uint64 { return a.capUnits << a.shift }

// Used returns the bytes currently allocated, after rounding.
func (a *Allocator) Used() uint64 { return a.used << a.shift }

// FreeExtents returns the number of free extents. Since extents are always
// coalesced, this is the exact number of holes.
func (a *Allocator) FreeExtents() int { return len(a.byStart) }

// LargestFree returns the size in bytes of the largest contiguous free
// extent, exactly. It costs O(1) unless the top bin's cached maximum was
// invalidated, and then O(extents in the top bin).
func (a *Allocator) LargestFree() uint64 {
	c := a.topClass()
	if c < 0 {
		return 0
	}
	if c < linearLimit {
		return uint64(c) << a.shift
	}
	if !a.binMaxOK[c] {
		a.rescanMax(c)
	}
	return a.binMax[c] << a.shift
}

// Alloc reserves size bytes, rounded up to the alignment, and returns the
// offset of the range. ok is false for size 0, for size > Capacity(), and
// when no free extent is big enough (and only then).
func (a *Allocator) Alloc(size uint64) (offset uint64, ok bool) {
	if size == 0 || size > a.Capacity() {
		return 0, false
	}
	// No overflow: size <= capacity <= MaxUint64 rounded down to align.
	u := (size + a.align - 1) >> a.shift
	idx := a.find(u)
	if idx == nilNode {
		return 0, false
	}
	n := &a.nodes[idx]
	start := n.start
	a.unlink(idx)
	if n.size == u {
		delete(a.byStart, start)
		delete(a.byEnd, start+u)
		a.releaseNode(idx)
	} else {
		// Keep the node for the remainder: its end, hence byEnd, is
		// unchanged, which saves two map operations per split.
		delete(a.byStart, start)
		n.start += u
		n.size -= u
		a.byStart[n.start] = idx
		a.link(idx)
	}
	a.allocated[start] = u
	a.used += u
	return start << a.shift, true
}

// Free returns the range [offset, offset+size) that Alloc handed out; size
// is the one passed to Alloc and is rounded the same way. A range that is
// not exactly a live allocation yields an error wrapping one of the Err
// values and leaves the allocator unchanged. A double free is caught unless
// the range was handed out again in between, which no allocator can tell
// apart from a legitimate free.
func (a *Allocator) Free(offset, size uint64) error {
	if offset&(a.align-1) != 0 {
		return fmt.Errorf("%w: offset %d size %d align %d", ErrMisaligned, offset, size, a.align)
	}
	capacity := a.Capacity()
	if size == 0 {
		return fmt.Errorf("%w: offset %d size 0", ErrNotAllocated, offset)
	}
	if offset >= capacity || size > capacity-offset {
		return fmt.Errorf("%w: offset %d size %d capacity %d", ErrOutOfRange, offset, size, capacity)
	}
	start := offset >> a.shift
	u := (size + a.align - 1) >> a.shift
	got, ok := a.allocated[start]
	r := -1 // the index in restored, when the allocation is there
	if !ok {
		if i, found := slices.BinarySearchFunc(a.restored, start, func(x unitRange, s uint64) int {
			return cmp.Compare(x.start, s)
		}); found && a.restored[i].size != 0 {
			r, got, ok = i, a.restored[i].size, true
		}
	}
	if !ok {
		return fmt.Errorf("%w: offset %d size %d", ErrNotAllocated, offset, size)
	}
	if got != u {
		return fmt.Errorf("%w: offset %d size %d, allocated %d", ErrSizeMismatch, offset, size, got<<a.shift)
	}
	if r >= 0 {
		a.restored[r].size = 0
		if a.restoredLive--; a.restoredLive == 0 {
			a.restored = nil
		}
	} else {
		delete(a.allocated, start)
	}
	a.used -= u

	end := start + u
	li, hasLeft := a.byEnd[start]
	ri, hasRight := a.byStart[end]
	switch {
	case hasLeft && hasRight:
		// The left node absorbs the freed range and the right extent.
		r := a.nodes[ri]
		a.unlink(ri)
		delete(a.byStart, r.start)
		delete(a.byEnd, r.start+r.size)
		a.releaseNode(ri)
		a.unlink(li)
		delete(a.byEnd, start)
		a.nodes[li].size += u + r.size
		a.byEnd[r.start+r.size] = li
		a.link(li)
	case hasLeft:
		a.unlink(li)
		delete(a.byEnd, start)
		a.nodes[li].size += u
		a.byEnd[end] = li
		a.link(li)
	case hasRight:
		a.unlink(ri)
		delete(a.byStart, end)
		n := &a.nodes[ri]
		n.start = start
		n.size += u
		a.byStart[start] = ri
		a.link(ri)
	default:
		a.insertFree(start, u)
	}
	return nil
}

// find returns the node of a free extent of at least u units, or nilNode
// if none exists. See Allocator for the search order.
func (a *Allocator) find(u uint64) int {
	c := class(u)
	if c < linearLimit {
		// Exact class: whatever is at the head fits exactly.
		if h := a.heads[c]; h != nilNode {
			return h
		}
		if c2 := a.nextNonEmpty(c + 1); c2 >= 0 {
			return a.heads[c2]
		}
		return nilNode
	}

	// Step 1: bounded best fit in the own bin, skipped when the bin's
	// upper bound already says nothing there fits.
	best, rest := nilNode, nilNode
	if a.binMax[c] >= u {
		i, seen, m := a.heads[c], 0, uint64(0)
		for ; i != nilNode && seen < scanBound; i, seen = a.nodes[i].next, seen+1 {
			s := a.nodes[i].size
			if s == u {
				return i
			}
			if s > u && (best == nilNode || s < a.nodes[best].size) {
				best = i
			}
			m = max(m, s)
		}
		if best != nilNode {
			return best
		}
		if i == nilNode {
			// The whole bin was seen: cache its max for free.
			a.binMax[c], a.binMaxOK[c] = m, true
		}
		rest = i
	}

	// Step 2: any extent of a bigger bin fits.
	if c2 := a.nextNonEmpty(c + 1); c2 >= 0 {
		return a.heads[c2]
	}

	// Step 3: the rest of the own bin, which is the top bin. Finishing the
	// scan without a fit means the whole bin was seen, so its max becomes
	// known and the next failing request stops at step 1.
	if rest == nilNode {
		return nilNode
	}
	for i := rest; i != nilNode; i = a.nodes[i].next {
		if a.nodes[i].size >= u {
			return i
		}
	}
	a.rescanMax(c)
	return nilNode
}

// rescanMax recomputes the cached maximum of bin c.
func (a *Allocator) rescanMax(c int) {
	var m uint64
	for i := a.heads[c]; i != nilNode; i = a.nodes[i].next {
		m = max(m, a.nodes[i].size)
	}
	a.binMax[c], a.binMaxOK[c] = m, true
}

// nextNonEmpty returns the smallest non-empty class >= c, or -1.
func (a *Allocator) nextNonEmpty(c int) int {
	for w := c >> 6; w < bitmapWords; w++ {
		m := a.bitmap[w]
		if w == c>>6 {
			m &= ^uint64(0) << uint(c&63)
		}
		if m != 0 {
			return w<<6 + bits.TrailingZeros64(m)
		}
	}
	return -1
}

// topClass returns the largest non-empty class, or -1.
func (a *Allocator) topClass() int {
	for w := bitmapWords - 1; w >= 0; w-- {
		if m := a.bitmap[w]; m != 0 {
			return w<<6 + bits.Len64(m) - 1
		}
	}
	return -1
}

// insertFree records a new free extent that has no free neighbour.
func (a *Allocator) insertFree(start, size uint64) {
	var idx int
	if a.freeNodes != nilNode {
		idx = a.freeNodes
		a.freeNodes = a.nodes[idx].next
	} else {
		idx = len(a.nodes)
		a.nodes = append(a.nodes, node{})
	}
	a.nodes[idx] = node{start: start, size: size}
	a.byStart[start] = idx
	a.byEnd[start+size] = idx
	a.link(idx)
}

// releaseNode returns an unlinked node to the slab.
func (a *Allocator) releaseNode(idx int) {
	a.nodes[idx] = node{prev: nilNode, next: a.freeNodes}
	a.freeNodes = idx
}

// link pushes node idx onto the head of its bin. LIFO reuse hands out the
// most recently freed hole first, which is the one most likely still warm
// in the owner's caches.
func (a *Allocator) link(idx int) {
	n := &a.nodes[idx]
	c := class(n.size)
	n.prev, n.next = nilNode, a.heads[c]
	if h := a.heads[c]; h != nilNode {
		a.nodes[h].prev = idx
		a.binMax[c] = max(a.binMax[c], n.size)
	} else {
		a.bitmap[c>>6] |= 1 << uint(c&63)
		a.binMax[c], a.binMaxOK[c] = n.size, true
	}
	a.heads[c] = idx
}

// unlink removes node idx from its bin; it must be called before the
// node's size changes, since the size names the bin.
func (a *Allocator) unlink(idx int) {
	n := &a.nodes[idx]
	c := class(n.size)
	if n.prev != nilNode {
		a.nodes[n.prev].next = n.next
	} else {
		a.heads[c] = n.next
	}
	if n.next != nilNode {
		a.nodes[n.next].prev = n.prev
	}
	if a.heads[c] == nilNode {
		a.bitmap[c>>6] &^= 1 << uint(c&63)
		a.binMax[c], a.binMaxOK[c] = 0, true
	} else if a.binMaxOK[c] && n.size == a.binMax[c] {
		a.binMaxOK[c] = false
	}
	n.prev, n.next = nilNode, nilNode
}
