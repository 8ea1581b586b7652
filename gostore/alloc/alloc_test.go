package alloc

import (
	"cmp"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// checkInvariants walks every internal structure and fails if any of them
// disagrees with another: bins vs bitmap vs cached maxima, node links, both
// extent indexes, coalescing, and that free extents plus live allocations
// tile [0, capacity) exactly.
func checkInvariants(tb testing.TB, a *Allocator) {
	tb.Helper()
	type rng struct {
		start, size uint64
		free        bool
	}
	var ranges []rng
	seen := 0
	for c := range numClasses {
		h := a.heads[c]
		bit := a.bitmap[c>>6]&(1<<uint(c&63)) != 0
		if bit != (h != nilNode) {
			tb.Fatalf("class %d: bitmap bit %v but head %d", c, bit, h)
		}
		var m uint64
		prev := nilNode
		for i := h; i != nilNode; i = a.nodes[i].next {
			n := a.nodes[i]
			if n.prev != prev {
				tb.Fatalf("class %d node %d: prev %d, want %d", c, i, n.prev, prev)
			}
			if n.size == 0 || class(n.size) != c {
				tb.Fatalf("node %d size %d in class %d, want class %d", i, n.size, c, class(n.size))
			}
			if a.byStart[n.start] != i || a.byEnd[n.start+n.size] != i {
				tb.Fatalf("node %d [%d,+%d) not indexed by start/end", i, n.start, n.size)
			}
			if _, ok := a.byStart[n.start+n.size]; ok {
				tb.Fatalf("free extent at %d has a free right neighbour: not coalesced", n.start)
			}
			m = max(m, n.size)
			ranges = append(ranges, rng{n.start, n.size, true})
			prev = i
			seen++
		}
		if a.binMax[c] < m || (a.binMaxOK[c] && a.binMax[c] != m) {
			tb.Fatalf("class %d: cached max %d (exact=%v), actual %d", c, a.binMax[c], a.binMaxOK[c], m)
		}
	}
	if seen != len(a.byStart) || seen != len(a.byEnd) {
		tb.Fatalf("%d binned extents, %d by start, %d by end", seen, len(a.byStart), len(a.byEnd))
	}
	var used uint64
	for s, u := range a.allocated {
		used += u
		ranges = append(ranges, rng{s, u, false})
	}
	for _, r := range a.restored {
		if r.size == 0 {
			continue // freed since
		}
		if _, ok := a.allocated[r.start]; ok {
			tb.Fatalf("allocation at %d both restored and allocated", r.start)
		}
		used += r.size
		ranges = append(ranges, rng{r.start, r.size, false})
	}
	if used != a.used {
		tb.Fatalf("allocated map sums to %d units, used is %d", used, a.used)
	}
	slices.SortFunc(ranges, func(x, y rng) int {
		if x.start < y.start {
			return -1
		}
		if x.start > y.start {
			return 1
		}
		return 0
	})
	var at uint64
	for _, r := range ranges {
		if r.start != at {
			tb.Fatalf("range at %d (free=%v), expected one at %d: gap or overlap", r.start, r.free, at)
		}
		at += r.size
	}
	if at != a.capUnits {
		tb.Fatalf("ranges end at %d, capacity %d units", at, a.capUnits)
	}
}

// model is the deliberately dumb reference: one bool per alignment unit.
type model struct {
	align uint64
	busy  []bool
	live  map[uint64]uint64 // offset → size as passed to Alloc
	keys  []uint64          // live offsets, for picking one at random
}

func newModel(capacity, align uint64) *model {
	return &model{align: align, busy: make([]bool, capacity/align), live: map[uint64]uint64{}}
}

func (m *model) capacity() uint64 { return uint64(len(m.busy)) * m.align }

func (m *model) units(size uint64) uint64 { return (size + m.align - 1) / m.align }

// runs returns the longest free run and the number of free runs, in units.
func (m *model) runs() (largest uint64, count int) {
	var cur uint64
	for _, b := range m.busy {
		if b {
			cur = 0
			continue
		}
		if cur == 0 {
			count++
		}
		cur++
		largest = max(largest, cur)
	}
	return largest, count
}

func (m *model) usedBytes() uint64 {
	var n uint64
	for _, b := range m.busy {
		if b {
			n++
		}
	}
	return n * m.align
}

// harness drives an Allocator and the model in lockstep.
type harness struct {
	tb testing.TB
	a  *Allocator
	m  *model
}

func newHarness(tb testing.TB, capacity, align uint64) *harness {
	return &harness{tb: tb, a: New(capacity, align), m: newModel(capacity, align)}
}

func (h *harness) alloc(size uint64) {
	h.tb.Helper()
	off, ok := h.a.Alloc(size)
	if size == 0 || size > h.m.capacity() {
		if ok {
			h.tb.Fatalf("Alloc(%d) with capacity %d succeeded", size, h.m.capacity())
		}
		return
	}
	u := h.m.units(size)
	if !ok {
		if largest, _ := h.m.runs(); largest >= u {
			h.tb.Fatalf("Alloc(%d) failed but the model has a free run of %d units (need %d)", size, largest, u)
		}
		return
	}
	if off%h.m.align != 0 {
		h.tb.Fatalf("Alloc(%d) = %d: misaligned", size, off)
	}
	first := off / h.m.align
	if first+u > uint64(len(h.m.busy)) {
		h.tb.Fatalf("Alloc(%d) = %d: past capacity %d", size, off, h.m.capacity())
	}
	for i := first; i < first+u; i++ {
		if h.m.busy[i] {
			h.tb.Fatalf("Alloc(%d) = %d overlaps a live allocation at unit %d", size, off, i)
		}
		h.m.busy[i] = true
	}
	h.m.live[off] = size
	h.m.keys = append(h.m.keys, off)
}

// free frees (off, size) and checks the error against what the model says
// it should be: nil exactly when a live allocation starts at off with the
// same rounded size.
func (h *harness) free(off, size uint64) {
	h.tb.Helper()
	s, live := h.m.live[off]
	want := live && size != 0 && size <= h.m.capacity() && h.m.units(size) == h.m.units(s)
	err := h.a.Free(off, size)
	if (err == nil) != want {
		h.tb.Fatalf("Free(%d, %d) = %v, want ok=%v (live=%v size=%d)", off, size, err, want, live, s)
	}
	if err != nil {
		if !errors.Is(err, ErrMisaligned) && !errors.Is(err, ErrOutOfRange) &&
			!errors.Is(err, ErrNotAllocated) && !errors.Is(err, ErrSizeMismatch) {
			h.tb.Fatalf("Free(%d, %d) = %v: not one of the package errors", off, size, err)
		}
		return
	}
	first := off / h.m.align
	for i := first; i < first+h.m.units(s); i++ {
		h.m.busy[i] = false
	}
	delete(h.m.live, off)
	i := slices.Index(h.m.keys, off)
	h.m.keys[i] = h.m.keys[len(h.m.keys)-1]
	h.m.keys = h.m.keys[:len(h.m.keys)-1]
}

// freeLive frees the k-th live allocation (mod count), if any.
func (h *harness) freeLive(k int, exactSize bool) {
	h.tb.Helper()
	if len(h.m.keys) == 0 {
		return
	}
	off := h.m.keys[k%len(h.m.keys)]
	size := h.m.live[off]
	if !exactSize {
		size = h.m.units(size) * h.m.align // rounds to the same size
	}
	h.free(off, size)
}

func (h *harness) check() {
	h.tb.Helper()
	checkInvariants(h.tb, h.a)
	largest, count := h.m.runs()
	if got := h.a.Capacity(); got != h.m.capacity() {
		h.tb.Fatalf("Capacity() = %d, model %d", got, h.m.capacity())
	}
	if got, want := h.a.Used(), h.m.usedBytes(); got != want {
		h.tb.Fatalf("Used() = %d, model %d", got, want)
	}
	if got, want := h.a.LargestFree(), largest*h.m.align; got != want {
		h.tb.Fatalf("LargestFree() = %d, model %d", got, want)
	}
	if got := h.a.FreeExtents(); got != count {
		h.tb.Fatalf("FreeExtents() = %d, model %d", got, count)
	}
}

func TestNewRejectsBadAlign(t *testing.T) {
	for _, align := range []uint64{0, 3, 48, 1<<63 + 1} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("New(1024, %d) did not panic", align)
				}
			}()
			New(1024, align)
		}()
	}
}

