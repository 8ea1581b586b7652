package storage

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gostore/gostore/gostore/internal/testbase"
	"github.com/gostore/gostore/gostore/storage/fileio"
	"github.com/gostore/gostore/gostore/wire"
)

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func TestClientBufferLeases(t *testing.T) {
	clk := &fakeClock{t: time.Unix(100, 0)}
	mem := fileio.AlignedBuffer(64<<10, fileio.Alignment)
	b := NewClientBuffer(mem, time.Second, clk.now)
	id1, offs, errs := b.Lease([]uint64{5000, 0, 40 << 10})
	if errs[0] != nil || errs[1] != nil || errs[2] != nil {
		t.Fatal(errs)
	}
	if offs[0]%fileio.Alignment != 0 || offs[2]%fileio.Alignment != 0 || offs[0] == offs[2] {
		t.Fatalf("offsets %v: not aligned or overlapping", offs)
	}
	// 8 KiB + 40 KiB taken: 20 KiB does not fit any more.
	id2, _, errs := b.Lease([]uint64{20 << 10, 4096})
	if !errors.Is(errs[0], ErrBufferFull) || errs[1] != nil {
		t.Fatalf("second lease: %v", errs)
	}
	if used, n := b.Usage(); used != 52<<10 || n != 2 {
		t.Fatalf("usage %d in %d leases", used, n)
	}
	b.Drop(id1, offs[2]) // object 2 failed to stage: its room comes back at once
	if used, _ := b.Usage(); used != 12<<10 {
		t.Fatalf("after drop: %d", used)
	}
	if !b.Release(id1) || b.Release(id1) {
		t.Fatal("release: first must succeed, second must not")
	}
	clk.t = clk.t.Add(999 * time.Millisecond)
	if n := b.GC(); n != 0 {
		t.Fatalf("GC took %d leases before their TTL", n)
	}
	clk.t = clk.t.Add(time.Millisecond)
	if n := b.GC(); n != 1 {
		t.Fatalf("GC took %d, want the forgotten lease", n)
	}
	if used, n := b.Usage(); used != 0 || n != 0 || b.Release(id2) {
		t.Fatalf("after GC: %d bytes in %d leases", used, n)
	}
	// All the room is usable again.
	if _, _, errs := b.Lease([]uint64{64 << 10}); errs[0] != nil {
		t.Fatal(errs[0])
	}
}

func openFS(t *testing.T, dir, desc string, uring bool) *FileStorage {
	t.Helper()
	fs, err := OpenFileStorage(FileStorageConfig{
		Config:     Config{Path: dir, UseURing: uring, TotalSizeLimit: 64 << 20, BucketMaxTotalSize: 64 << 20},
		Descriptor: desc, BufferSize: 1 << 20, GCTTL: time.Minute,
	}, fileio.AlignedBuffer(1<<20, fileio.Alignment), nil)
	if err != nil {
		t.Fatal(err)
	}
	return fs
}

// Stage reads objects into the staging buffer (through fixed-buffer reads
// on io_uring), refuses wrong sizes and missing keys, and frees the room
// of what failed.
func TestFileStorageStage(t *testing.T) {
	for _, desc := range []string{DescriptorBucket, DescriptorPerKey, DescriptorOffset} {
		for _, uring := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/uring=%v", desc, uring), func(t *testing.T) {
				dir := t.TempDir()
				fs := openFS(t, dir, desc, uring)
				defer fs.Close()
				a, b := bytes.Repeat([]byte("a"), 10000), bytes.Repeat([]byte("b"), 300<<10)
				for _, err := range fs.Backend().BatchOffload([]string{"a", "b"}, [][]byte{a, b}) {
					if err != nil {
						t.Fatal(err)
					}
				}
				f0, _ := fs.Engine().Counters()
				id, offs, errs := fs.Stage([]string{"a", "b", "missing", "a", "b"}, []uint64{10000, 300 << 10, 5, 9999, 2 << 20})
				if errs[0] != nil || errs[1] != nil || !errors.Is(errs[2], ErrNotFound) || !errors.Is(errs[3], ErrSize) || !errors.Is(errs[4], ErrSize) {
					t.Fatalf("stage: %v", errs)
				}
				if !bytes.Equal(fs.Buffer().Slice(offs[0], 10000), a) || !bytes.Equal(fs.Buffer().Slice(offs[1], 300<<10), b) {
					t.Fatal("staged bytes differ")
				}
				// Every backend reads values straight into staging slots.
				if f1, _ := fs.Engine().Counters(); uring && f1 == f0 {
					t.Fatal("io_uring staging used no fixed-buffer read")
				}
				if used, _ := fs.Buffer().Usage(); used != 12<<10+300<<10 {
					t.Fatalf("staging holds %d bytes", used)
				}
				// Three objects of 400 KiB do not fit 1 MiB with the lease above.
				big := bytes.Repeat([]byte("c"), 400<<10)
				fs.Backend().BatchOffload([]string{"c1", "c2", "c3"}, [][]byte{big, big, big})
				_, _, errs = fs.Stage([]string{"c1", "c2", "c3"}, []uint64{400 << 10, 400 << 10, 400 << 10})
				full := 0
				for _, err := range errs {
					if errors.Is(err, ErrBufferFull) {
						full++
					}
				}
				if full != 2 || wire.CodeOf(errs[2]) != wire.ErrFileInvalidBuffer {
					t.Fatalf("over-full stage: %v", errs)
				}
				fs.Buffer().Release(id)
			})
		}
	}
}

