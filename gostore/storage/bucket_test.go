package storage

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/gostore/gostore/gostore/internal/fuzzkit"
	"github.com/gostore/gostore/gostore/storage/fileio"
)

// bucketEngines runs fn once per fileio engine.
func bucketEngines(t *testing.T, fn func(t *testing.T, eng fileio.Engine)) {
	for _, uring := range []bool{false, true} {
		name := "pread"
		if uring {
			name = "uring"
		}
		t.Run(name, func(t *testing.T) {
			eng, err := fileio.New(uring)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { eng.Close() })
			fn(t, eng)
		})
	}
}

func bucketOpen(t *testing.T, cfg Config) *bucketBackend {
	t.Helper()
	be, err := NewBucket(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { be.Close() })
	if be.Name() != "bucket_storage_backend" {
		t.Fatalf("name %q", be.Name())
	}
	return be.(*bucketBackend)
}

func bucketVal(key string, n int) []byte {
	r := rand.New(rand.NewSource(int64(len(key)*7919 + n)))
	for _, c := range key {
		r.Seed(r.Int63() + int64(c))
	}
	p := make([]byte, n)
	r.Read(p)
	return p
}

func bucketMustOffload(t *testing.T, b Backend, keys []string, vals [][]byte) {
	t.Helper()
	for i, err := range b.BatchOffload(keys, vals) {
		if err != nil {
			t.Fatalf("offload %q: %v", keys[i], err)
		}
	}
}

// bucketCheck loads keys and compares with want.
func bucketCheck(t *testing.T, b Backend, want map[string][]byte) {
	t.Helper()
	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	dsts := make([][]byte, len(keys))
	for i, k := range keys {
		dsts[i] = make([]byte, len(want[k]))
		if n, ok := b.Size(k); !ok || n != uint64(len(want[k])) {
			t.Fatalf("Size(%q) = %d, %v; want %d", k, n, ok, len(want[k]))
		}
	}
	for i, err := range b.BatchLoad(keys, dsts) {
		if err != nil {
			t.Fatalf("load %q: %v", keys[i], err)
		}
		if !bytes.Equal(dsts[i], want[keys[i]]) {
			t.Fatalf("load %q: wrong bytes", keys[i])
		}
	}
}

func bucketFiles(t *testing.T, dir, ext string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*"+ext))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(m)
	return m
}

func bucketLoadErr(b Backend, key string, n int) error {
	return b.BatchLoad([]string{key}, [][]byte{make([]byte, n)})[0]
}

func TestBucketRoundTrip(t *testing.T) {
	bucketEngines(t, func(t *testing.T, eng fileio.Engine) {
		dir := t.TempDir()
		b := bucketOpen(t, Config{Path: dir, Engine: eng, BucketKeysLimit: 7, BucketSizeLimit: 64 << 10})
		want := map[string][]byte{}
		r := rand.New(rand.NewSource(1))
		for batch := 0; batch < 3; batch++ {
			var keys []string
			var vals [][]byte
			for i := 0; i < 40; i++ {
				k := fmt.Sprintf("obj-%d-%d", batch, i)
				n := []int{0, 1, 100, 4096, 5000, 40000}[r.Intn(6)]
				keys, vals = append(keys, k), append(vals, bucketVal(k, n))
				want[k] = vals[len(vals)-1]
			}
			bucketMustOffload(t, b, keys, vals)
		}
		if n := len(bucketFiles(t, dir, ".bucket")); n < 3*6 {
			t.Fatalf("%d bucket files, want >= 18 (7 keys per bucket)", n)
		}
		if n := len(bucketFiles(t, dir, ".meta")); n != len(bucketFiles(t, dir, ".bucket")) {
			t.Fatalf("%d meta files for %d buckets", n, len(bucketFiles(t, dir, ".bucket")))
		}
		bucketCheck(t, b, want) // 120 keys: several ReadBatch submissions
		if bytes, keys := b.Usage(); keys != len(want) || bytes == 0 {
			t.Fatalf("Usage = %d, %d", bytes, keys)
		}
	})
}

