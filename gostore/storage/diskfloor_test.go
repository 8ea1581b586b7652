// Tests of the free-space floor (diskcap.go): tiers sharing a file system
// together keep it at most 90% full, and a disk that fills up for a while
// does not shrink a tier for good.

package storage

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gostore/gostore/gostore/wire"
)

// diskFloorDisable turns the floor off until the test ends, so that its
// writes meet ENOSPC instead.
func diskFloorDisable(t *testing.T) {
	diskFloorOff.Store(true)
	t.Cleanup(func() { diskFloorOff.Store(false) })
}

// Two tiers of one kind, in two directories of one file system (one per GPU
// process on one NVMe, in production), default limits, take turns
// offloading distinct objects until both refuse everything or four times
// the disk was offered. Each one's cap (90% of the disk, both computed on
// the empty disk) would let them fill it; the floor keeps them, together,
// within 90%. What each one still reports reads back with its own bytes.
func TestDiskFloorSharedFS(t *testing.T) {
	const uring = true
	for _, desc := range []string{DescriptorBucket, DescriptorPerKey, DescriptorOffset} {
		t.Run(desc, func(t *testing.T) {
			mnt := diskcapMount(t, diskcapFSSize)
			size, _ := diskcapStat(t, mnt)
			// No slack: statfs counts every block on the disk (both
			// storage id files included), each reservation checks the
			// floor against it, the batches run one at a time (so every
			// earlier write is in the statfs a reservation sees), and
			// every byte written here is reserved first (distinct keys:
			// no bucket meta is rewritten).
			limit := uint64(float64(size) * diskShare)
			var ws []*diskcapWriter
			for _, name := range []string{"a", "b"} {
				dir := filepath.Join(mnt, name)
				if err := os.Mkdir(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				ws = append(ws, &diskcapWriter{t: t, fs: diskcapOpen(t, dir, desc, uring), prefix: name + "-", sizes: map[string]int{}})
			}
			var peak uint64
			for written := 0; written < 4*int(size); {
				refused := 0
				for _, w := range ws {
					n, errs := w.batch(8)
					written += n
					if _, used := diskcapStat(t, mnt); used > limit {
						t.Fatalf("after %d MiB offloaded to the two tiers the disk holds %d bytes of %d, over 90%% (%d)",
							written>>20, used, size, limit)
					} else {
						peak = max(peak, used)
					}
					all := true
					for _, err := range errs {
						all = all && err != nil
					}
					if all {
						refused++
					}
				}
				if refused == len(ws) {
					break
				}
			}
			if t.Failed() {
				return
			}
			var total uint64
			for _, w := range ws {
				present, n := diskcapCheck(t, w.fs, w.sizes)
				t.Logf("tier %s: %d offloaded, %d stored, %d refused; %d readable (%d bytes)",
					w.prefix, len(w.keys), w.stored, w.full, len(present), n)
				total += n
			}
			t.Logf("disk peak %d of %d (limit %d)", peak, size, limit)
			if total < size/2 {
				t.Fatalf("only %d bytes readable in the two tiers on a %d-byte disk", total, size)
			}
		})
	}
}

// A disk that other files fill for a while refuses offloads as full
// (UNABLE_OFFLOAD), but once they go the tier takes objects up to its cap
// again: neither the floor (floor=on) nor a write that met ENOSPC
// (floor=off) shrinks it for good.
func TestDiskFloorTransientFull(t *testing.T) {
	const uring = true
	const objSize = 1 << 20
	for _, desc := range []string{DescriptorBucket, DescriptorPerKey, DescriptorOffset} {
		for _, floor := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/floor=%v", desc, floor), func(t *testing.T) {
				mnt := diskcapMount(t, diskcapFSSize)
				dir := filepath.Join(mnt, "tier")
				if err := os.Mkdir(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				if !floor {
					diskFloorDisable(t)
				}
				fs := diskcapOpen(t, dir, desc, uring)
				stored := map[string]int{}
				offload := func(keys ...string) []error {
					vals := make([][]byte, len(keys))
					for i, k := range keys {
						vals[i] = diskcapVal(k, objSize)
					}
					errs := fs.Backend().BatchOffload(keys, vals)
					for i, err := range errs {
						if err == nil {
							stored[keys[i]] = objSize
						}
					}
					return errs
				}
				if err := offload("before")[0]; err != nil {
					t.Fatalf("offload to the empty disk: %v", err)
				}
				// Another program takes every free byte.
				var st unix.Statfs_t
				if err := unix.Statfs(mnt, &st); err != nil {
					t.Fatal(err)
				}
				filler := filepath.Join(mnt, "filler")
				f, err := os.Create(filler)
				if err != nil {
					t.Fatal(err)
				}
				err = unix.Fallocate(int(f.Fd()), 0, 0, int64(st.Bavail*uint64(st.Bsize)))
				f.Close()
				if err != nil {
					t.Fatal(err)
				}
				if err := offload("during")[0]; err == nil || wire.CodeOf(err) != wire.ErrUnableOffload {
					t.Fatalf("offload to the full disk: %v (code %v), want UNABLE_OFFLOAD", err, wire.CodeOf(err))
				}
				if err := os.Remove(filler); err != nil {
					t.Fatal(err)
				}
				// The disk is free again: 8 MiB fit well within the cap
				// (90% of 48 MiB), next to what the tier held.
				var keys []string
				for i := range 8 {
					keys = append(keys, fmt.Sprintf("after-%d", i))
				}
				for i, err := range offload(keys...) {
					if err != nil {
						t.Fatalf("offload %q once the disk is free again: %v", keys[i], err)
					}
				}
				offered := map[string]int{"before": objSize, "during": objSize}
				for _, k := range keys {
					offered[k] = objSize
				}
				present, _ := diskcapCheck(t, fs, offered)
				for k := range stored {
					if _, ok := present[k]; !ok {
						t.Fatalf("%q was stored but is gone (%d of %d readable)", k, len(present), len(stored))
					}
				}
			})
		}
	}
}