func TestFileStorageDirectory(t *testing.T) {
	dir := t.TempDir()
	fs := openFS(t, dir, DescriptorBucket, true)
	id := fs.ID()
	if len(id) != 32 {
		t.Fatalf("storage id %q", id)
	}
	if _, err := OpenFileStorage(FileStorageConfig{Config: Config{Path: dir}}, nil, nil); wire.CodeOf(err) != wire.ErrInvalidParams {
		t.Fatalf("a locked directory opened twice: %v", err)
	}
	fs.Close()
	fs.Close() // idempotent
	fs = openFS(t, dir, DescriptorBucket, false)
	defer fs.Close()
	if fs.ID() != id {
		t.Fatalf("the directory's id changed across restarts: %s → %s", id, fs.ID())
	}
}

func TestFileStorageConfigFromEnv(t *testing.T) {
	env := map[string]string{
		EnvDescriptor:                             "  File_Per_Key_Storage_Backend ",
		EnvBufferSize:                             "12345",
		EnvGCTTL:                                  "250",
		EnvHeartbeat:                              "0.5",
		"MOONCAKE_OFFLOAD_FILE_STORAGE_PATH":      "/from/env",
		"MOONCAKE_USE_URING":                      "false",
		"MOONCAKE_BUCKET_EVICTION_POLICY":         "LRU",
		"MOONCAKE_OFFLOAD_BUCKET_MAX_TOTAL_SIZE":  "777",
		"MOONCAKE_BUCKET_MAX_TOTAL_SIZE":          "888",
		"MOONCAKE_OFFLOAD_TOTAL_KEYS_LIMIT":       "x",
		"MOONCAKE_OFFLOAD_BUCKET_KEYS_LIMIT":      "9",
		"MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES": "1000",
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	c := FileStorageConfigFromEnv("", lookup).Filled()
	if c.Path != "/from/env" || c.Descriptor != DescriptorPerKey || c.BufferSize != 12345 ||
		c.GCTTL != 250*time.Millisecond || c.HeartbeatInterval != 500*time.Millisecond || c.UseURing ||
		c.EvictionPolicy != "lru" || c.BucketMaxTotalSize != 777 || c.TotalKeysLimit != 0 ||
		c.BucketKeysLimit != 9 || c.TotalSizeLimit != 1000 {
		t.Fatalf("%+v", c)
	}
	c = FileStorageConfigFromEnv("/arg", func(string) (string, bool) { return "", false }).Filled()
	if c.Path != "/arg" || c.Descriptor != DescriptorBucket || c.BufferSize != DefaultBufferSize ||
		c.GCTTL != DefaultGCTTL || c.HeartbeatInterval != DefaultHeartbeatInterval || !c.UseURing {
		t.Fatalf("defaults: %+v", c)
	}
	// Without a lookup nothing is set: the package never reads the
	// process environment itself.
	for k, v := range env {
		t.Setenv(k, v)
	}
	if n := FileStorageConfigFromEnv("/arg", nil).Filled(); !reflect.DeepEqual(n, c) {
		t.Fatalf("a nil lookup read the environment: %+v", n)
	}
}

// The io_uring switch (MOONCAKE_OFFLOAD_USE_URING, else the legacy
// MOONCAKE_USE_URING) reaches the engine through Config.UseURing: io_uring
// by default, pread when asked, the current name winning whenever it is
// set, and an unrecognised value logged.
func TestUseURingFromEnv(t *testing.T) {
	cases := []struct {
		cur, legacy *string
		want        string
		warn        bool // an unrecognised value must be logged
	}{
		{nil, nil, "io_uring", false}, // io_uring is the default
		{ptr(""), nil, "io_uring", false},
		{ptr("  "), nil, "io_uring", false},
		{ptr("true"), nil, "io_uring", false},
		{ptr("1"), nil, "io_uring", false},
		{ptr("yes"), nil, "io_uring", false},
		{ptr("on"), nil, "io_uring", false},
		{ptr(" TRUE "), nil, "io_uring", false},
		{ptr("On"), nil, "io_uring", false},
		{ptr("false"), nil, "pread", false},
		{ptr("0"), nil, "pread", false},
		{ptr("no"), nil, "pread", false},
		{ptr("off"), nil, "pread", false},
		{ptr(" FALSE\n"), nil, "pread", false},
		{ptr("Off"), nil, "pread", false},
		{ptr("maybe"), nil, "io_uring", true},
		{ptr("0"), ptr("true"), "pread", false},     // the current name wins when set
		{ptr("1"), ptr("false"), "io_uring", false}, // in both directions
		{ptr(""), ptr("false"), "io_uring", false},  // set but empty still wins
		{nil, ptr("true"), "io_uring", false},
		{nil, ptr("1"), "io_uring", false},
		{nil, ptr("no"), "pread", false},
		{nil, ptr(" OFF "), "pread", false},
		{nil, ptr("0"), "pread", false},
		{nil, ptr("bogus"), "io_uring", true},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%q/%q", deref(c.cur), deref(c.legacy)), func(t *testing.T) {
			env := mapEnv{}
			if c.cur != nil {
				env[EnvUseURing] = *c.cur
			}
			if c.legacy != nil {
				env[EnvUseURingLegacy] = *c.legacy
			}
			logs := captureLog(t)
			cfg := BucketConfigFromEnv(t.TempDir(), env.lookup)
			if fs := FileStorageConfigFromEnv("", env.lookup); fs.UseURing != cfg.UseURing {
				t.Fatalf("FileStorageConfigFromEnv says %v, BucketConfigFromEnv %v", fs.UseURing, cfg.UseURing)
			}
			b, err := NewBucket(cfg) // no Engine: the backend opens its own
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if got := b.(*bucketBackend).eng.Name(); got != c.want {
				t.Fatalf("engine %q, want %q", got, c.want)
			}
			if got := strings.Contains(logs.String(), "unrecognised"); got != c.warn {
				t.Fatalf("warning logged = %v, want %v; log: %q", got, c.warn, logs.String())
			}
		})
	}
}