func TestBucketErrors(t *testing.T) {
	bucketEngines(t, func(t *testing.T, eng fileio.Engine) {
		b := bucketOpen(t, Config{Path: t.TempDir(), Engine: eng})
		v := bucketVal("a", 300)
		bucketMustOffload(t, b, []string{"a"}, [][]byte{v})
		errs := b.BatchLoad([]string{"missing", "a", "a"}, [][]byte{make([]byte, 3), make([]byte, 299), make([]byte, 300)})
		if !errors.Is(errs[0], ErrNotFound) || !errors.Is(errs[1], ErrSize) || errs[2] != nil {
			t.Fatalf("errs = %v", errs)
		}
		if _, ok := b.Size("missing"); ok {
			t.Fatal("Size of a missing key")
		}
		if err := b.Remove([]string{"missing", "a"}); err != nil {
			t.Fatal(err)
		}
		if err := bucketLoadErr(b, "a", 300); !errors.Is(err, ErrNotFound) {
			t.Fatalf("after Remove: %v", err)
		}
		if n := len(bucketFiles(t, b.dir, ".bucket")); n != 0 {
			t.Fatalf("empty bucket kept %d files", n)
		}
		if _, err := NewBucket(Config{Path: t.TempDir(), Engine: eng, EvictionPolicy: "random"}); err == nil {
			t.Fatal("unknown policy accepted")
		}
	})
}

func TestBucketReplaceAndRestart(t *testing.T) {
	bucketEngines(t, func(t *testing.T, eng fileio.Engine) {
		dir := t.TempDir()
		cfg := Config{Path: dir, Engine: eng}
		b := bucketOpen(t, cfg)
		bucketMustOffload(t, b, []string{"k", "x", "gone"}, [][]byte{[]byte("old value"), []byte("x1"), []byte("g")})
		before, _ := b.Usage()
		bucketMustOffload(t, b, []string{"k"}, [][]byte{[]byte("new, longer value")})
		bucketCheck(t, b, map[string][]byte{"k": []byte("new, longer value"), "x": []byte("x1")})
		after, keys := b.Usage()
		if keys != 3 || after <= before {
			t.Fatalf("Usage %d→%d bytes, %d keys: the dead copy must stay counted", before, after, keys)
		}
		if err := b.Remove([]string{"gone"}); err != nil {
			t.Fatal(err)
		}
		b.Close()
		b = bucketOpen(t, cfg)
		bucketCheck(t, b, map[string][]byte{"k": []byte("new, longer value"), "x": []byte("x1")})
		if err := bucketLoadErr(b, "gone", 1); !errors.Is(err, ErrNotFound) {
			t.Fatalf("removed key resurrected: %v", err)
		}
		// Replacing every key of a bucket deletes it.
		bucketMustOffload(t, b, []string{"x"}, [][]byte{[]byte("x2")})
		b.Close()
		b = bucketOpen(t, cfg)
		bucketCheck(t, b, map[string][]byte{"k": []byte("new, longer value"), "x": []byte("x2")})
		if n := len(bucketFiles(t, dir, ".bucket")); n != 2 {
			t.Fatalf("%d bucket files, want 2", n)
		}
	})
}

// bucketSpan is the disk footprint of one bucket of n keys "kNN" of size sz.
func bucketSpan(t *testing.T, eng fileio.Engine, n, sz int) uint64 {
	b := bucketOpen(t, Config{Path: t.TempDir(), Engine: eng})
	keys, vals := bucketBatch(0, n, sz)
	bucketMustOffload(t, b, keys, vals)
	u, _ := b.Usage()
	return u
}

func bucketBatch(first, n, sz int) ([]string, [][]byte) {
	var keys []string
	var vals [][]byte
	for i := first; i < first+n; i++ {
		k := fmt.Sprintf("k%02d", i)
		keys, vals = append(keys, k), append(vals, bucketVal(k, sz))
	}
	return keys, vals
}

