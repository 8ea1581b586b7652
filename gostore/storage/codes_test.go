package storage

import (
	"fmt"
	"testing"

	"github.com/gostore/gostore/gostore/wire"
)

// Storage errors carry their contract codes through wrapping, to the one
// mapping every caller uses (wire.CodeOf): none comes out as -1.
func TestStorageErrorsCarryTheirCodes(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want wire.Code
	}{
		{ErrNotFound, wire.ErrObjectNotFound},
		{ErrCorrupt, wire.ErrChecksumMismatch},
		{ErrFull, wire.ErrUnableOffload},
		{ErrSize, wire.ErrInvalidParams},
		{ErrBufferFull, wire.ErrFileInvalidBuffer},
	} {
		wrapped := fmt.Errorf("storage: offload %q: %w", "k", tc.err)
		if got := wire.CodeOf(wrapped); got != tc.want {
			t.Errorf("%v: code %v, want %v", tc.err, got, tc.want)
		}
	}
	// A contract error wrapping a storage one keeps its own code.
	if got := wire.CodeOf(fmt.Errorf("%w: %w", wire.ErrRPCFail.Err(), ErrFull)); got != wire.ErrRPCFail {
		t.Errorf("outer contract code lost: %v", got)
	}
}
