package storage

import (
	"encoding/binary"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/gostore/gostore/gostore/storage/fileio"
)

func offsetOpen(t *testing.T, dir string, eng fileio.Engine, sizeLimit, keysLimit uint64) Backend {
	t.Helper()
	b, err := NewOffsetAllocator(Config{Path: dir, Engine: eng, TotalSizeLimit: sizeLimit, TotalKeysLimit: keysLimit})
	if err != nil {
		t.Fatal(err)
	}
	if b.Name() != "offset_allocator_storage_backend" {
		t.Fatalf("Name = %q", b.Name())
	}
	return b
}

func TestOffsetSuite(t *testing.T) { perkeySuite(t, offsetOpen) }

func offsetPos(t *testing.T, b Backend, key string) uint64 {
	ob := b.(*offsetBackend)
	sh := ob.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.idx[key]
	if e == nil {
		t.Fatalf("%q not indexed", key)
	}
	return e.off
}

func offsetFlip(t *testing.T, dir string, at int64) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(dir, offsetFile), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c := make([]byte, 1)
	if _, err := f.ReadAt(c, at); err != nil {
		t.Fatal(err)
	}
	c[0] ^= 0x10
	if _, err := f.WriteAt(c, at); err != nil {
		t.Fatal(err)
	}
	f.Sync()
}

func TestOffsetFileAndSpace(t *testing.T) {
	dir := t.TempDir()
	eng, _ := fileio.New(false)
	defer eng.Close()
	b := offsetOpen(t, dir, eng, 1<<20+100, 0)
	fi, err := os.Stat(filepath.Join(dir, offsetFile))
	if err != nil || fi.Size() != 1<<20 {
		t.Fatalf("data file: %v %v", fi, err)
	}
	// Replace and remove return space: writing 3 x 300 KiB repeatedly fits.
	for i := 0; i < 20; i++ {
		perkeyPut(t, b, map[string][]byte{"a": perkeyVal(i, 300<<10), "b": perkeyVal(i+1, 300<<10)})
		if err := b.Remove([]string{"b"}); err != nil {
			t.Fatal(err)
		}
	}
	perkeyCheck(t, b, map[string][]byte{"a": perkeyVal(19, 300<<10)})
	b.Close()
	b = offsetOpen(t, dir, eng, 1<<20+100, 0)
	defer b.Close()
	if got := perkeyScan(t, b); !maps.Equal(got, map[string]uint64{"a": 300 << 10}) {
		t.Fatalf("ScanMeta = %v", got)
	}
	// The allocator was rebuilt: the free space is usable, the live record
	// is not overwritten. ("a" may sit anywhere, so the free space may be in
	// two pieces: c fits in the larger, d in neither.)
	perkeyPut(t, b, map[string][]byte{"c": perkeyVal(5, 300<<10)})
	perkeyCheck(t, b, map[string][]byte{"a": perkeyVal(19, 300<<10), "c": perkeyVal(5, 300<<10)})
	if err := b.BatchOffload([]string{"d"}, [][]byte{make([]byte, 500<<10)})[0]; !errors.Is(err, ErrFull) {
		t.Fatalf("overfull: %v", err)
	}
}

func TestOffsetCorruption(t *testing.T) {
	perkeyEngines(t, func(t *testing.T, eng fileio.Engine) {
		dir := t.TempDir()
		b := offsetOpen(t, dir, eng, 4<<20, 0)
		want := map[string][]byte{"good": perkeyVal(1, 9000), "bad": perkeyVal(2, 9000)}
		perkeyPut(t, b, want)
		offsetFlip(t, dir, int64(offsetPos(t, b, "bad"))+offsetHdrLen+3+5000)
		dst := make([]byte, 9000)
		errs := b.BatchLoad([]string{"bad", "good"}, [][]byte{dst, make([]byte, 9000)})
		if !errors.Is(errs[0], ErrCorrupt) || errs[1] != nil {
			t.Fatalf("errs = %v", errs)
		}
		for _, c := range dst {
			if c != 0 {
				t.Fatal("corrupt load wrote dst")
			}
		}
		perkeyCheck(t, b, map[string][]byte{"good": want["good"]})
		b.Close()
		// On reopen the corrupt record is skipped, the good one kept.
		b = offsetOpen(t, dir, eng, 4<<20, 0)
		defer b.Close()
		if got := perkeyScan(t, b); !maps.Equal(got, map[string]uint64{"good": 9000}) {
			t.Fatalf("ScanMeta = %v", got)
		}
		perkeyCheck(t, b, map[string][]byte{"good": want["good"]})
	})
}

// maxReadEngine records the largest single read through it.
type maxReadEngine struct {
	fileio.Engine
	max atomic.Int64
}