type bucketEvictLog struct {
	mu    sync.Mutex
	calls [][]string
}

func (l *bucketEvictLog) fn(keys []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, slices.Clone(keys))
}

func (l *bucketEvictLog) get() [][]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.calls)
}

// bucketEvictSetup fills 3 buckets of 2 keys (k00..k05, 1000 B each) under a
// limit of 3.5 buckets.
func bucketEvictSetup(t *testing.T, eng fileio.Engine, policy string) (*bucketBackend, *bucketEvictLog, map[string][]byte) {
	span := bucketSpan(t, eng, 2, 1000)
	log := &bucketEvictLog{}
	b := bucketOpen(t, Config{Path: t.TempDir(), Engine: eng, EvictionPolicy: policy,
		BucketMaxTotalSize: 3*span + span/2, OnEvict: log.fn})
	want := map[string][]byte{}
	for i := 0; i < 3; i++ {
		keys, vals := bucketBatch(2*i, 2, 1000)
		bucketMustOffload(t, b, keys, vals)
		for j := range keys {
			want[keys[j]] = vals[j]
		}
	}
	if len(log.get()) != 0 {
		t.Fatal("evicted before the limit")
	}
	return b, log, want
}

func bucketExpectEvicted(t *testing.T, b *bucketBackend, log *bucketEvictLog, want map[string][]byte, evicted []string) {
	t.Helper()
	calls := log.get()
	if len(calls) != 1 || !slices.Equal(calls[0], evicted) {
		t.Fatalf("OnEvict calls %v, want one call with %v", calls, evicted)
	}
	for _, k := range evicted {
		if err := bucketLoadErr(b, k, 1000); !errors.Is(err, ErrNotFound) {
			t.Fatalf("evicted %q: %v", k, err)
		}
		delete(want, k)
	}
	bucketCheck(t, b, want)
	if n := len(bucketFiles(t, b.dir, ".bucket")); n != 3 {
		t.Fatalf("%d bucket files after eviction, want 3", n)
	}
	if _, keys := b.Usage(); keys != len(want) {
		t.Fatalf("%d keys, want %d", keys, len(want))
	}
}

func TestBucketEvictFIFO(t *testing.T) {
	bucketEngines(t, func(t *testing.T, eng fileio.Engine) {
		b, log, want := bucketEvictSetup(t, eng, "fifo")
		bucketCheck(t, b, map[string][]byte{"k00": want["k00"]}) // reads don't matter for FIFO
		keys, vals := bucketBatch(6, 2, 1000)
		bucketMustOffload(t, b, keys, vals)
		want["k06"], want["k07"] = vals[0], vals[1]
		bucketExpectEvicted(t, b, log, want, []string{"k00", "k01"})
	})
}

func TestBucketEvictLRU(t *testing.T) {
	bucketEngines(t, func(t *testing.T, eng fileio.Engine) {
		b, log, want := bucketEvictSetup(t, eng, "lru")
		// Read buckets 0 then 2: bucket 1 is the least recently used.
		bucketCheck(t, b, map[string][]byte{"k00": want["k00"]})
		bucketCheck(t, b, map[string][]byte{"k05": want["k05"]})
		keys, vals := bucketBatch(6, 2, 1000)
		bucketMustOffload(t, b, keys, vals)
		want["k06"], want["k07"] = vals[0], vals[1]
		bucketExpectEvicted(t, b, log, want, []string{"k02", "k03"})
		// Now bucket 0 (read before bucket 2) goes next.
		keys, vals = bucketBatch(8, 2, 1000)
		bucketMustOffload(t, b, keys, vals)
		if calls := log.get(); len(calls) != 2 || !slices.Equal(calls[1], []string{"k00", "k01"}) {
			t.Fatalf("OnEvict calls %v", calls)
		}
	})
}