func TestAllocRounding(t *testing.T) {
	tests := []struct {
		name              string
		capacity, align   uint64
		sizes             []uint64 // allocated in order
		wantOffs          []uint64
		wantCap, wantUsed uint64
		wantLargest       uint64
		wantExtents       int
	}{
		{"align 1 exact", 100, 1, []uint64{1, 2, 3}, []uint64{0, 1, 3}, 100, 6, 94, 1},
		{"round up to 64", 1024, 64, []uint64{1, 64, 65}, []uint64{0, 64, 128}, 1024, 256, 768, 1},
		{"capacity rounded down", 1000, 64, []uint64{960}, []uint64{0}, 960, 960, 0, 0},
		{"capacity below align", 63, 64, nil, nil, 0, 0, 0, 0},
		{"4 KiB in 16 MiB", 16 << 20, 4096, []uint64{4096, 4097}, []uint64{0, 4096}, 16 << 20, 12288, 16<<20 - 12288, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := New(tt.capacity, tt.align)
			for i, s := range tt.sizes {
				off, ok := a.Alloc(s)
				if !ok || off != tt.wantOffs[i] {
					t.Fatalf("Alloc(%d) = %d, %v; want %d, true", s, off, ok, tt.wantOffs[i])
				}
			}
			if a.Capacity() != tt.wantCap || a.Used() != tt.wantUsed ||
				a.LargestFree() != tt.wantLargest || a.FreeExtents() != tt.wantExtents {
				t.Fatalf("cap %d used %d largest %d extents %d; want %d %d %d %d",
					a.Capacity(), a.Used(), a.LargestFree(), a.FreeExtents(),
					tt.wantCap, tt.wantUsed, tt.wantLargest, tt.wantExtents)
			}
			checkInvariants(t, a)
		})
	}
}

