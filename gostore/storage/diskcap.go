// diskcap.go keeps every backend within its share of the disk it sits on.
// The configured TotalSizeLimit (2 TiB by default) says nothing about the
// disk, so a backend that trusted it alone would write until ENOSPC and
// leave the file system 100% full, to the harm of everything else on it.
// Two rules do that:
//
//   - The cap (diskCap), computed once at open: the configured limit, but no
//     more than 90% of the file system and what the backend holds plus 95%
//     of the free space then. It is per process: it cannot see the other
//     tiers (one per GPU process, usually on one NVMe) that open on the same
//     file system, each of which gets a cap of its own.
//   - The floor (diskRoom), checked with statfs at each reservation: no
//     backend starts a write that would leave the file system less than 10%
//     of its size free, whatever its cap says. The floor is what keeps all
//     the tiers on a file system, together, from filling it past 90%.
//     Backends without eviction (offset_allocator, file_per_key) refuse the
//     object as ErrFull; the bucket backend with eviction on evicts its own
//     oldest buckets to keep above the floor, as it does for its cap.
//
// A write that meets ENOSPC anyway (another program's files grew between
// the check and the write) fails as full, not as an I/O error, and is
// logged (noSpace); the cap stays what it was at open, as the floor
// check at the next reservation sees the disk as it is by then.

package storage

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"sync/atomic"

	"golang.org/x/sys/unix"
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
	total, free, err := statDisk(dir)
	if err != nil {
		return 0, err
	}
	byDisk := min(uint64(float64(total)*diskShare), held+uint64(float64(free)*diskFreeShare))
	byDisk = roundDownAlign(byDisk)
	if byDisk >= limit {
		return limit, nil
	}
	slog.Info("storage: size cap limited by the disk",
		"backend", backend, "dir", dir, "cap", byDisk, "configured", limit,
		"why", fmt.Sprintf("at most %.0f%% of the %d-byte file system, and what the backend holds (%d) plus %.0f%% of the free space (%d)",
			diskShare*100, total, held, diskFreeShare*100, free))
	return byDisk, nil
}

// diskFloorOff turns the floor off (tests that make writes meet ENOSPC).
var diskFloorOff atomic.Bool

// diskRoom returns the bytes that may still be written to the file system
// of dir before its free space falls to the floor (1-diskShare of its size):
// negative when the file system is already below the floor (other files
// filled it), by that much.
// It is one statfs: callers hold the lock that guards their reservations
// while they call it, so that no write of theirs ends (and leaves their
// in-flight count without showing in the free space) between the statfs
// and the check.
func diskRoom(dir string) (int64, error) {
	if diskFloorOff.Load() {
		return math.MaxInt64 / 2, nil
	}
	total, free, err := statDisk(dir)
	if err != nil {
		return 0, err
	}
	floor := total - uint64(float64(total)*diskShare)
	return int64(free) - int64(floor), nil
}

// statDisk is the size of dir's file system and the bytes free to this
// process there. One statfs: about 0.3 µs, cheap next to the write it
// guards.
func statDisk(dir string) (total, free uint64, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, 0, fmt.Errorf("storage: statfs %s: %w", dir, err)
	}
	return st.Blocks * uint64(st.Bsize), st.Bavail * uint64(st.Bsize), nil
}

// checkFloor refuses a write of need bytes that, with inFlight bytes of
// this backend's writes not yet on disk, would take the file system of dir
// below the floor. The caller holds the lock that guards inFlight.
func checkFloor(dir string, need, inFlight uint64) error {
	room, err := diskRoom(dir)
	if err == nil && int64(inFlight+need) > room {
		err = fmt.Errorf("%w: %d bytes (plus %d in flight) would leave the file system of %s less than %.0f%% free (%d bytes above that floor)",
			ErrFull, need, inFlight, dir, (1-diskShare)*100, max(room, 0))
	}
	return err
}

// noSpace turns a write's ENOSPC (or EDQUOT: a quota is this process's
// disk), met below the cap and the floor because other files filled the
// disk since the check, into ErrFull (UNABLE_OFFLOAD, like an object past
// the cap), and logs it. Other errors come back as they are. The cap is
// left alone: the floor check of the next reservation sees the disk as it
// is then, so room that comes back is used again.
func noSpace(backend, dir string, err error) error {
	if !isNoSpace(err) {
		return err
	}
	slog.Warn("storage: disk full below the size cap; the write fails as full",
		"backend", backend, "dir", dir, "err", err)
	return fmt.Errorf("%w: the disk filled up below the size cap: %w", ErrFull, err)
}

// isNoSpace reports whether err says the disk is full.
func isNoSpace(err error) bool {
	return errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT)
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