// TestBucketEvictLRUCountsWrites: a write is a use. A bucket read before
// newer buckets were written is older than them and goes first; before the
// fix the never-read new buckets went first, and their objects were lost
// (issue 32, bug 1: Mooncake #3097).
func TestBucketEvictLRUCountsWrites(t *testing.T) {
	bucketEngines(t, func(t *testing.T, eng fileio.Engine) {
		span := bucketSpan(t, eng, 2, 1000)
		log := &bucketEvictLog{}
		dir := t.TempDir()
		b := bucketOpen(t, Config{Path: dir, Engine: eng, EvictionPolicy: "lru",
			BucketMaxTotalSize: 3*span + span/2, OnEvict: log.fn})
		want := map[string][]byte{}
		offload := func(first int) {
			keys, vals := bucketBatch(first, 2, 1000)
			bucketMustOffload(t, b, keys, vals)
			for j := range keys {
				want[keys[j]] = vals[j]
			}
		}
		offload(0)
		bucketCheck(t, b, map[string][]byte{"k00": want["k00"]}) // A read at T
		offload(2)                                               // written after T
		offload(4)
		offload(6) // evicts: A's bucket was last used before the other two
		bucketExpectEvicted(t, b, log, want, []string{"k00", "k01"})

		// A restart keeps the order of age: recovered buckets count as
		// used in the order they were written, the oldest goes first.
		b.Close()
		b = bucketOpen(t, Config{Path: dir, Engine: eng, EvictionPolicy: "lru",
			BucketMaxTotalSize: 3*span + span/2, OnEvict: log.fn})
		bucketCheck(t, b, map[string][]byte{"k02": want["k02"]}) // bucket 1 is the newest use now
		offload(8)
		if calls := log.get(); len(calls) != 2 || !slices.Equal(calls[1], []string{"k04", "k05"}) {
			t.Fatalf("OnEvict calls after restart %v, want the second to drop k04, k05", calls)
		}
	})
}

func TestBucketEvictDuringRead(t *testing.T) {
	bucketEngines(t, func(t *testing.T, eng fileio.Engine) {
		b, log, want := bucketEvictSetup(t, eng, "fifo")
		oldest := bucketFiles(t, b.dir, ".bucket")[0]
		entered, release := make(chan struct{}), make(chan struct{})
		var once sync.Once
		bucketLoadHook = func(keys []string) {
			if keys[0] == "k00" {
				once.Do(func() {
					close(entered)
					<-release
				})
			}
		}
		// deleteBucket announces that it is about to wait for the reads.
		waiting := make(chan struct{})
		var waitOnce sync.Once
		bucketDeleteHook = func(uint64) { waitOnce.Do(func() { close(waiting) }) }
		var relOnce sync.Once
		doRelease := func() { relOnce.Do(func() { close(release) }) }
		t.Cleanup(func() { doRelease(); bucketLoadHook, bucketDeleteHook = nil, nil }) // runs before Close on failure
		got := make([]byte, 1000)
		loadErr := make(chan error, 1)
		go func() { loadErr <- b.BatchLoad([]string{"k00"}, [][]byte{got})[0] }()
		<-entered
		offDone := make(chan []error, 1)
		keys, vals := bucketBatch(6, 2, 1000)
		go func() { offDone <- b.BatchOffload(keys, vals) }()
		// Phase 1 and the notification happen; phase 2 waits for the read.
		select {
		case <-waiting:
		case <-time.After(10 * time.Second):
			t.Fatal("eviction never reached the deletion of the victim")
		}
		if len(log.get()) == 0 {
			t.Fatal("OnEvict not called before the deletion")
		}
		select {
		case <-offDone:
			t.Fatal("eviction finished while a read was in flight")
		default:
		}
		if _, err := os.Stat(oldest); err != nil {
			t.Fatalf("bucket file deleted under an in-flight read: %v", err)
		}
		if err := bucketLoadErr(b, "k01", 1000); !errors.Is(err, ErrNotFound) {
			t.Fatalf("evicted key still loadable by new reads: %v", err)
		}
		doRelease()
		if err := <-loadErr; err != nil || !bytes.Equal(got, want["k00"]) {
			t.Fatalf("in-flight read: %v (bytes equal %v)", err, bytes.Equal(got, want["k00"]))
		}
		for _, err := range <-offDone {
			if err != nil {
				t.Fatal(err)
			}
		}
		if _, err := os.Stat(oldest); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("evicted bucket file still there: %v", err)
		}
		want["k06"], want["k07"] = vals[0], vals[1]
		bucketExpectEvicted(t, b, log, want, []string{"k00", "k01"})
	})
}

