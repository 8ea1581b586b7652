// packed_test.go checks where Pending.Packed lays a batch out in a scratch
// buffer, and when it refuses.

package client

import (
	"math"
	"slices"
	"testing"

	"github.com/gostore/gostore/gostore/wire"
)

func TestPackedLaysHitsBackToBackAndRefusesPastCapacity(t *testing.T) {
	hit := func(size uint64) wire.GetResult { return wire.GetResult{Code: wire.OK, Size: size} }
	miss := wire.GetResult{Code: wire.ErrObjectNotFound}
	for _, tc := range []struct {
		name     string
		res      []wire.GetResult
		capacity uint64
		offsets  []uint64 // nil: does not fit
	}{
		{"hits in key order", []wire.GetResult{hit(10), hit(5), hit(1)}, 16, []uint64{0, 10, 15}},
		{"misses take no room", []wire.GetResult{miss, hit(7), miss, hit(9)}, 16, []uint64{0, 0, 7, 7}},
		{"exactly full", []wire.GetResult{hit(8), hit(8)}, 16, []uint64{0, 8}},
		{"one byte past", []wire.GetResult{hit(8), hit(9)}, 16, nil},
		{"only misses", []wire.GetResult{miss, miss}, 0, []uint64{0, 0}},
		{"empty objects", []wire.GetResult{hit(0), hit(4)}, 4, []uint64{0, 0}},
		{"no scratch", []wire.GetResult{hit(1)}, 0, nil},
		// Sizes that would wrap a running sum must not fit by wrapping.
		{"huge sizes", []wire.GetResult{hit(math.MaxUint64 - 3), hit(8)}, math.MaxUint64 - 1, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &Pending{keys: make([]string, len(tc.res)), res: tc.res}
			offsets, fits := p.Packed(tc.capacity)
			if fits != (tc.offsets != nil) || !slices.Equal(offsets, tc.offsets) {
				t.Fatalf("Packed(%d) = %v, %v; want %v", tc.capacity, offsets, fits, tc.offsets)
			}
		})
	}
}