func TestAllocInvalidSizes(t *testing.T) {
	for _, tt := range []struct {
		name     string
		capacity uint64
		size     uint64
	}{
		{"zero", 1024, 0},
		{"capacity+1", 1024, 1025},
		{"max uint64", 1024, math.MaxUint64},
		{"empty allocator", 0, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a := New(tt.capacity, 64)
			if off, ok := a.Alloc(tt.size); ok {
				t.Fatalf("Alloc(%d) = %d, true", tt.size, off)
			}
			if a.Used() != 0 || a.LargestFree() != a.Capacity() {
				t.Fatalf("failed Alloc changed state: used %d largest %d", a.Used(), a.LargestFree())
			}
			checkInvariants(t, a)
		})
	}
}

func TestExhaustCapacityExactly(t *testing.T) {
	a := New(1024, 64)
	for i := range 16 {
		if _, ok := a.Alloc(64); !ok {
			t.Fatalf("Alloc #%d failed with %d bytes free", i, a.Capacity()-a.Used())
		}
	}
	if _, ok := a.Alloc(1); ok {
		t.Fatal("Alloc succeeded on a full allocator")
	}
	if a.Used() != 1024 || a.LargestFree() != 0 || a.FreeExtents() != 0 {
		t.Fatalf("full: used %d largest %d extents %d", a.Used(), a.LargestFree(), a.FreeExtents())
	}
	checkInvariants(t, a)

	b := New(1024, 64)
	if off, ok := b.Alloc(1024); !ok || off != 0 {
		t.Fatalf("Alloc(capacity) = %d, %v", off, ok)
	}
	if _, ok := b.Alloc(64); ok {
		t.Fatal("Alloc after Alloc(capacity) succeeded")
	}
	if err := b.Free(0, 1024); err != nil || b.LargestFree() != 1024 {
		t.Fatalf("Free(0, capacity) = %v, largest %d", err, b.LargestFree())
	}
}