func TestBucketPolicyNone(t *testing.T) {
	bucketEngines(t, func(t *testing.T, eng fileio.Engine) {
		b, log, want := bucketEvictSetup(t, eng, "none")
		u0, k0 := b.Usage()
		keys, vals := bucketBatch(6, 2, 1000)
		for i, err := range b.BatchOffload(keys, vals) {
			if !errors.Is(err, ErrFull) {
				t.Fatalf("offload %q: %v, want ErrFull", keys[i], err)
			}
		}
		if u, k := b.Usage(); u != u0 || k != k0 || len(log.get()) != 0 {
			t.Fatalf("usage %d/%d → %d/%d, evictions %v", u0, k0, u, k, log.get())
		}
		if n := len(bucketFiles(t, b.dir, ".bucket")); n != 3 {
			t.Fatalf("%d bucket files", n)
		}
		bucketCheck(t, b, want)
		// Key limit too.
		b2 := bucketOpen(t, Config{Path: t.TempDir(), Engine: eng, EvictionPolicy: "none", TotalKeysLimit: 3})
		errs := b2.BatchOffload([]string{"a", "b", "c", "d"}, [][]byte{{1}, {2}, {3}, {4}})
		if !errors.Is(errs[0], ErrFull) {
			t.Fatalf("4 keys over a limit of 3: %v", errs)
		}
	})
}

func TestBucketRestart(t *testing.T) {
	bucketEngines(t, func(t *testing.T, eng fileio.Engine) {
		dir := t.TempDir()
		cfg := Config{Path: dir, Engine: eng, BucketKeysLimit: 5}
		b := bucketOpen(t, cfg)
		want := map[string][]byte{}
		for i := 0; i < 23; i++ {
			k := fmt.Sprintf("r%d", i)
			want[k] = bucketVal(k, i*377)
			bucketMustOffload(t, b, []string{k}, [][]byte{want[k]})
		}
		u0, _ := b.Usage()
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		if err := bucketLoadErr(b, "r1", 377); err == nil {
			t.Fatal("load after Close")
		}
		b = bucketOpen(t, cfg)
		got := map[string]uint64{}
		if err := b.ScanMeta(func(k string, n uint64) error { got[k] = n; return nil }); err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("ScanMeta found %d objects, want %d", len(got), len(want))
		}
		for k, v := range want {
			if got[k] != uint64(len(v)) {
				t.Fatalf("ScanMeta %q size %d, want %d", k, got[k], len(v))
			}
		}
		if u, _ := b.Usage(); u != u0 {
			t.Fatalf("usage %d after restart, %d before", u, u0)
		}
		bucketCheck(t, b, want)
		// New buckets after a restart do not collide with old ids.
		bucketMustOffload(t, b, []string{"new"}, [][]byte{[]byte("fresh")})
		want["new"] = []byte("fresh")
		bucketCheck(t, b, want)
	})
}

