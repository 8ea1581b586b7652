// Tests of the disk cap (diskcap.go): with default limits (2 TiB) every
// backend keeps within its share of a small disk, writing four times the
// disk's size through it corrupts nothing, and a disk that other files fill
// before the cap fails offloads cleanly, leaking neither files nor blocks.

package storage

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gostore/gostore/gostore/storage/fileio"
	"github.com/gostore/gostore/gostore/wire"
)

// diskcapFSSize is the tmpfs each test mounts: small, so that writing
// several times its size through a backend stays quick.
const diskcapFSSize = 48 << 20

// diskcapSlack is what the file system may hold past a backend's cap: the
// storage id file FileStorage writes beside the backend's files (one block,
// counted by no backend) and one block of margin. tmpfs gives directories
// and empty files (the lock file) no blocks.
const diskcapSlack = 2 * fileio.Alignment

// diskcapSizes are the object sizes, in turn: whole and odd MiBs, odd
// sizes around a block and tiny ones.
var diskcapSizes = []int{1 << 20, 1<<20 + 4097, 300001, 1, 4096, 2<<20 - 5, 77777}

// diskcapMount mounts a tmpfs of size bytes on a temporary directory,
// unmounted when the test ends (after the cleanups registered later, which
// close what is open on it).
func diskcapMount(t *testing.T, size uint64) string {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
		if errors.Is(err, unix.EPERM) {
			t.Skipf("cannot mount a tmpfs (%v): the test needs root", err)
		}
		t.Fatalf("mount a tmpfs on %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
			unix.Unmount(dir, unix.MNT_DETACH)
		}
	})
	return dir
}

// diskcapStat returns the file system's size and the bytes in use on it.
func diskcapStat(t *testing.T, dir string) (size, used uint64) {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * uint64(st.Bsize), (st.Blocks - st.Bfree) * uint64(st.Bsize)
}

// diskcapVal is key's value of n bytes, derived from the key: a load that
// returns another object's bytes, or stale ones, does not match.
func diskcapVal(key string, n int) []byte {
	v := make([]byte, n)
	rand.NewChaCha8(sha256.Sum256([]byte(key))).Read(v)
	return v
}

func diskcapOpen(t *testing.T, dir, desc string, uring bool) *FileStorage {
	t.Helper()
	const buf = 4 << 20 // holds the largest object
	fs, err := OpenFileStorage(FileStorageConfig{
		Config:     Config{Path: dir, UseURing: uring}, // default limits: 2 TiB, far past the disk
		Descriptor: desc, BufferSize: buf, GCTTL: time.Minute,
	}, fileio.AlignedBuffer(buf, fileio.Alignment), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fs.Close() })
	return fs
}

// diskcapWriter offloads distinct keys with key-derived values in batches.
type diskcapWriter struct {
	t      *testing.T
	fs     *FileStorage
	prefix string         // of the keys: tiers sharing a disk get distinct ones
	sizes  map[string]int // every key offloaded, stored or not
	keys   []string
	next   int
	// Per outcome: stored, refused as full (UNABLE_OFFLOAD), failed otherwise.
	stored, full, bad int
}

// batch offloads n new objects and returns their bytes and errors.
func (w *diskcapWriter) batch(n int) (bytes int, errs []error) {
	keys := make([]string, n)
	vals := make([][]byte, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%sobj-%05d", w.prefix, w.next)
		vals[i] = diskcapVal(keys[i], diskcapSizes[w.next%len(diskcapSizes)])
		w.sizes[keys[i]] = len(vals[i])
		w.keys = append(w.keys, keys[i])
		bytes += len(vals[i])
		w.next++
	}
	errs = w.fs.Backend().BatchOffload(keys, vals)
	for i, err := range errs {
		switch {
		case err == nil:
			w.stored++
		case wire.CodeOf(err) == wire.ErrUnableOffload:
			w.full++
		default:
			w.bad++
			if w.bad <= 3 { // the first few say enough
				w.t.Errorf("offload %q: %v (code %v): want success or UNABLE_OFFLOAD", keys[i], err, wire.CodeOf(err))
			}
		}
	}
	return bytes, errs
}

// diskcapCheck stages every key the backend reports and compares the bytes
// with the key's own; it returns the readable keys and their bytes, which
// must also be exactly the keys ScanMeta reports.
func diskcapCheck(t *testing.T, fs *FileStorage, sizes map[string]int) (map[string]uint64, uint64) {
	t.Helper()
	present := map[string]uint64{}
	var total uint64
	for _, k := range slices.Sorted(maps.Keys(sizes)) {
		n, ok := fs.Backend().Size(k)
		if !ok {
			continue
		}
		if n != uint64(sizes[k]) {
			t.Fatalf("Size(%q) = %d, wrote %d bytes", k, n, sizes[k])
		}
		id, offs, errs := fs.Stage([]string{k}, []uint64{n})
		if errs[0] != nil {
			t.Fatalf("stage %q: %v", k, errs[0])
		}
		if got := fs.Buffer().Slice(offs[0], n); string(got) != string(diskcapVal(k, int(n))) {
			t.Fatalf("stage %q: wrong bytes", k)
		}
		fs.Buffer().Release(id)
		present[k] = n
		total += n
	}
	scanned := map[string]uint64{}
	if err := fs.Backend().ScanMeta(func(k string, n uint64) error { scanned[k] = n; return nil }); err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(scanned, present) {
		t.Fatalf("ScanMeta reports %d objects, Size %d", len(scanned), len(present))
	}
	return present, total
}