func TestHugeCapacity(t *testing.T) {
	// Top size class and unit arithmetic at the edge of uint64.
	a := New(math.MaxUint64, 1)
	if a.Capacity() != math.MaxUint64 || a.LargestFree() != math.MaxUint64 {
		t.Fatalf("cap %d largest %d", a.Capacity(), a.LargestFree())
	}
	if off, ok := a.Alloc(math.MaxUint64); !ok || off != 0 {
		t.Fatalf("Alloc(max) = %d, %v", off, ok)
	}
	if err := a.Free(0, math.MaxUint64); err != nil {
		t.Fatal(err)
	}
	off, ok := a.Alloc(1)
	if !ok || off != 0 {
		t.Fatalf("Alloc(1) = %d, %v", off, ok)
	}
	if _, ok := a.Alloc(math.MaxUint64); ok {
		t.Fatal("Alloc(max) succeeded with 1 byte used")
	}
	if a.LargestFree() != math.MaxUint64-1 {
		t.Fatalf("largest %d", a.LargestFree())
	}
	checkInvariants(t, a)

	// A realistic 512 GiB segment with 16 MiB and 4 KiB objects.
	h := New(512<<30, 64)
	big, _ := h.Alloc(16 << 20)
	small, _ := h.Alloc(4 << 10)
	if big != 0 || small != 16<<20 || h.LargestFree() != 512<<30-(16<<20)-(4<<10) {
		t.Fatalf("big %d small %d largest %d", big, small, h.LargestFree())
	}
}

func TestFreeErrors(t *testing.T) {
	const capacity, align = 1024, 64
	// Layout after setup: A=[0,128) B=[128,192) free=[192,1024).
	setup := func() *Allocator {
		a := New(capacity, align)
		if off, _ := a.Alloc(100); off != 0 {
			t.Fatalf("A at %d", off)
		}
		if off, _ := a.Alloc(64); off != 128 {
			t.Fatalf("B at %d", off)
		}
		return a
	}
	tests := []struct {
		name      string
		pre       func(a *Allocator) // optional extra step
		off, size uint64
		want      error // nil: must succeed
	}{
		{"ok exact size", nil, 0, 100, nil},
		{"ok size rounds the same", nil, 0, 128, nil},
		{"ok size rounds the same 2", nil, 0, 65, nil},
		{"double free", func(a *Allocator) { _ = a.Free(128, 64) }, 128, 64, ErrNotAllocated},
		{"wrong size smaller", nil, 0, 64, ErrSizeMismatch},
		{"wrong size larger", nil, 128, 128, ErrSizeMismatch},
		{"interior offset", nil, 64, 64, ErrNotAllocated},
		{"never allocated, inside free extent", nil, 256, 64, ErrNotAllocated},
		{"overlapping free extent", nil, 192, 128, ErrNotAllocated},
		{"misaligned", nil, 1, 64, ErrMisaligned},
		{"size zero", nil, 0, 0, ErrNotAllocated},
		{"offset at capacity", nil, capacity, 64, ErrOutOfRange},
		{"range past capacity", nil, 960, 128, ErrOutOfRange},
		{"size overflows", nil, 128, math.MaxUint64, ErrOutOfRange},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := setup()
			if tt.pre != nil {
				tt.pre(a)
			}
			used, largest, extents := a.Used(), a.LargestFree(), a.FreeExtents()
			err := a.Free(tt.off, tt.size)
			checkInvariants(t, a)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Free(%d, %d) = %v", tt.off, tt.size, err)
				}
				return
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("Free(%d, %d) = %v, want %v", tt.off, tt.size, err, tt.want)
			}
			if a.Used() != used || a.LargestFree() != largest || a.FreeExtents() != extents {
				t.Fatal("failed Free changed the allocator")
			}
		})
	}
}