func TestBucketCorruptData(t *testing.T) {
	bucketEngines(t, func(t *testing.T, eng fileio.Engine) {
		dir := t.TempDir()
		b := bucketOpen(t, Config{Path: dir, Engine: eng})
		keys, vals := bucketBatch(0, 4, 2000)
		bucketMustOffload(t, b, keys, vals)
		e := b.index["k02"]
		path := b.path(e.bk.id, ".bucket")
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		one := make([]byte, 1)
		if _, err := f.ReadAt(one, int64(e.off)+777); err != nil {
			t.Fatal(err)
		}
		one[0] ^= 0x40
		if _, err := f.WriteAt(one, int64(e.off)+777); err != nil {
			t.Fatal(err)
		}
		f.Close()
		check := func(b Backend) {
			dst := make([]byte, 2000)
			errs := b.BatchLoad(keys, [][]byte{make([]byte, 2000), make([]byte, 2000), dst, make([]byte, 2000)})
			if !errors.Is(errs[2], ErrCorrupt) {
				t.Fatalf("corrupt object: %v", errs[2])
			}
			if bytes.Equal(dst, vals[2]) || !bytes.Equal(dst, make([]byte, 2000)) {
				t.Fatal("corrupt load left data in the buffer")
			}
			delete := map[string][]byte{"k00": vals[0], "k01": vals[1], "k03": vals[3]}
			bucketCheck(t, b, delete)
		}
		check(b)
		b.Close()
		check(bucketOpen(t, Config{Path: dir, Engine: eng})) // lazily detected after restart too
	})
}

// bucketFill offloads n batches of three 500-byte values (keys k00 on),
// one bucket each, and returns what it wrote.
func bucketFill(t *testing.T, b Backend, n int) map[string][]byte {
	t.Helper()
	want := map[string][]byte{}
	for i := 0; i < n; i++ {
		keys, vals := bucketBatch(3*i, 3, 500)
		bucketMustOffload(t, b, keys, vals)
		for j := range keys {
			want[keys[j]] = vals[j]
		}
	}
	return want
}

func TestBucketTornMeta(t *testing.T) {
	bucketEngines(t, func(t *testing.T, eng fileio.Engine) {
		dir := t.TempDir()
		cfg := Config{Path: dir, Engine: eng}
		b := bucketOpen(t, cfg)
		want := bucketFill(t, b, 4)
		b.Close()
		metas, datas := bucketFiles(t, dir, ".meta"), bucketFiles(t, dir, ".bucket")
		if len(metas) != 4 {
			t.Fatalf("%d metas", len(metas))
		}
		st, _ := os.Stat(metas[1])
		if err := os.Truncate(metas[1], st.Size()-3); err != nil { // torn meta: bucket 1 skipped
			t.Fatal(err)
		}
		if err := os.Remove(datas[2]); err != nil { // missing data: bucket 2 skipped
			t.Fatal(err)
		}
		if err := os.WriteFile(metas[3], []byte("garbage"), 0o644); err != nil { // bucket 3 skipped
			t.Fatal(err)
		}
		b = bucketOpen(t, cfg)
		var got []string
		b.ScanMeta(func(k string, _ uint64) error { got = append(got, k); return nil })
		sort.Strings(got)
		if !slices.Equal(got, []string{"k00", "k01", "k02"}) {
			t.Fatalf("recovered %v, want only bucket 0", got)
		}
		for _, k := range []string{"k03", "k06", "k09"} {
			if err := bucketLoadErr(b, k, 500); !errors.Is(err, ErrNotFound) {
				t.Fatalf("%q from a skipped bucket: %v", k, err)
			}
		}
		bucketCheck(t, b, map[string][]byte{"k00": want["k00"], "k01": want["k01"], "k02": want["k02"]})
		bucketMustOffload(t, b, []string{"k03"}, [][]byte{want["k03"]})
		bucketCheck(t, b, map[string][]byte{"k03": want["k03"]})
	})
}

// A meta file longer than its bucket's data file could be (a foreign or
// damaged file; here 1 GiB, sparse) is refused without reading it into
// memory; the other buckets serve as before.
func TestBucketOversizedMetaIsRefusedUnread(t *testing.T) {
	bucketEngines(t, func(t *testing.T, eng fileio.Engine) {
		dir := t.TempDir()
		cfg := Config{Path: dir, Engine: eng}
		b := bucketOpen(t, cfg)
		want := bucketFill(t, b, 2)
		b.Close()
		metas := bucketFiles(t, dir, ".meta")
		if err := os.Truncate(metas[0], 1<<30); err != nil {
			t.Fatal(err)
		}
		allocated := fuzzkit.Allocated(func() { b = bucketOpen(t, cfg) })
		if allocated > 64<<20 {
			t.Fatalf("opening allocated %d MiB for a 1 GiB meta", allocated>>20)
		}
		if err := bucketLoadErr(b, "k00", 500); !errors.Is(err, ErrNotFound) {
			t.Fatalf("k00 from the refused bucket: %v", err)
		}
		bucketCheck(t, b, map[string][]byte{"k03": want["k03"], "k05": want["k05"]})
	})
}

