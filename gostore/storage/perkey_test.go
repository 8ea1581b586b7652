package storage

import (
	"bytes"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"testing"

	"github.com/gostore/gostore/gostore/storage/fileio"
)

func perkeyOpen(t *testing.T, dir string, eng fileio.Engine, sizeLimit, keysLimit uint64) Backend {
	t.Helper()
	b, err := NewFilePerKey(Config{Path: dir, Engine: eng, TotalSizeLimit: sizeLimit, TotalKeysLimit: keysLimit})
	if err != nil {
		t.Fatal(err)
	}
	if b.Name() != "file_per_key_storage_backend" {
		t.Fatalf("Name = %q", b.Name())
	}
	return b
}

func TestPerKeySuite(t *testing.T) { perkeySuite(t, perkeyOpen) }

func TestPerKeyLayout(t *testing.T) {
	dir := t.TempDir()
	eng, _ := fileio.New(false)
	defer eng.Close()
	b := perkeyOpen(t, dir, eng, 1<<20, 0)
	defer b.Close()
	perkeyPut(t, b, map[string][]byte{"hello": []byte("world")})
	h := perkeyHash("hello")
	fi, err := os.Stat(filepath.Join(dir, h[:2], h[2:4], h))
	if err != nil {
		t.Fatal(err)
	}
	// Header and key, then the value on the next block, padded to a block.
	if fi.Size() != 2*fileio.Alignment {
		t.Fatalf("file size %d", fi.Size())
	}
	raw, _ := os.ReadFile(filepath.Join(dir, h[:2], h[2:4], h))
	if string(raw[perkeyHdrLen:perkeyHdrLen+5]) != "hello" || string(raw[fileio.Alignment:fileio.Alignment+5]) != "world" {
		t.Fatalf("layout: key %q value %q", raw[perkeyHdrLen:perkeyHdrLen+5], raw[fileio.Alignment:fileio.Alignment+5])
	}
}

func TestPerKeyCorruption(t *testing.T) {
	perkeyEngines(t, func(t *testing.T, eng fileio.Engine) {
		dir := t.TempDir()
		b := perkeyOpen(t, dir, eng, 16<<20, 0)
		defer b.Close()
		want := map[string][]byte{"good": perkeyVal(1, 5000), "bad": perkeyVal(2, 5000)}
		perkeyPut(t, b, want)
		h := perkeyHash("bad")
		p := filepath.Join(dir, h[:2], h[2:4], h)
		raw, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		raw[perkeyValueOff(len("bad"))+100] ^= 0x40
		if err := os.WriteFile(p, raw, 0o644); err != nil {
			t.Fatal(err)
		}
		dst := make([]byte, 5000)
		errs := b.BatchLoad([]string{"bad", "good"}, [][]byte{dst, make([]byte, 5000)})
		if !errors.Is(errs[0], ErrCorrupt) || errs[1] != nil {
			t.Fatalf("errs = %v", errs)
		}
		for _, c := range dst {
			if c != 0 {
				t.Fatal("corrupt load left bytes in dst")
			}
		}
		delete(want, "bad")
		perkeyCheck(t, b, want)
	})
}

// A key's file that holds another key's record (a hash collision, or a
// file replaced after the open) is a miss, and the other key's bytes,
// read into the destination, are cleared from it: never handed out.
func TestPerKeyFileOfAnotherKeyLeavesNoBytes(t *testing.T) {
	perkeyEngines(t, func(t *testing.T, eng fileio.Engine) {
		dir := t.TempDir()
		b := perkeyOpen(t, dir, eng, 16<<20, 0)
		defer b.Close()
		want := map[string][]byte{"mine": perkeyVal(1, 5000), "other": perkeyVal(2, 5000)}
		perkeyPut(t, b, want)
		path := func(key string) string {
			h := perkeyHash(key)
			return filepath.Join(dir, h[:2], h[2:4], h)
		}
		raw, err := os.ReadFile(path("other"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path("mine"), raw, 0o644); err != nil {
			t.Fatal(err)
		}
		dst := make([]byte, 5000)
		if err := b.BatchLoad([]string{"mine"}, [][]byte{dst})[0]; !errors.Is(err, ErrNotFound) {
			t.Fatalf("mine, from a file holding other: %v", err)
		}
		if !bytes.Equal(dst, make([]byte, 5000)) {
			t.Fatal("the other key's bytes were left in the destination")
		}
		perkeyCheck(t, b, map[string][]byte{"other": want["other"]})
	})
}

func TestPerKeyTornFiles(t *testing.T) {
	perkeyEngines(t, func(t *testing.T, eng fileio.Engine) {
		dir := t.TempDir()
		b := perkeyOpen(t, dir, eng, 16<<20, 0)
		want := map[string][]byte{"ok": perkeyVal(1, 7000), "trunc": perkeyVal(2, 7000),
			"short": perkeyVal(3, 10), "magic": perkeyVal(4, 10)}
		perkeyPut(t, b, want)
		b.Close()
		path := func(k string) string {
			h := perkeyHash(k)
			return filepath.Join(dir, h[:2], h[2:4], h)
		}
		if err := os.Truncate(path("trunc"), 5000); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(path("short"), 10); err != nil {
			t.Fatal(err)
		}
		raw, _ := os.ReadFile(path("magic"))
		raw[0] ^= 0xff
		os.WriteFile(path("magic"), raw, 0o644)
		tmp := path("ok") + perkeyTmpMark + "42"
		os.WriteFile(tmp, []byte("partial"), 0o644)

		b = perkeyOpen(t, dir, eng, 16<<20, 0)
		defer b.Close()
		if got := perkeyScan(t, b); !maps.Equal(got, map[string]uint64{"ok": 7000}) {
			t.Fatalf("ScanMeta = %v", got)
		}
		perkeyCheck(t, b, map[string][]byte{"ok": want["ok"]})
		if err := perkeyLoadErr(b, "trunc", 7000); !errors.Is(err, ErrNotFound) {
			t.Fatalf("torn file: %v", err)
		}
		if _, err := os.Stat(tmp); !os.IsNotExist(err) {
			t.Fatalf("temp file not deleted: %v", err)
		}
		// A torn file is replaced by a new write.
		perkeyPut(t, b, map[string][]byte{"trunc": perkeyVal(5, 100)})
		perkeyCheck(t, b, map[string][]byte{"trunc": perkeyVal(5, 100)})
	})
}