func TestCoalesce(t *testing.T) {
	// Four 64-byte allocations fill the allocator; freeing them in each
	// order exercises no-neighbour, left, right and both-sides merges.
	tests := []struct {
		name        string
		order       []int
		wantExtents []int // FreeExtents after each Free
	}{
		{"left neighbour free", []int{0, 1, 2, 3}, []int{1, 1, 1, 1}},
		{"right neighbour free", []int{3, 2, 1, 0}, []int{1, 1, 1, 1}},
		{"both neighbours free", []int{0, 2, 1, 3}, []int{1, 2, 1, 1}},
		{"both, then tail", []int{3, 1, 0, 2}, []int{1, 2, 2, 1}},
		{"isolated holes", []int{0, 2, 3, 1}, []int{1, 2, 2, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := New(256, 64)
			for i := range 4 {
				if off, ok := a.Alloc(64); !ok || off != uint64(i)*64 {
					t.Fatalf("Alloc #%d = %d, %v", i, off, ok)
				}
			}
			for k, i := range tt.order {
				if err := a.Free(uint64(i)*64, 64); err != nil {
					t.Fatal(err)
				}
				checkInvariants(t, a)
				if got := a.FreeExtents(); got != tt.wantExtents[k] {
					t.Fatalf("after freeing %v: %d extents, want %d", tt.order[:k+1], got, tt.wantExtents[k])
				}
			}
			if a.LargestFree() != a.Capacity() || a.FreeExtents() != 1 || a.Used() != 0 {
				t.Fatalf("all freed: largest %d extents %d used %d", a.LargestFree(), a.FreeExtents(), a.Used())
			}
			if off, ok := a.Alloc(256); !ok || off != 0 {
				t.Fatalf("Alloc(capacity) after coalescing = %d, %v", off, ok)
			}
		})
	}
}

// TestCompletenessPastScanBound puts the only fitting extent at the tail
// of the request's own bin, behind more than scanBound too-small ones, with
// no bigger bin: only the fallback scan can find it.
func TestCompletenessPastScanBound(t *testing.T) {
	const small, fit, holes = 64, 70, 3 * scanBound
	if class(small) != class(fit) || class(fit) != class(fit+1) {
		t.Fatal("test sizes must share a class")
	}
	a := New(fit+1+holes*(small+1), 1)
	fitOff, _ := a.Alloc(fit)
	a.Alloc(1) // separator
	var offs []uint64
	for range holes {
		off, _ := a.Alloc(small)
		offs = append(offs, off)
		a.Alloc(1)
	}
	if a.Used() != a.Capacity() {
		t.Fatalf("setup left %d bytes free", a.Capacity()-a.Used())
	}
	// Freed first, so it ends up at the tail of the LIFO bin.
	if err := a.Free(fitOff, fit); err != nil {
		t.Fatal(err)
	}
	for _, off := range offs {
		if err := a.Free(off, small); err != nil {
			t.Fatal(err)
		}
	}
	if a.LargestFree() != fit {
		t.Fatalf("LargestFree = %d, want %d", a.LargestFree(), fit)
	}
	if _, ok := a.Alloc(fit + 1); ok {
		t.Fatal("Alloc(fit+1) succeeded")
	}
	checkInvariants(t, a) // the failed search cached the bin max
	if off, ok := a.Alloc(fit); !ok || off != fitOff {
		t.Fatalf("Alloc(%d) = %d, %v; want %d (incomplete search)", fit, off, ok, fitOff)
	}
	if a.LargestFree() != small {
		t.Fatalf("LargestFree = %d, want %d", a.LargestFree(), small)
	}
	checkInvariants(t, a)
}

// TestPrefersNearFit checks the good-fit order: a request is served from
// an exact-size hole rather than by splitting the big free tail.
func TestPrefersNearFit(t *testing.T) {
	a := New(1<<20, 64)
	x, _ := a.Alloc(4096)
	a.Alloc(4096)
	if err := a.Free(x, 4096); err != nil {
		t.Fatal(err)
	}
	if off, _ := a.Alloc(4096); off != x {
		t.Fatalf("Alloc(4096) = %d, want the hole at %d", off, x)
	}
	if a.FreeExtents() != 1 {
		t.Fatalf("%d extents, want 1", a.FreeExtents())
	}
}

