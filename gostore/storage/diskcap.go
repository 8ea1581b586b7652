// diskcap.go keeps every backend within its share of the disk it sits on.
// The configured TotalSizeLimit (2 TiB by default) says nothing about the
// disk, so a backend that trusted it alone would write until ENOSPC and
// leave the file system 100% full, to the harm of everything else on it.
// At open each backend therefore caps its size with diskCap; a disk that
// fills before the cap anyway (other files grew) lowers the cap to what the
// backend holds (lowerCap) and fails the write as full (diskFull), not as
// an I/O error.

package storage

import (
	"errors"
	"fmt"
	"log/slog"
	"os"

	"golang.org/x/sys/unix"

	"github.com/gostore/gostore/gostore/storage/fileio"
)

const (
	// diskShare is the part of the file system a backend may fill: file
	// systems slow down and fragment when nearly full, and the rest is
	// room for everything else on the disk.
	diskShare = 0.9
	// diskFreeShare is the part of the free space at open a backend may add
	// to what it already holds: what other files take already stays theirs,
	// with some room left for them to grow.
	diskFreeShare = 0.95
)

// diskCap returns the most bytes a backend whose files in dir already take
// held bytes may keep there: limit (the configured one), no more than
// diskShare of the file system and no more than held plus diskFreeShare of
// its free space, rounded down to a block. Backends call it once, at open,
// so the cap is logged once when the disk is what limits it.
func diskCap(backend, dir string, limit, held uint64) (uint64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("storage: statfs %s: %w", dir, err)
	}
	total := st.Blocks * uint64(st.Bsize)
	free := st.Bavail * uint64(st.Bsize)
	byDisk := min(uint64(float64(total)*diskShare), held+uint64(float64(free)*diskFreeShare))
	byDisk &^= fileio.Alignment - 1
	if byDisk >= limit {
		return limit, nil
	}
	slog.Info("storage: size cap limited by the disk",
		"backend", backend, "dir", dir, "cap", byDisk, "configured", limit,
		"why", fmt.Sprintf("at most %.0f%% of the %d-byte file system, and what the backend holds (%d) plus %.0f%% of the free space (%d)",
			diskShare*100, total, held, diskFreeShare*100, free))
	return byDisk, nil
}

// lowerCap is what a backend does when the disk fills up below its cap
// (other files share it): the cap drops to the bytes in use, so later
// writes are refused (or evict) up front instead of failing on the full
// disk again. The caller holds the lock that guards *cap.
func lowerCap(backend, dir string, cap *uint64, inUse uint64) {
	if inUse < *cap {
		slog.Warn("storage: disk full below the size cap; lowering the cap to the bytes in use",
			"backend", backend, "dir", dir, "cap", *cap, "in_use", inUse)
		*cap = inUse
	}
}

// isNoSpace reports whether err says the disk is full: ENOSPC, or EDQUOT
// (a quota is this process's disk).
func isNoSpace(err error) bool {
	return errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT)
}

// diskFull wraps a write's ENOSPC as ErrFull: the object could not be
// offloaded for want of room (UNABLE_OFFLOAD), like one past the cap.
func diskFull(err error) error {
	return fmt.Errorf("%w: the disk filled up below the size cap: %w", ErrFull, err)
}

// punchHole gives the blocks of [off, off+n) of f back to the file system,
// keeping the file's size. File systems without hole punching return
// EOPNOTSUPP; callers treat it as best effort.
func punchHole(f *os.File, off, n uint64) error {
	for {
		err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, int64(off), int64(n))
		if err != unix.EINTR { // a signal (the Go runtime sends them) cut it short
			return err
		}
	}
}