// With default limits every backend stays within 90% of a small disk while
// four times the disk's size is written through it: opening takes nothing
// (the offset allocator must not reserve the disk), full backends refuse
// objects with UNABLE_OFFLOAD, and what is stored reads back with its own
// bytes, before and after a restart.
func TestDiskCapDefaultLimits(t *testing.T) {
	const uring = true // the default engine; TestDiskCapFullBelowCap tries both
	for _, desc := range []string{DescriptorBucket, DescriptorPerKey, DescriptorOffset} {
		t.Run(desc, func(t *testing.T) {
			dir := diskcapMount(t, diskcapFSSize)
			size, _ := diskcapStat(t, dir)
			limit := size/10*9 + diskcapSlack
			fs := diskcapOpen(t, dir, desc, uring)
			if _, used := diskcapStat(t, dir); used > diskcapSlack {
				t.Fatalf("opening took %d bytes of the %d-byte disk", used, size)
			}
			w := &diskcapWriter{t: t, fs: fs, sizes: map[string]int{}}
			var peak uint64
			for written := 0; written < 4*int(size); {
				n, _ := w.batch(8)
				written += n
				_, used := diskcapStat(t, dir)
				if used > limit {
					t.Fatalf("after %d MiB offloaded the disk holds %d bytes of %d, over the cap %d",
						written>>20, used, size, limit)
				}
				peak = max(peak, used)
			}
			if t.Failed() {
				return
			}
			present, total := diskcapCheck(t, fs, w.sizes)
			t.Logf("%d objects offloaded: %d stored, %d refused as full; %d readable (%d bytes); disk peak %d of %d",
				len(w.keys), w.stored, w.full, len(present), total, peak, size)
			// The cap must not be needlessly low either.
			if total < size/2 {
				t.Fatalf("only %d bytes readable on a %d-byte disk", total, size)
			}
			if err := fs.Close(); err != nil {
				t.Fatal(err)
			}
			fs = diskcapOpen(t, dir, desc, uring)
			if _, used := diskcapStat(t, dir); used > limit {
				t.Fatalf("after reopening the disk holds %d bytes, over the cap %d", used, limit)
			}
			again, _ := diskcapCheck(t, fs, w.sizes)
			if !maps.Equal(again, present) {
				t.Fatalf("after reopening %d objects are readable, before %d", len(again), len(present))
			}
			// Still writable (or cleanly full) after the restart.
			w.fs = fs
			w.batch(8)
			diskcapCheck(t, fs, w.sizes)
		})
	}
}

// diskcapLive is the bytes the backend's records or files of the present
// objects take on disk.
func diskcapLive(desc string, present map[string]uint64) uint64 {
	var live uint64
	for k, n := range present {
		if desc == DescriptorOffset {
			live += offsetSpan(k, n)
		} else {
			live += uint64(perkeyValueOff(len(k))) + roundUpAlign(n)
		}
	}
	return live
}

