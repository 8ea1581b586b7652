// fuzz_test.go holds the native fuzz targets (go test -fuzz) for what the
// SSD backends read back from a disk. A disk hands back torn, bit-rotted or
// stale bytes, and every open runs recovery over them before anything else:
// a panic there takes the process down at startup, an allocation sized by a
// corrupt length field can exhaust memory, and a record accepted wrongly is
// served to readers as a cache hit with wrong bytes. So each target feeds
// damaged bytes to the real decoder or to a real backend reopened over a
// damaged directory, and checks the contract of backend.go: corrupt input
// is skipped (logged) or refused with ErrCorrupt/ErrNotFound, never served.
//
//	FuzzBucketMeta      bucketDecodeMeta over arbitrary .meta bytes
//	FuzzBucketRecover   a bucket store reopened after one file is damaged
//	FuzzOffsetRecord    the offset backend's record decoders (scan and load)
//	FuzzOffsetRecover   the offset data file damaged, then reopened
//	FuzzPerKeyRecover   a file_per_key store reopened after one file is damaged
//
// Run one for N seconds (seeds in testdata/fuzz/<name>/ and the f.Add calls):
//
//	CGO_CFLAGS="-O2 -g -Wno-deprecated-declarations" TMPDIR=/dev/shm go test -ldflags=-checklinkname=0 \
//	    -run='^$' -fuzz='^FuzzBucketRecover$' -fuzztime=60s -parallel=1 ./gostore/storage
//
// The whole-store targets lay out a store in a fresh t.TempDir for every
// input and read it back O_DIRECT, which makes a disk write back each file
// first: with TMPDIR on a tmpfs they run some 20 times faster.

package storage

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"runtime/metrics"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gostore/gostore/gostore/storage/fileio"
)

// fuzzLogHandler counts the warnings and errors logged while an input runs:
// recovery must say why it dropped something, and fuzzing must not flood
// stderr with one line per input.
type fuzzLogHandler struct{ n *atomic.Int64 }

func (h fuzzLogHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (h fuzzLogHandler) Handle(context.Context, slog.Record) error    { h.n.Add(1); return nil }
func (h fuzzLogHandler) WithAttrs([]slog.Attr) slog.Handler           { return h }
func (h fuzzLogHandler) WithGroup(string) slog.Handler                { return h }

// fuzzQuietLog routes slog's default logger (which the backends log to) to a
// counter until f ends.
func fuzzQuietLog(f *testing.F) *atomic.Int64 {
	n := new(atomic.Int64)
	old := slog.Default()
	slog.SetDefault(slog.New(fuzzLogHandler{n}))
	f.Cleanup(func() { slog.SetDefault(old) })
	return n
}

// fuzzEngine is one pread engine shared by every input of a target: opening
// one (or an io_uring) per input would dominate the iteration time.
func fuzzEngine(f *testing.F) fileio.Engine {
	eng, err := fileio.New(false)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { eng.Close() })
	return eng
}

// heapAllocated is the bytes the process has allocated so far (cumulative,
// cheap to read, exact for large objects): the difference across a call
// bounds what the call allocated.
func heapAllocated() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// fuzzDir holds the files of a store as bytes, to lay them out again in a
// fresh directory for every input without going through the backend (and
// its fsyncs) each time.
type fuzzDir map[string][]byte // path relative to the store → content