func TestRandomAgainstModel(t *testing.T) {
	configs := []struct {
		capacity, align uint64
		seed            uint64
		steps           int
	}{
		{4096, 1, 1, 4000},
		{300, 1, 2, 4000},
		{64 * 1024, 64, 3, 4000},
		{64*1024 + 63, 64, 4, 4000},
		{512 * 4096, 4096, 5, 3000},
		{100 * 8, 8, 6, 4000},
	}
	for _, c := range configs {
		h := newHarness(t, c.capacity, c.align)
		r := rand.New(rand.NewPCG(c.seed, 42))
		units := c.capacity / c.align
		randSize := func() uint64 {
			switch p := r.IntN(100); {
			case p < 45:
				return 1 + r.Uint64N(4*c.align)
			case p < 75:
				return 1 + r.Uint64N(min(40, units)*c.align)
			case p < 93:
				return 1 + r.Uint64N(c.capacity/4+1)
			case p < 97:
				return r.Uint64N(c.capacity + 2*c.align)
			default:
				return 0
			}
		}
		for range c.steps {
			switch p := r.IntN(100); {
			case p < 50:
				h.alloc(randSize())
			case p < 90:
				h.freeLive(r.IntN(1<<30), r.IntN(2) == 0)
			case p < 95:
				h.free(r.Uint64N(c.capacity+2*c.align), randSize())
			default:
				// A free aimed at a real allocation with a likely-wrong size,
				// or repeated (double free).
				if len(h.m.keys) > 0 {
					off := h.m.keys[r.IntN(len(h.m.keys))]
					h.free(off, randSize())
					h.free(off, h.m.live[off])
					h.free(off, r.Uint64N(2*c.align))
				}
			}
			h.check()
		}
		// Draining everything must give back one extent of full capacity.
		for len(h.m.keys) > 0 {
			h.freeLive(0, true)
		}
		h.check()
		if h.a.LargestFree() != h.a.Capacity() || h.a.FreeExtents() != min(1, int(units)) {
			t.Fatalf("drained: largest %d extents %d", h.a.LargestFree(), h.a.FreeExtents())
		}
	}
}

// FuzzAllocator decodes a configuration and a sequence of operations from
// the input and checks each step against the model. When fuzzing, pass
// -fuzzminimizetime=3s: minimising a long interesting input otherwise takes
// up to a minute, during which the exec counter stands still.
func FuzzAllocator(f *testing.F) {
	f.Add([]byte{6, 15, 3, 0, 0, 0, 1, 0, 0, 64, 4, 0, 0, 7, 1, 1})
	f.Add([]byte{0, 255, 15, 5, 1, 0, 70, 1, 0, 64, 1, 0, 1, 5, 0, 0, 5, 0, 0, 1, 0, 70})
	f.Add([]byte{3, 200, 0, 1, 9, 255, 255, 0, 0, 1, 4, 3, 0, 2, 0, 16, 7, 0, 8, 4, 2, 0})
	r := rand.New(rand.NewPCG(7, 7))
	for range 8 {
		b := make([]byte, 4+3*200)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 4 {
			return
		}
		align := uint64(1) << (data[0] % 7)
		units := 1 + uint64(data[1])*uint64(data[2]%16+1)
		capacity := units*align + uint64(data[3])%align
		h := newHarness(t, capacity, align)
		// Each step checks everything in O(capacity); cap the steps so the
		// fuzzer's long inputs do not starve it of executions.
		ops := data[4:]
		if len(ops) > 3*1000 {
			ops = ops[:3*1000]
		}
		for ; len(ops) >= 3; ops = ops[3:] {
			v := uint64(ops[1])<<8 | uint64(ops[2])
			switch ops[0] % 8 {
			case 0, 1, 2:
				h.alloc(v % (capacity + 2))
			case 3:
				h.alloc(uint64(ops[1]) * align / 4) // small, frequent sizes
			case 4, 5:
				h.freeLive(int(v), ops[0]&8 == 0)
			case 6:
				h.free(uint64(ops[1])*align/2, uint64(ops[2])*align/4)
			case 7:
				if len(h.m.keys) > 0 {
					off := h.m.keys[int(ops[1])%len(h.m.keys)]
					h.free(off, uint64(ops[2])) // likely wrong size
					h.free(off, h.m.live[off])
					h.free(off, h.m.live[off]) // double free unless it erred above
				}
			}
			h.check()
		}
	})
}

