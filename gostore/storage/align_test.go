// align_test.go checks the block arithmetic at the block edges.

package storage

import (
	"testing"

	"github.com/gostore/gostore/gostore/storage/fileio"
)

func TestBlockArithmetic(t *testing.T) {
	const b = fileio.Alignment
	for _, c := range []struct{ n, up, down uint64 }{
		{0, 0, 0}, {1, b, 0}, {b - 1, b, 0}, {b, b, b}, {b + 1, 2 * b, b}, {3*b - 1, 3 * b, 2 * b},
	} {
		if got := roundUpAlign(c.n); got != c.up {
			t.Errorf("roundUpAlign(%d) = %d, want %d", c.n, got, c.up)
		}
		if got := roundDownAlign(c.n); got != c.down {
			t.Errorf("roundDownAlign(%d) = %d, want %d", c.n, got, c.down)
		}
		if got := isAligned(c.n); got != (c.n == c.down) {
			t.Errorf("isAligned(%d) = %v", c.n, got)
		}
	}
}