// Other files fill the disk long before the backend's cap: offloads that
// hit ENOSPC fail cleanly as full (UNABLE_OFFLOAD), leave no temporary file
// and no block behind (once the filler goes, the disk holds exactly the
// live records), and everything stored reads back with its own bytes. Both
// engines: they meet ENOSPC (and short writes) in their own ways.
func TestDiskCapFullBelowCap(t *testing.T) {
	for _, tc := range []struct {
		desc  string
		uring bool
	}{{DescriptorPerKey, true}, {DescriptorPerKey, false}, {DescriptorOffset, true}, {DescriptorOffset, false}} {
		desc, uring := tc.desc, tc.uring
		t.Run(fmt.Sprintf("%s/uring=%v", desc, uring), func(t *testing.T) {
			mnt := diskcapMount(t, diskcapFSSize)
			dir := filepath.Join(mnt, "tier")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			size, _ := diskcapStat(t, mnt)
			diskFloorDisable(t) // the writes meet ENOSPC, not the floor
			fs := diskcapOpen(t, dir, desc, uring)
			_, base := diskcapStat(t, mnt)
			// Another program takes 60% of the disk after the tier opened.
			filler := filepath.Join(mnt, "filler")
			f, err := os.Create(filler)
			if err != nil {
				t.Fatal(err)
			}
			err = unix.Fallocate(int(f.Fd()), 0, 0, int64(size/10*6))
			f.Close()
			if err != nil {
				t.Fatal(err)
			}
			w := &diskcapWriter{t: t, fs: fs, sizes: map[string]int{}}
			for written := 0; written < int(size); { // batch fails the test on errors other than ErrFull
				n, _ := w.batch(8)
				written += n
			}
			if w.full == 0 || w.stored == 0 {
				t.Fatalf("%d stored, %d refused: the disk should have filled part way", w.stored, w.full)
			}
			if t.Failed() {
				return
			}
			if err := os.Remove(filler); err != nil {
				t.Fatal(err)
			}
			present, total := diskcapCheck(t, fs, w.sizes)
			live := diskcapLive(desc, present)
			_, used := diskcapStat(t, mnt)
			t.Logf("%d stored, %d refused; %d readable (%d bytes, %d on disk); disk holds %d past what open left",
				w.stored, w.full, len(present), total, live, used-base)
			if used-base != live {
				t.Fatalf("the disk holds %d bytes past what open left, the live objects take %d: failed writes leaked %d",
					used-base, live, int64(used-base)-int64(live))
			}
			if desc == DescriptorOffset {
				ob := fs.Backend().(*offsetBackend)
				ob.amu.Lock()
				allocated := ob.al.Used()
				ob.amu.Unlock()
				if allocated != live {
					t.Fatalf("the allocator holds %d bytes, the live records take %d", allocated, live)
				}
			}
			var tmps []string
			filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
				if err == nil && strings.Contains(d.Name(), ".tmp") {
					tmps = append(tmps, p)
				}
				return nil
			})
			if len(tmps) > 0 {
				t.Fatalf("temporary files left behind: %v", tmps)
			}
			if err := fs.Close(); err != nil {
				t.Fatal(err)
			}
			fs = diskcapOpen(t, dir, desc, uring)
			if again, _ := diskcapCheck(t, fs, w.sizes); !maps.Equal(again, present) {
				t.Fatalf("after reopening %d objects are readable, before %d", len(again), len(present))
			}
		})
	}
}

// A data file written under a larger cap keeps every record when reopened
// under a smaller one: the records past the new cap are recovered, new
// records are refused until removals bring the bytes below the cap.
func TestOffsetReopenAboveCap(t *testing.T) {
	dir := t.TempDir()
	eng, err := fileio.New(false)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	b := offsetOpen(t, dir, eng, 16<<20, 0)
	want := map[string][]byte{}
	for i := range 12 {
		k := fmt.Sprintf("k%02d", i)
		want[k] = diskcapVal(k, 1<<20-100)
	}
	perkeyPut(t, b, want)
	// reopen opens dir again under the 4 MiB limit: every record of want
	// comes back with its bytes.
	reopen := func(what string) {
		t.Helper()
		b.Close()
		b = offsetOpen(t, dir, eng, 4<<20, 0)
		if got := perkeyScan(t, b); !maps.Equal(got, perkeySizes(want)) {
			t.Fatalf("%s: ScanMeta = %v, want %v", what, got, perkeySizes(want))
		}
		perkeyCheck(t, b, want)
	}
	reopen("reopened under a smaller cap")
	defer func() { b.Close() }()
	if err := b.BatchOffload([]string{"new"}, [][]byte{diskcapVal("new", 5000)})[0]; !errors.Is(err, ErrFull) {
		t.Fatalf("a new record past the cap: %v, want ErrFull", err)
	}
	var gone []string
	for i := range 10 {
		k := fmt.Sprintf("k%02d", i)
		gone = append(gone, k)
		delete(want, k)
	}
	if err := b.Remove(gone); err != nil {
		t.Fatal(err)
	}
	want["new"] = diskcapVal("new", 5000)
	perkeyPut(t, b, map[string][]byte{"new": want["new"]})
	perkeyCheck(t, b, want)
	reopen("second reopen")
}

// Records replaced or removed give their blocks back to the file system:
// the disk holds the live records only, before and after a restart.
func TestOffsetReleaseGivesBlocksBack(t *testing.T) {
	dir := diskcapMount(t, diskcapFSSize)
	eng, err := fileio.New(false)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	_, base := diskcapStat(t, dir)
	b := offsetOpen(t, dir, eng, 0, 0)
	defer func() { b.Close() }()
	want := map[string][]byte{}
	for i := range 8 {
		k := fmt.Sprintf("k%d", i)
		want[k] = diskcapVal(k, 1<<20+i)
	}
	perkeyPut(t, b, want)
	for i := range 4 { // replaced by smaller values
		k := fmt.Sprintf("k%d", i)
		want[k] = diskcapVal(k+"'", 5000+i)
		perkeyPut(t, b, map[string][]byte{k: want[k]})
	}
	if err := b.Remove([]string{"k4", "k5"}); err != nil {
		t.Fatal(err)
	}
	delete(want, "k4")
	delete(want, "k5")
	perkeyCheck(t, b, want)
	check := func(when string) {
		t.Helper()
		live := diskcapLive(DescriptorOffset, perkeySizes(want))
		if _, used := diskcapStat(t, dir); used-base != live {
			t.Fatalf("%s the disk holds %d bytes, the live records take %d", when, used-base, live)
		}
	}
	check("after replacing and removing,")
	b.Close()
	b = offsetOpen(t, dir, eng, 0, 0)
	perkeyCheck(t, b, want)
	check("after reopening,")
}