// BenchmarkAllocFree measures one Free plus one Alloc of 4 KiB in a 1 GiB
// segment kept half full with randomly placed holes.
func BenchmarkAllocFree(b *testing.B) {
	const capacity, size = 1 << 30, 4 << 10
	a := New(capacity, 64)
	var offs []uint64
	for {
		off, ok := a.Alloc(size)
		if !ok {
			break
		}
		offs = append(offs, off)
	}
	r := rand.New(rand.NewPCG(1, 2))
	r.Shuffle(len(offs), func(i, j int) { offs[i], offs[j] = offs[j], offs[i] })
	half := len(offs) / 2
	for _, off := range offs[half:] {
		if err := a.Free(off, size); err != nil {
			b.Fatal(err)
		}
	}
	offs = offs[:half]
	for b.Loop() {
		j := r.IntN(len(offs))
		if err := a.Free(offs[j], size); err != nil {
			b.Fatal(err)
		}
		off, ok := a.Alloc(size)
		if !ok {
			b.Fatal("Alloc failed in steady state")
		}
		offs[j] = off
	}
	b.ReportMetric(float64(a.FreeExtents()), "extents")
}

// BenchmarkAllocFreeMixed is the master's mix: 4 KiB and 16 MiB objects
// (9:1 by count) in a 64 GiB segment about 70% full; when an Alloc fails,
// random objects are evicted until it fits, as the master would.
func BenchmarkAllocFreeMixed(b *testing.B) {
	const capacity = 64 << 30
	type obj struct{ off, size uint64 }
	a := New(capacity, 64)
	r := rand.New(rand.NewPCG(3, 4))
	size := func() uint64 {
		if r.IntN(10) == 0 {
			return 16 << 20
		}
		return 4 << 10
	}
	var live []obj
	evict := func() {
		j := r.IntN(len(live))
		if err := a.Free(live[j].off, live[j].size); err != nil {
			b.Fatal(err)
		}
		live[j] = live[len(live)-1]
		live = live[:len(live)-1]
	}
	for a.Used() < capacity/10*7 {
		s := size()
		off, ok := a.Alloc(s)
		if !ok {
			b.Fatal("fill failed")
		}
		live = append(live, obj{off, s})
	}
	for b.Loop() {
		evict()
		s := size()
		off, ok := a.Alloc(s)
		for !ok {
			evict()
			off, ok = a.Alloc(s)
		}
		live = append(live, obj{off, s})
	}
	b.ReportMetric(float64(a.FreeExtents()), "extents")
}

// Restore rebuilds what a live allocator holds: the same ranges allocated,
// the same free space, and every restored range frees exactly.
func TestRestoreMatchesTheLiveAllocator(t *testing.T) {
	const capacity, align = 1 << 20, 64
	live := New(capacity, align)
	rng := rand.New(rand.NewPCG(7, 7))
	held := map[uint64]uint64{}
	for i := 0; i < 2000; i++ {
		if len(held) > 0 && rng.IntN(3) == 0 {
			for off, size := range held {
				if err := live.Free(off, size); err != nil {
					t.Fatal(err)
				}
				delete(held, off)
				break
			}
			continue
		}
		size := uint64(1 + rng.IntN(9000))
		if off, ok := live.Alloc(size); ok {
			held[off] = size
		}
	}
	var ranges []Range
	for off, size := range held {
		ranges = append(ranges, Range{off, size})
	}
	back, refused := Restore(capacity, align, ranges)
	if len(refused) != 0 {
		t.Fatalf("refused %v", refused)
	}
	checkInvariants(t, back)
	if back.Used() != live.Used() || back.LargestFree() != live.LargestFree() || back.FreeExtents() != live.FreeExtents() {
		t.Fatalf("restored used %d largest %d extents %d; live %d %d %d", back.Used(), back.LargestFree(),
			back.FreeExtents(), live.Used(), live.LargestFree(), live.FreeExtents())
	}
	// What is free takes exactly the rest, and nothing overlaps a restored range.
	var got []Range
	for {
		off, ok := back.Alloc(align)
		if !ok {
			break
		}
		got = append(got, Range{off, align})
	}
	if uint64(len(got))*align+live.Used() != capacity {
		t.Fatalf("free space %d + used %d != %d", uint64(len(got))*align, live.Used(), capacity)
	}
	for _, g := range got {
		for off, size := range held {
			if g.Offset < off+size && off < g.Offset+g.Size {
				t.Fatalf("allocation %+v overlaps restored [%d,+%d)", g, off, size)
			}
		}
	}
	for off, size := range held {
		if err := back.Free(off, size); err != nil {
			t.Fatalf("free of restored [%d,+%d): %v", off, size, err)
		}
	}
}