func ptr(s string) *string { return &s }

func deref(s *string) string {
	if s == nil {
		return "unset"
	}
	return *s
}

// captureLog sends the default slog logger to a buffer for the test.
func captureLog(t *testing.T) *testbase.LogBuffer {
	t.Helper()
	var buf testbase.LogBuffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	t.Cleanup(func() { slog.SetDefault(old) })
	return &buf
}

// On a disk that fills below the size cap (a small tmpfs under a large
// cap), the bucket backend lowers its cap and evicts instead of failing.
func TestBucketFullDiskEvicts(t *testing.T) {
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a small tmpfs here (%v: %s)", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", dir).Run() })
	var evicted []string
	b, err := NewBucket(Config{Path: dir, UseURing: true, BucketMaxTotalSize: 1 << 30, BucketKeysLimit: 1,
		OnEvict: func(keys []string) { evicted = append(evicted, keys...) }})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	v := bytes.Repeat([]byte("x"), 600<<10)
	for i := range 20 { // 12 MiB through a 4 MiB filesystem
		if errs := b.BatchOffload([]string{fmt.Sprint("k", i)}, [][]byte{v}); errs[0] != nil {
			t.Fatalf("write %d on a full disk: %v", i, errs[0])
		}
	}
	if len(evicted) < 10 || evicted[0] != "k0" {
		t.Fatalf("evicted %v, want the oldest first", evicted)
	}
	dst := make([]byte, len(v))
	if errs := b.BatchLoad([]string{"k19"}, [][]byte{dst}); errs[0] != nil || !bytes.Equal(dst, v) {
		t.Fatalf("newest object: %v", errs[0])
	}
	if _, ok := b.Size("k0"); ok {
		t.Fatal("the evicted oldest object is still indexed")
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if filepath.Ext(e.Name()) == bucketTmpExt {
			t.Fatalf("leftover %s", e.Name())
		}
	}
}