func readFuzzDir(t testing.TB, dir string) fuzzDir {
	t.Helper()
	out := fuzzDir{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out[rel], err = os.ReadFile(p)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func (d fuzzDir) names() []string {
	names := make([]string, 0, len(d))
	for n := range d {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func (d fuzzDir) write(t testing.TB, dir string, replace map[string][]byte) {
	t.Helper()
	for n, p := range d {
		if r, ok := replace[n]; ok {
			p = r
		}
		path := filepath.Join(dir, n)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, p, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// Damage modes shared by the whole-store targets. The raw ones are what a
// disk does; the forged ones also make the checksum that covers the bytes
// right again, so that the fuzzer gets past it and exercises what is behind
// (bounds, ids, duplicates). A forged file is one the backend itself could
// have written, so only no-panic and consistency are required of it; a raw
// one must not cost anything outside the damaged file or record.
const (
	fuzzReplace  = iota // the file becomes data
	fuzzPatch           // data overwrites the file at at (extending it)
	fuzzTruncate        // the file is cut to at bytes
	fuzzForge           // fuzzPatch, then the checksum is fixed
	fuzzForgeAll        // fuzzReplace, then the checksum is fixed
	fuzzModes
)

func fuzzForged(mode uint8) bool {
	m := mode % fuzzModes
	return m == fuzzForge || m == fuzzForgeAll
}

// fuzzDamage applies mode to a copy of orig; fix, if not nil, then fixes the
// checksum of a forged result in place.
func fuzzDamage(orig []byte, mode uint8, at uint32, data []byte, fix func([]byte)) []byte {
	var p []byte
	switch mode % fuzzModes {
	case fuzzReplace, fuzzForgeAll:
		p = bytes.Clone(data)
	case fuzzPatch, fuzzForge:
		p = bytes.Clone(orig)
		o := int(at % uint32(len(orig)+1))
		if end := o + len(data); end > len(p) {
			p = append(p, make([]byte, end-len(p))...)
		}
		copy(p[o:], data)
	case fuzzTruncate:
		p = bytes.Clone(orig[:int(at%uint32(len(orig)+1))])
	}
	if fuzzForged(mode) && fix != nil {
		fix(p)
	}
	return p
}

// fuzzCheckServed checks what a reopened backend serves: ScanMeta and Size
// agree; a key it lists loads either the bytes written for it (want) or an
// error with the destination left zeroed, never other bytes; a key of want
// it does not list is ErrNotFound. forged relaxes "the bytes written for it"
// to "bytes a second load returns too": a forged record is one the backend
// could have written, under any key. It returns the keys that loaded the
// bytes of want and the listing.
func fuzzCheckServed(t *testing.T, b Backend, want map[string][]byte, forged bool) (ok map[string]bool, listed map[string]uint64) {
	t.Helper()
	listed = map[string]uint64{}
	if err := b.ScanMeta(func(k string, n uint64) error {
		if _, dup := listed[k]; dup {
			return fmt.Errorf("ScanMeta lists %q twice", k)
		}
		listed[k] = n
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, keys := b.Usage(); keys != len(listed) {
		t.Fatalf("Usage reports %d keys, ScanMeta %d", keys, len(listed))
	}
	ok = map[string]bool{}
	for k, n := range listed {
		if got, found := b.Size(k); !found || got != n {
			t.Fatalf("ScanMeta lists %q with %d bytes, Size says %d, %v", k, n, got, found)
		}
		if n > 1<<24 {
			t.Fatalf("%q recovered with %d bytes: more than any record on this disk", k, n)
		}
		dst := make([]byte, n)
		err := b.BatchLoad([]string{k}, [][]byte{dst})[0]
		fuzzCheckPadded(t, b, k, dst, err)
		if err != nil {
			if !bytes.Equal(dst, make([]byte, n)) {
				t.Fatalf("load %q failed (%v) but left bytes in the destination", k, err)
			}
			continue
		}
		if w, known := want[k]; known && bytes.Equal(dst, w) {
			ok[k] = true
			continue
		}
		if !forged {
			t.Fatalf("load %q: %d bytes that were never written for it (want %d bytes)", k, n, len(want[k]))
		}
		again := make([]byte, n)
		if err := b.BatchLoad([]string{k}, [][]byte{again})[0]; err != nil || !bytes.Equal(again, dst) {
			t.Fatalf("load %q twice: different results (%v)", k, err)
		}
	}
	for k, w := range want {
		if _, found := listed[k]; found {
			continue
		}
		if _, found := b.Size(k); found {
			t.Fatalf("Size knows %q, ScanMeta does not", k)
		}
		if err := b.BatchLoad([]string{k}, [][]byte{make([]byte, len(w))})[0]; !errors.Is(err, ErrNotFound) {
			t.Fatalf("load of unlisted %q: %v, want ErrNotFound", k, err)
		}
	}
	return ok, listed
}

// fuzzCheckPadded loads k again through BatchLoadPadded, the staging
// slots' path (reads straight into block-padded memory), if b has it: it
// may fail where BatchLoad did not (its padded read may pass the end of a
// damaged file), leaving the destination zeroed, but what it returns must
// be what BatchLoad returned.
func fuzzCheckPadded(t *testing.T, b Backend, k string, plain []byte, plainErr error) {
	t.Helper()
	pl, ok := b.(PaddedLoader)
	n := len(plain)
	if !ok || n == 0 {
		return
	}
	full := fileio.AlignedBuffer(int(roundUpAlign(uint64(n))), fileio.Alignment)
	defer fileio.FreeAligned(full)
	dst := full[:n]
	err := pl.BatchLoadPadded([]string{k}, [][]byte{dst})[0]
	switch {
	case err == nil && (plainErr != nil || !bytes.Equal(dst, plain)):
		t.Fatalf("padded load of %q returned other bytes than a plain one (which said %v)", k, plainErr)
	case err != nil && !bytes.Equal(dst, make([]byte, n)):
		t.Fatalf("padded load of %q failed (%v) but left bytes in the destination", k, err)
	}
}

// fuzzReopenSame closes b, reopens the directory and requires the same
// listing: recovery leaves the directory in a state it recovers the same
// way from (no key lost or resurrected by a second restart).
func fuzzReopenSame(t *testing.T, b Backend, open func() (Backend, error), listed map[string]uint64) {
	t.Helper()
	if err := b.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	b2, err := open()
	if err != nil {
		t.Fatalf("second reopen: %v", err)
	}
	defer b2.Close()
	again := map[string]uint64{}
	b2.ScanMeta(func(k string, n uint64) error { again[k] = n; return nil })
	if !maps.Equal(again, listed) {
		t.Fatalf("second reopen lists %v, first %v", again, listed)
	}
}

// ---- bucket backend --------------------------------------------------------

// fuzzMetaFixCRC makes p's trailing CRC32C right.
func fuzzMetaFixCRC(p []byte) {
	if len(p) >= 4 {
		binary.LittleEndian.PutUint32(p[len(p)-4:], crc32.Checksum(p[:len(p)-4], bucketCRCTable))
	}
}

// fuzzMetaSeeds are .meta images: valid ones, and the shapes of damage the
// decoder must refuse without allocating what they claim.
func fuzzMetaSeeds() [][]byte {
	ents := []*bucketEntry{
		{key: "k00", off: 4096, size: 500, crc: 0x01020304},
		{key: "k01", off: 8192, size: 4096, crc: 0xa0b0c0d0},
		{key: "", off: 16384, size: 0},
	}
	valid := bucketEncodeMeta(1700000000000000001, 16384, ents)
	empty := bucketEncodeMeta(42, 0, nil)
	billions := bytes.Clone(valid) // count 2^32-1 with three entries' bytes
	binary.LittleEndian.PutUint32(billions[16:], 0xffffffff)
	fuzzMetaFixCRC(billions)
	hugeKey := bytes.Clone(valid) // first key claims 4 GiB
	binary.LittleEndian.PutUint32(hugeKey[bucketMetaHdrLen:], 0xffffffff)
	fuzzMetaFixCRC(hugeKey)
	wrap := bucketEncodeMeta(7, 1<<20, []*bucketEntry{{key: "w", off: 1 << 19, size: ^uint64(0) - 100}})
	return [][]byte{valid, empty, billions, hugeKey, wrap, valid[:len(valid)-3], valid[:bucketMetaHdrLen+3], []byte("garbage")}
}

// FuzzBucketMeta feeds arbitrary bytes to bucketDecodeMeta, the parser of a
// bucket's .meta file. fixCRC makes the trailing checksum right first, so
// that the fields behind it get exercised. Properties: no panic; at most a
// bounded allocation (a count or key length field claiming billions must not
// be believed before the bytes are there); a meta that is accepted has its
// entries within the data size, names as many entries as it holds, and
// encodes back to the same bytes (bucketEncodeMeta), so the writer and the
// reader agree on the format.
func FuzzBucketMeta(f *testing.F) {
	for _, s := range fuzzMetaSeeds() {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, p []byte, fixCRC bool) {
		p = bytes.Clone(p)
		if fixCRC {
			fuzzMetaFixCRC(p)
		}
		before := heapAllocated()
		h, ents, err := bucketDecodeMeta(p)
		// Entries cost ~100 bytes per 24-byte entry plus the key, the error
		// message quotes at most one key: well under 16x the input.
		if got, limit := heapAllocated()-before, 16*uint64(len(p))+1<<20; got > limit {
			t.Fatalf("decoding %d bytes allocated %d bytes (limit %d)", len(p), got, limit)
		}
		if err != nil {
			if !errors.Is(err, errBucketMeta) || ents != nil {
				t.Fatalf("refusal %v with %d entries, want errBucketMeta and none", err, len(ents))
			}
			return
		}
		if n := binary.LittleEndian.Uint32(p[16:]); uint64(n) != uint64(len(ents)) {
			t.Fatalf("header counts %d entries, decoded %d", n, len(ents))
		}
		for _, e := range ents {
			if len(e.key) > bucketMaxKeyLen || e.off > h.dataSize || e.size > h.dataSize-e.off {
				t.Fatalf("entry %q at %d+%d accepted beyond data size %d", e.key, e.off, e.size, h.dataSize)
			}
		}
		re := bucketEncodeMeta(h.id, h.dataSize, ents)
		if len(re) != len(p) {
			t.Fatalf("re-encoded %d bytes, decoded %d", len(re), len(p))
		}
		// Bytes 20..24 are reserved (written as zero, not read).
		got := bytes.Clone(p[:len(p)-4])
		clear(got[20:24])
		if !bytes.Equal(got, re[:len(re)-4]) {
			t.Fatalf("meta does not re-encode to itself")
		}
	})
}

// bucketGolden is a bucket store written by the real backend, kept as bytes.
type bucketGolden struct {
	files fuzzDir
	names []string            // sorted: <id>.bucket, <id>.meta, ...
	want  map[string][]byte   // key → the bytes last written for it
	home  map[string]string   // key → id (file name stem) of the bucket holding it
	keys  map[string][]string // id → the keys living in that bucket
}

func newBucketGolden(f *testing.F, eng fileio.Engine) *bucketGolden {
	dir := f.TempDir()
	be, err := NewBucket(Config{Path: dir, Engine: eng, BucketKeysLimit: 3, BucketMaxTotalSize: 1 << 30})
	if err != nil {
		f.Fatal(err)
	}
	g := &bucketGolden{want: map[string][]byte{}, home: map[string]string{}, keys: map[string][]string{}}
	batches := [][]string{{"a0", "a1", "a2"}, {"b0", "a1", "b1"}, {"c0"}} // a1 is rewritten: bucket 1's meta loses it
	sizes := []int{1, 100, 4096, 5000, 37, 9000, 4097}
	i := 0
	for _, keys := range batches {
		vals := make([][]byte, len(keys))
		for j, k := range keys {
			vals[j] = perkeyVal(100+i, sizes[i%len(sizes)])
			g.want[k] = vals[j]
			i++
		}
		for j, err := range be.BatchOffload(keys, vals) {
			if err != nil {
				f.Fatalf("offload %q: %v", keys[j], err)
			}
		}
	}
	b := be.(*bucketBackend)
	for k := range g.want {
		id := fmt.Sprintf("%0*d", bucketIDWidth, b.index[k].bk.id)
		g.home[k] = id
		g.keys[id] = append(g.keys[id], k)
	}
	if err := be.Close(); err != nil {
		f.Fatal(err)
	}
	g.files = readFuzzDir(f, dir)
	g.names = g.files.names()
	if len(g.names) != 6 {
		f.Fatalf("golden store has files %v, want 3 buckets", g.names)
	}
	return g
}

// FuzzBucketRecover writes a bucket store of three buckets with the real
// backend, damages one of its six files (which, mode, at, data: see
// fuzzDamage; a forged meta also gets the bucket's id so that it is looked
// at), reopens the directory (recover, openBucket, bucketDecodeMeta) and
// checks what is served:
//   - no panic, and no error from the open (a damaged bucket is skipped);
//   - every listed key loads the bytes written for it or fails with the
//     destination zeroed (fuzzCheckServed);
//   - raw damage costs nothing outside its bucket: every key of the other
//     buckets loads its bytes, and a bucket that lost keys says so in the
//     log (slog warning or error);
//   - a second reopen lists the same keys.
func FuzzBucketRecover(f *testing.F) {
	logs := fuzzQuietLog(f)
	eng := fuzzEngine(f)
	g := newBucketGolden(f, eng)
	for _, s := range fuzzMetaSeeds() {
		f.Add(uint8(1), uint8(fuzzReplace), uint32(0), s)  // bucket 1's meta replaced
		f.Add(uint8(3), uint8(fuzzForgeAll), uint32(0), s) // bucket 2's meta forged
	}
	f.Add(uint8(1), uint8(fuzzTruncate), uint32(40), []byte(nil))          // torn meta
	f.Add(uint8(5), uint8(fuzzForge), uint32(16), []byte{9, 0, 0, 0})      // meta count bumped, CRC fixed
	f.Add(uint8(5), uint8(fuzzForge), uint32(32), []byte{0xff, 0xff})      // key length bumped, CRC fixed
	f.Add(uint8(3), uint8(fuzzForge), uint32(48), []byte{0, 0, 1, 0})      // value offset moved, CRC fixed
	f.Add(uint8(0), uint8(fuzzPatch), uint32(4096+10), []byte("rot"))      // value bytes rotted
	f.Add(uint8(2), uint8(fuzzPatch), uint32(4096-24), []byte("GSBRxxxx")) // record header rotted
	f.Add(uint8(0), uint8(fuzzTruncate), uint32(4096), []byte(nil))        // data file cut short
	f.Add(uint8(4), uint8(fuzzReplace), uint32(0), []byte(nil))            // data file emptied
	f.Fuzz(func(t *testing.T, which, mode uint8, at uint32, data []byte) {
		name := g.names[int(which)%len(g.names)]
		id, ext := strings.TrimSuffix(name, filepath.Ext(name)), filepath.Ext(name)
		var fix func([]byte)
		if ext == bucketMetaExt {
			fix = func(p []byte) {
				if len(p) >= 16 {
					n, _ := strconv.ParseUint(id, 10, 64)
					binary.LittleEndian.PutUint64(p[8:], n)
				}
				fuzzMetaFixCRC(p)
			}
		}
		damaged := fuzzDamage(g.files[name], mode, at, data, fix)
		// Raw damage that still decodes (data carrying a whole valid meta)
		// is a forgery too.
		forged := fuzzForged(mode) && fix != nil
		if _, _, err := bucketDecodeMeta(damaged); err == nil && ext == bucketMetaExt && !bytes.Equal(damaged, g.files[name]) {
			forged = true
		}
		dir := t.TempDir()
		g.files.write(t, dir, map[string][]byte{name: damaged})

		logs.Store(0)
		cfg := Config{Path: dir, Engine: eng, BucketMaxTotalSize: 1 << 30}
		be, err := NewBucket(cfg)
		if err != nil {
			t.Fatalf("open over a damaged %s: %v (a damaged bucket is to be skipped)", name, err)
		}
		ok, listed := fuzzCheckServed(t, be, g.want, forged)
		if !forged {
			lost := false
			for k, home := range g.home {
				switch {
				case home != id:
					if !ok[k] {
						t.Fatalf("damage to %s cost %q of bucket %s", name, k, home)
					}
				default:
					if _, in := listed[k]; !in {
						lost = true
					}
				}
			}
			if lost && logs.Load() == 0 {
				t.Fatalf("bucket %s dropped without a log line", id)
			}
		}
		fuzzReopenSame(t, be, func() (Backend, error) { return NewBucket(cfg) }, listed)
	})
}

// ---- offset backend --------------------------------------------------------

// fuzzOffsetRecord is a record as writeRecord lays it out (span bytes).
func fuzzOffsetRecord(key string, val []byte, seq uint64) []byte {
	valOff, span := offsetLayout(uint64(len(key)), uint64(len(val)))
	buf := make([]byte, span)
	binary.LittleEndian.PutUint32(buf[0:], offsetMagic)
	binary.LittleEndian.PutUint32(buf[8:], uint32(len(key)))
	binary.LittleEndian.PutUint32(buf[12:], uint32(len(val)))
	binary.LittleEndian.PutUint64(buf[16:], seq)
	copy(buf[offsetHdrLen:], key)
	copy(buf[valOff:], val)
	binary.LittleEndian.PutUint32(buf[4:], offsetCRC(buf, uint32(len(key)), val))
	return buf
}

// fuzzOffsetFixCRC makes the CRC of the record at the start of p right, if
// its header parses and the record fits in p.
func fuzzOffsetFixCRC(p []byte) {
	kl, vl, err := offsetParseHdr(p)
	if err != nil || kl > 1<<20 {
		return
	}
	valOff, span := offsetLayout(uint64(kl), uint64(vl))
	if span > uint64(len(p)) {
		return
	}
	binary.LittleEndian.PutUint32(p[4:], offsetCRC(p, kl, p[valOff:valOff+uint64(vl)]))
}

// FuzzOffsetRecord feeds arbitrary bytes to the offset backend's record
// decoders as recovery (scan) and loads use them: offsetParseHdr, then, as
// scan does for a header whose record fits, offsetCheck over the record's
// span, and offsetVerify, the load path's check. fixCRC makes the record's
// CRC right first. Properties: no panic; a record that checks out is exactly
// what writeRecord writes for its key, value and seq (header, key and value
// bytes), and the load path accepts it for that key and refuses it for any
// other key or length.
func FuzzOffsetRecord(f *testing.F) {
	valid := fuzzOffsetRecord("key-1", perkeyVal(1, 5000), 7)
	empty := fuzzOffsetRecord("", nil, 1)
	hugeVal := bytes.Clone(valid)
	binary.LittleEndian.PutUint32(hugeVal[12:], 0xffffffff)
	hugeKey := bytes.Clone(valid)
	binary.LittleEndian.PutUint32(hugeKey[8:], 1<<20+1)
	for _, s := range [][]byte{valid, empty, hugeVal, hugeKey, valid[:offsetHdrLen+3], valid[:4096], []byte("GSO2")} {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, p []byte, fixCRC bool) {
		// The load path checks whatever head it reads against the key it
		// asked for: any bytes, any key.
		_ = offsetVerify(p, string(p[:min(len(p), 5)]), p[min(len(p), 5):])

		kl, vl, err := offsetParseHdr(p)
		if err != nil {
			if len(p) >= offsetHdrLen && binary.LittleEndian.Uint32(p) == offsetMagic {
				t.Fatalf("header with the magic refused: %v", err)
			}
			return
		}
		if kl != binary.LittleEndian.Uint32(p[8:]) || vl != binary.LittleEndian.Uint32(p[12:]) {
			t.Fatalf("header parsed as %d, %d", kl, vl)
		}
		valOff, span := offsetLayout(uint64(kl), uint64(vl))
		if kl > 1<<20 || span > 4<<20 {
			return // scan skips the first; the second is sane but slow to fuzz
		}
		// scan hands offsetCheck the record's whole span, read from the file.
		rec := make([]byte, span)
		copy(rec, p)
		if fixCRC {
			fuzzOffsetFixCRC(rec)
		}
		found, err := offsetCheck(rec, kl, vl)
		if err != nil {
			return
		}
		val := rec[valOff : valOff+uint64(vl)]
		if found.key != string(rec[offsetHdrLen:offsetHdrLen+kl]) || found.size != uint64(vl) ||
			found.seq != binary.LittleEndian.Uint64(rec[16:]) {
			t.Fatalf("record decoded as %+v", found)
		}
		want := fuzzOffsetRecord(found.key, val, found.seq)
		if !bytes.Equal(rec[:offsetHdrLen+kl], want[:offsetHdrLen+kl]) || uint64(len(want)) != span {
			t.Fatalf("accepted record differs from the one writeRecord writes for %q", found.key)
		}
		if err := offsetVerify(rec[:valOff], found.key, val); err != nil {
			t.Fatalf("load path refuses a record recovery accepts: %v", err)
		}
		if err := offsetVerify(rec[:valOff], found.key+"x", val); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("load path accepts the record of %q for another key: %v", found.key, err)
		}
		if len(val) > 0 {
			if err := offsetVerify(rec[:valOff], found.key, val[:len(val)-1]); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("load path accepts a shorter value: %v", err)
			}
		}
	})
}

// offsetGolden is an offset data file written by the real backend.
type offsetGolden struct {
	file  []byte
	want  map[string][]byte
	where map[string][2]uint64 // key → record offset, span
}

const offsetFuzzCap = 256 << 10 // the data file's size: its cap

// offsetRecordAt reports whether a whole record that checks out starts at
// block offset at of the file image p, and its span.
func offsetRecordAt(p []byte, at uint64) (span uint64, ok bool) {
	kl, vl, err := offsetParseHdr(p[at:])
	if err != nil || kl > 1<<20 {
		return 0, false
	}
	_, span = offsetLayout(uint64(kl), uint64(vl))
	if at+span > uint64(len(p)) {
		return 0, false
	}
	_, err = offsetCheck(p[at:at+span], kl, vl)
	return span, err == nil
}

// newRecords reports whether the file image p holds, at any block, a
// record that checks out and is not one of the golden file's, byte for
// byte: recovery may legitimately prefer such a record.
func (g *offsetGolden) newRecords(p []byte) bool {
	for at := uint64(0); at+offsetHdrLen <= uint64(len(p)); at += fileio.Alignment {
		span, ok := offsetRecordAt(p, at)
		if !ok {
			continue
		}
		gspan, gok := uint64(0), false
		if at+offsetHdrLen <= uint64(len(g.file)) {
			gspan, gok = offsetRecordAt(g.file, at)
		}
		if !gok || gspan != span || !bytes.Equal(p[at:at+span], g.file[at:at+span]) {
			return true
		}
	}
	return false
}

func newOffsetGolden(f *testing.F, eng fileio.Engine) *offsetGolden {
	dir := f.TempDir()
	be, err := NewOffsetAllocator(Config{Path: dir, Engine: eng, TotalSizeLimit: offsetFuzzCap})
	if err != nil {
		f.Fatal(err)
	}
	g := &offsetGolden{want: map[string][]byte{}, where: map[string][2]uint64{}}
	// One key per batch: a batch writes in parallel, so its layout would
	// vary from run to run, and the seeds aim at offsets.
	put := func(k string, v []byte) {
		if err := be.BatchOffload([]string{k}, [][]byte{v})[0]; err != nil {
			f.Fatalf("offload %q: %v", k, err)
		}
		g.want[k] = v
	}
	put("o0", perkeyVal(1, 1))
	put("o1", perkeyVal(2, 5000))
	put("o2", perkeyVal(3, 300))
	put("o3", perkeyVal(4, 20000))
	put("o2", perkeyVal(5, 7000)) // replaced: the old record is invalidated
	put("gone", perkeyVal(6, 100))
	if err := be.Remove([]string{"gone"}); err != nil {
		f.Fatal(err)
	}
	delete(g.want, "gone")
	put("o4", perkeyVal(7, 4096))
	b := be.(*offsetBackend)
	for k := range g.want {
		sh := b.shard(k)
		e := sh.idx[k]
		g.where[k] = [2]uint64{e.off, e.span}
	}
	if err := be.Close(); err != nil {
		f.Fatal(err)
	}
	if g.file, err = os.ReadFile(filepath.Join(dir, offsetFile)); err != nil {
		f.Fatal(err)
	}
	return g
}

// FuzzOffsetRecover writes an offset data file with the real backend
// (five live records, a replaced and a removed one), damages it (mode, at,
// data: see fuzzDamage; a forged patch gets the CRC of the record of the
// block it starts in fixed), reopens it (recover, scan, rebuild) and checks:
//   - no panic, no error from the open;
//   - every listed key loads its bytes or fails with the destination
//     zeroed (fuzzCheckServed);
//   - raw damage costs only the records it overlaps;
//   - the rebuilt allocator hands out no space that holds a live record:
//     a new object written after the reopen loads back, and so does every
//     object that loaded before it;
//   - a second reopen lists the same keys.
func FuzzOffsetRecover(f *testing.F) {
	fuzzQuietLog(f)
	eng := fuzzEngine(f)
	g := newOffsetGolden(f, eng)
	o1, o3 := uint32(g.where["o1"][0]), uint32(g.where["o3"][0])
	f.Add(uint8(fuzzPatch), o1+offsetHdrLen+1, []byte("rot"))           // key rotted
	f.Add(uint8(fuzzPatch), o1+4096+100, []byte("rot"))                 // value rotted
	f.Add(uint8(fuzzPatch), o3+12, []byte{0xff, 0xff, 0xff, 0xff})      // value length 4 GiB
	f.Add(uint8(fuzzForge), o3+12, []byte{0x00, 0x00, 0x02, 0x00})      // value length grown, CRC fixed
	f.Add(uint8(fuzzForge), o3+8, []byte{0x02, 0x00, 0x00, 0x00, 0x10}) // key cut short, CRC fixed
	f.Add(uint8(fuzzForge), o1+16, []byte{0xff, 0xff, 0xff, 0xff})      // seq raised, CRC fixed
	f.Add(uint8(fuzzTruncate), o3+9000, []byte(nil))                    // torn last record
	f.Add(uint8(fuzzTruncate), uint32(0), []byte(nil))                  // empty file
	f.Add(uint8(fuzzForge), uint32(offsetFuzzCap-4096), fuzzOffsetRecord("o1", []byte("forged"), 1<<40))
	f.Add(uint8(fuzzForge), uint32(offsetFuzzCap-4096), fuzzOffsetRecord("big", nil, 1)[:offsetHdrLen+3])
	f.Add(uint8(fuzzPatch), uint32(offsetFuzzCap-8), []byte("GSO2 past the end of the file"))
	f.Fuzz(func(t *testing.T, mode uint8, at uint32, data []byte) {
		if mode%fuzzModes == fuzzForgeAll {
			mode = fuzzForge // a whole new file is fuzzOffsetRecord's job
		}
		start := uint64(at % uint32(len(g.file)+1))
		fix := func(p []byte) { fuzzOffsetFixCRC(p[roundDownAlign(start):]) }
		damaged := fuzzDamage(g.file, mode, at, data, fix)
		// Raw damage that carries a whole valid record (the fuzzer copies
		// one from a seed) is a forgery too.
		forged := fuzzForged(mode) || g.newRecords(damaged)
		lo, hi := start, start+uint64(len(data)) // the bytes raw damage changed
		switch mode % fuzzModes {
		case fuzzReplace:
			lo, hi = 0, ^uint64(0)
		case fuzzTruncate:
			hi = ^uint64(0)
		}
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, offsetFile), damaged, 0o644); err != nil {
			t.Fatal(err)
		}
		cfg := Config{Path: dir, Engine: eng, TotalSizeLimit: offsetFuzzCap}
		be, err := NewOffsetAllocator(cfg)
		if err != nil {
			t.Fatalf("open over a damaged file: %v", err)
		}
		ok, listed := fuzzCheckServed(t, be, g.want, forged)
		if !forged {
			for k, w := range g.where {
				if w[0]+w[1] <= lo || w[0] >= hi {
					if !ok[k] {
						t.Fatalf("damage to [%d,%d) cost %q at [%d,+%d)", lo, hi, k, w[0], w[1])
					}
				}
			}
		}
		// A new record must land in free space only.
		fresh := perkeyVal(99, 6000)
		if err := be.BatchOffload([]string{"fresh"}, [][]byte{fresh})[0]; err == nil {
			good := map[string][]byte{"fresh": fresh}
			for k := range ok {
				good[k] = g.want[k]
			}
			for k, v := range good {
				dst := make([]byte, len(v))
				if err := be.BatchLoad([]string{k}, [][]byte{dst})[0]; err != nil || !bytes.Equal(dst, v) {
					t.Fatalf("after a new write, %q (%d bytes) loads %v / wrong bytes", k, len(v), err)
				}
			}
			listed["fresh"] = uint64(len(fresh))
		} else if !errors.Is(err, ErrFull) {
			t.Fatalf("new write after the reopen: %v", err)
		}
		fuzzReopenSame(t, be, func() (Backend, error) { return NewOffsetAllocator(cfg) }, listed)
	})
}

// ---- file_per_key backend --------------------------------------------------

// fuzzPerKeyFixCRC makes the CRC in a file's header right for the key and
// value the file holds, if the header and the file's length allow.
func fuzzPerKeyFixCRC(p []byte) {
	h, err := perkeyDecodeHdr(p)
	if err != nil || h.keyLen > 1<<20 {
		return
	}
	valOff := uint64(perkeyValueOff(int(h.keyLen)))
	if h.valLen > uint64(len(p)) || valOff+h.valLen > uint64(len(p)) {
		return
	}
	key := p[perkeyHdrLen : perkeyHdrLen+h.keyLen]
	crc := crc32.Update(crc32.Checksum(key, kvCRCTable), kvCRCTable, p[valOff:valOff+h.valLen])
	binary.LittleEndian.PutUint32(p[12:], crc)
}

// fuzzPerKeyValid reports whether p is a whole file_per_key file whose
// CRC checks out (what recovery and a load both accept, the name aside).
func fuzzPerKeyValid(p []byte) bool {
	h, err := perkeyDecodeHdr(p)
	if err != nil || h.keyLen > 1<<20 {
		return false
	}
	valOff := uint64(perkeyValueOff(int(h.keyLen)))
	if h.valLen > uint64(len(p)) || valOff+h.valLen > uint64(len(p)) {
		return false
	}
	key := p[perkeyHdrLen : perkeyHdrLen+h.keyLen]
	return crc32.Update(crc32.Checksum(key, kvCRCTable), kvCRCTable, p[valOff:valOff+h.valLen]) == h.crc
}

// FuzzPerKeyRecover writes a file_per_key store of four objects with the
// real backend, damages one object's file (which, mode, at, data: see
// fuzzDamage), reopens it (recover, readMeta) and checks that every listed
// key loads its bytes or fails with the destination zeroed, that raw damage
// costs only the damaged file's object, and that a second reopen lists the
// same keys.
func FuzzPerKeyRecover(f *testing.F) {
	fuzzQuietLog(f)
	eng := fuzzEngine(f)
	dir := f.TempDir()
	be, err := NewFilePerKey(Config{Path: dir, Engine: eng})
	if err != nil {
		f.Fatal(err)
	}
	want := map[string][]byte{"p0": perkeyVal(1, 1), "p1": perkeyVal(2, 5000), "p2": perkeyVal(3, 4096), "p3": perkeyVal(4, 0)}
	for k, v := range want {
		if err := be.BatchOffload([]string{k}, [][]byte{v})[0]; err != nil {
			f.Fatal(err)
		}
	}
	be.Close()
	files := readFuzzDir(f, dir)
	names := files.names()
	owner := map[string]string{} // file → key
	for k := range want {
		h := perkeyHash(k)
		owner[filepath.Join(h[:2], h[2:4], h)] = k
	}
	f.Add(uint8(0), uint8(fuzzPatch), uint32(0), []byte{0})                        // magic rotted
	f.Add(uint8(1), uint8(fuzzPatch), uint32(8), []byte{3})                        // key length
	f.Add(uint8(1), uint8(fuzzForge), uint32(16), []byte{0x10, 0x20})              // value length, CRC fixed
	f.Add(uint8(2), uint8(fuzzForge), uint32(4096+7), []byte("forged value"))      // value, CRC fixed
	f.Add(uint8(2), uint8(fuzzPatch), uint32(4096+7), []byte("rot"))               // value rotted
	f.Add(uint8(3), uint8(fuzzTruncate), uint32(4096), []byte(nil))                // torn
	f.Add(uint8(3), uint8(fuzzReplace), uint32(0), []byte("GSPK\x02\x00\x00\x00")) // short
	f.Fuzz(func(t *testing.T, which, mode uint8, at uint32, data []byte) {
		name := names[int(which)%len(names)]
		damaged := fuzzDamage(files[name], mode, at, data, fuzzPerKeyFixCRC)
		// Raw damage that leaves a whole valid file (data carrying one)
		// is a forgery too.
		forged := fuzzForged(mode) || !bytes.Equal(damaged, files[name]) && fuzzPerKeyValid(damaged)
		d := t.TempDir()
		files.write(t, d, map[string][]byte{name: damaged})
		cfg := Config{Path: d, Engine: eng}
		b, err := NewFilePerKey(cfg)
		if err != nil {
			t.Fatalf("open over a damaged file: %v", err)
		}
		ok, listed := fuzzCheckServed(t, b, want, forged)
		if !forged {
			for k := range want {
				if k != owner[name] && !ok[k] {
					t.Fatalf("damage to %s (%q) cost %q", name, owner[name], k)
				}
			}
		}
		fuzzReopenSame(t, b, func() (Backend, error) { return NewFilePerKey(cfg) }, listed)
	})
}