func TestRestoreRefusesWhatCannotBeAllocations(t *testing.T) {
	ranges := []Range{
		{0, 100},              // 0: kept
		{64, 64},              // 1: overlaps 0
		{4096, 64},            // 2: kept
		{4100, 64},            // 3: misaligned
		{1 << 20, 64},         // 4: outside
		{8192, 0},             // 5: empty
		{4096, 64},            // 6: a repeat of 2
		{(1 << 20) - 64, 128}, // 7: runs past the end
	}
	a, refused := Restore(1<<20, 64, ranges)
	checkInvariants(t, a)
	if want := []int{1, 3, 4, 5, 6, 7}; !slices.Equal(refused, want) {
		t.Fatalf("refused %v, want %v", refused, want)
	}
	if a.Used() != 128+64 {
		t.Fatalf("used %d", a.Used())
	}
	if err := a.Free(0, 100); err != nil {
		t.Fatal(err)
	}
}

// A restored range frees once, whole: a second free, a free inside it or
// of another size is refused; its start allocated again frees again.
func TestRestoredRangeFreesOnce(t *testing.T) {
	a, refused := Restore(1<<20, 64, []Range{{0, 128}, {4096, 64}, {8192, 256}})
	if len(refused) != 0 {
		t.Fatalf("refused %v", refused)
	}
	if err := a.Free(64, 64); !errors.Is(err, ErrNotAllocated) {
		t.Fatalf("free inside a restored range: %v", err)
	}
	if err := a.Free(8192, 64); !errors.Is(err, ErrSizeMismatch) {
		t.Fatalf("free of a restored range at another size: %v", err)
	}
	if err := a.Free(4096, 64); err != nil {
		t.Fatal(err)
	}
	if err := a.Free(4096, 64); !errors.Is(err, ErrNotAllocated) {
		t.Fatalf("second free of a restored range: %v", err)
	}
	checkInvariants(t, a)
	if off, ok := a.Alloc(4096); !ok || off != 128 { // the hole [128, 8192) now takes it first
		t.Fatalf("alloc: %d %v", off, ok)
	}
	for _, r := range []Range{{0, 128}, {8192, 256}, {128, 4096}} {
		if err := a.Free(r.Offset, r.Size); err != nil {
			t.Fatalf("free %+v: %v", r, err)
		}
	}
	checkInvariants(t, a)
	if a.Used() != 0 || a.FreeExtents() != 1 || a.restored != nil {
		t.Fatalf("used %d, %d extents, restored %v", a.Used(), a.FreeExtents(), a.restored)
	}
}

// bucketSort sorts like a comparison sort, keys spread or crowded into
// one bucket, and keys at both ends of the limit.
func TestBucketSortSortsAsSortFuncDoes(t *testing.T) {
	type kv struct{ k, v uint64 }
	byKey := func(a, b kv) int { return cmp.Or(cmp.Compare(a.k, b.k), cmp.Compare(a.v, b.v)) }
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		n     int
		limit uint64
	}{{0, 10}, {1, 10}, {2, 2}, {1000, 1 << 20}, {1000, 3}, {1000, math.MaxUint64}, {5000, 1 << 40}} {
		s := make([]kv, tc.n)
		for i := range s {
			s[i] = kv{rng.Uint64N(tc.limit), uint64(i)}
		}
		if tc.n > 2 {
			s[0].k, s[1].k = 0, tc.limit-1
		}
		want := slices.Clone(s)
		slices.SortFunc(want, byKey)
		if got := bucketSort(s, tc.limit, func(x kv) uint64 { return x.k }, byKey); !slices.Equal(got, want) {
			t.Fatalf("n %d limit %d: not sorted", tc.n, tc.limit)
		}
	}
}