func (e *maxReadEngine) ReadAt(f *os.File, p []byte, off int64) error {
	for n := int64(len(p)); ; {
		m := e.max.Load()
		if n <= m || e.max.CompareAndSwap(m, n) {
			break
		}
	}
	return e.Engine.ReadAt(f, p, off)
}

// A record header whose value length was damaged to 48 MiB (the file is
// that large, sparse) is checked by reading the claimed value in turns of
// the scan buffer, not into one buffer of the claimed size: no recovery
// read is larger than 2 MiB. The record is skipped, the others served.
func TestOffsetDamagedLengthIsCheckedInTurns(t *testing.T) {
	perkeyEngines(t, func(t *testing.T, eng fileio.Engine) {
		dir := t.TempDir()
		b := offsetOpen(t, dir, eng, 64<<20, 0)
		want := map[string][]byte{"long": perkeyVal(1, 9000), "kept": perkeyVal(2, 9000)}
		perkeyPut(t, b, want)
		at := int64(offsetPos(t, b, "long"))
		b.Close()
		f, err := os.OpenFile(filepath.Join(dir, offsetFile), os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		var vl [4]byte
		binary.LittleEndian.PutUint32(vl[:], 48<<20)
		if _, err := f.WriteAt(vl[:], at+12); err != nil {
			t.Fatal(err)
		}
		f.Close()
		counting := &maxReadEngine{Engine: eng}
		b = offsetOpen(t, dir, counting, 64<<20, 0)
		defer b.Close()
		if m := counting.max.Load(); m > 2<<20 {
			t.Fatalf("recovery read %d MiB at once for a length a damaged header claims", m>>20)
		}
		if got := perkeyScan(t, b); !maps.Equal(got, map[string]uint64{"kept": 9000}) {
			t.Fatalf("ScanMeta = %v", got)
		}
		perkeyCheck(t, b, map[string][]byte{"kept": want["kept"]})
	})
}

func TestOffsetTornRecord(t *testing.T) {
	perkeyEngines(t, func(t *testing.T, eng fileio.Engine) {
		dir := t.TempDir()
		b := offsetOpen(t, dir, eng, 4<<20, 0)
		want := map[string][]byte{"first": perkeyVal(1, 20000), "last": perkeyVal(2, 50000)}
		perkeyPut(t, b, map[string][]byte{"first": want["first"]})
		perkeyPut(t, b, map[string][]byte{"last": want["last"]})
		cut := offsetPos(t, b, "last") + 10000
		b.Close()
		if err := os.Truncate(filepath.Join(dir, offsetFile), int64(cut)); err != nil {
			t.Fatal(err)
		}
		b = offsetOpen(t, dir, eng, 4<<20, 0)
		defer b.Close()
		if got := perkeyScan(t, b); !maps.Equal(got, map[string]uint64{"first": 20000}) {
			t.Fatalf("ScanMeta = %v", got)
		}
		perkeyCheck(t, b, map[string][]byte{"first": want["first"]})
		perkeyPut(t, b, map[string][]byte{"last": want["last"]})
		perkeyCheck(t, b, want)
	})
}

// A crash between writing a replacement and invalidating the old record
// leaves two intact records of one key: the newer (higher seq) wins.
func TestOffsetStaleDuplicate(t *testing.T) {
	dir := t.TempDir()
	eng, _ := fileio.New(false)
	defer eng.Close()
	b := offsetOpen(t, dir, eng, 4<<20, 0)
	perkeyPut(t, b, map[string][]byte{"k": perkeyVal(1, 100)})
	ob := b.(*offsetBackend)
	raw := make([]byte, 4096)
	if err := eng.ReadAt(ob.f, raw, int64(offsetPos(t, b, "k"))); err != nil {
		t.Fatal(err)
	}
	perkeyPut(t, b, map[string][]byte{"k": perkeyVal(2, 200)})
	newPos := offsetPos(t, b, "k")
	b.Close()
	// Re-create the old record at a free place with its old (lower) seq.
	f, _ := os.OpenFile(filepath.Join(dir, offsetFile), os.O_RDWR, 0)
	at := int64(newPos) + 8192
	if _, err := f.WriteAt(raw, at); err != nil {
		t.Fatal(err)
	}
	f.Close()
	b = offsetOpen(t, dir, eng, 4<<20, 0)
	defer b.Close()
	if got := perkeyScan(t, b); !maps.Equal(got, map[string]uint64{"k": 200}) {
		t.Fatalf("ScanMeta = %v", got)
	}
	perkeyCheck(t, b, map[string][]byte{"k": perkeyVal(2, 200)})
	b.Close()
	b = offsetOpen(t, dir, eng, 4<<20, 0) // the stale copy was invalidated
	defer b.Close()
	perkeyCheck(t, b, map[string][]byte{"k": perkeyVal(2, 200)})
}
