// The log file's disk calls: preallocation and data syncs.

package journal

import (
	"os"

	"golang.org/x/sys/unix"
)

// preallocate reserves size bytes for f (fallocate, which also sets its
// length) and reports whether it could. Appending into reserved space
// changes neither the file's length nor, beyond marking blocks written,
// its block map, so the sync after each batch (datasync) writes the data
// and little metadata, and a full disk is met when a log file is started,
// not in the middle of a batch. A file system without fallocate, or
// without room for a whole segment, gets plain appends (still correct:
// datasync then writes the new length too).
func preallocate(f *os.File, size int64) bool {
	return unix.Fallocate(int(f.Fd()), 0, 0, size) == nil
}

// datasync makes what was written to f durable: fdatasync, which skips
// the inode's timestamps but writes whatever is needed to read the data
// back (a new length, newly written blocks).
func datasync(f *os.File) error {
	for {
		err := unix.Fdatasync(int(f.Fd()))
		if err != unix.EINTR {
			if err != nil {
				return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: err}
			}
			return nil
		}
	}
}
