// align.go defines the block arithmetic every backend shares. O_DIRECT
// moves whole fileio.Alignment blocks at block offsets, so record layouts,
// file sizes, disk accounting and staging slots are all counted in blocks.

package storage

import "github.com/gostore/gostore/gostore/storage/fileio"

// roundUpAlign is n rounded up to a whole number of blocks.
func roundUpAlign(n uint64) uint64 { return (n + fileio.Alignment - 1) &^ (fileio.Alignment - 1) }

// roundDownAlign is n rounded down to a whole number of blocks.
func roundDownAlign(n uint64) uint64 { return n &^ (fileio.Alignment - 1) }

// isAligned reports whether n is a whole number of blocks.
func isAligned(n uint64) bool { return n%fileio.Alignment == 0 }