func TestBucketConcurrent(t *testing.T) {
	bucketEngines(t, func(t *testing.T, eng fileio.Engine) {
		span := bucketSpan(t, eng, 4, 3000)
		b := bucketOpen(t, Config{Path: t.TempDir(), Engine: eng, EvictionPolicy: "lru",
			BucketMaxTotalSize: 6 * span, OnEvict: func([]string) {}})
		var wg sync.WaitGroup
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 15; i++ {
					keys := make([]string, 4)
					vals := make([][]byte, 4)
					for j := range keys {
						keys[j] = fmt.Sprintf("g%d-%d", g, (i*4+j)%30)
						vals[j] = bucketVal(keys[j], 3000)
					}
					for _, err := range b.BatchOffload(keys, vals) {
						if err != nil {
							t.Error(err)
						}
					}
					dsts := [][]byte{make([]byte, 3000), make([]byte, 3000)}
					errs := b.BatchLoad(keys[:2], dsts)
					for j, err := range errs {
						// Another goroutine's eviction may have taken it.
						if err == nil && !bytes.Equal(dsts[j], vals[j]) {
							t.Errorf("%q: wrong bytes", keys[j])
						} else if err != nil && !errors.Is(err, ErrNotFound) {
							t.Error(err)
						}
					}
					if i%5 == 4 {
						b.Remove(keys[2:3])
					}
				}
			}()
		}
		wg.Wait()
		if u, _ := b.Usage(); u > 6*span {
			t.Fatalf("usage %d over the limit %d", u, 6*span)
		}
	})
}

func TestBucketConfigFromEnv(t *testing.T) {
	env := mapEnv{
		"MOONCAKE_OFFLOAD_FILE_STORAGE_PATH":       "/env/path",
		"MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES":  "1000",
		"MOONCAKE_OFFLOAD_TOTAL_KEYS_LIMIT":        "20",
		"MOONCAKE_OFFLOAD_BUCKET_SIZE_LIMIT_BYTES": "300",
		"MOONCAKE_OFFLOAD_BUCKET_KEYS_LIMIT":       "4",
		"MOONCAKE_BUCKET_MAX_TOTAL_SIZE":           "777",
		"MOONCAKE_BUCKET_EVICTION_POLICY":          "LRU",
	}
	c := BucketConfigFromEnv("", env.lookup)
	if c.Path != "/env/path" || c.TotalSizeLimit != 1000 || c.TotalKeysLimit != 20 || c.BucketSizeLimit != 300 ||
		c.BucketKeysLimit != 4 || c.BucketMaxTotalSize != 777 || c.EvictionPolicy != "lru" {
		t.Fatalf("legacy: %+v", c)
	}
	env["MOONCAKE_OFFLOAD_BUCKET_MAX_TOTAL_SIZE"] = "888"
	env["MOONCAKE_OFFLOAD_BUCKET_EVICTION_POLICY"] = "none"
	env["MOONCAKE_OFFLOAD_TOTAL_KEYS_LIMIT"] = "bogus"
	c = BucketConfigFromEnv("/arg", env.lookup)
	if c.Path != "/arg" || c.BucketMaxTotalSize != 888 || c.EvictionPolicy != "none" || c.TotalKeysLimit != 0 {
		t.Fatalf("new names: %+v", c)
	}
}

// mapEnv is an environment for the FromEnv readers: what a test sets,
// handed over as the edge hands over the process's.
type mapEnv map[string]string

func (e mapEnv) lookup(name string) (string, bool) {
	v, ok := e[name]
	return v, ok
}
