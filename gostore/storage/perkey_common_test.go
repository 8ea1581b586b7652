package storage

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"sync"
	"testing"

	"github.com/gostore/gostore/gostore/storage/fileio"
)

// Shared test suite for the file-per-key and offset-allocator backends.

type perkeyOpener func(t *testing.T, dir string, eng fileio.Engine, sizeLimit, keysLimit uint64) Backend

// perkeyEngines runs fn against both fileio engines.
func perkeyEngines(t *testing.T, fn func(t *testing.T, eng fileio.Engine)) {
	for _, uring := range []bool{false, true} {
		t.Run(fmt.Sprintf("uring=%v", uring), func(t *testing.T) {
			eng, err := fileio.New(uring)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("engine %s", eng.Name())
			t.Cleanup(func() { eng.Close() })
			fn(t, eng)
		})
	}
}

func perkeyVal(seed, n int) []byte {
	v := make([]byte, n)
	x := uint32(seed*2654435761 + n)
	for i := range v {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		v[i] = byte(x)
	}
	return v
}

func perkeyPut(t *testing.T, b Backend, kv map[string][]byte) {
	t.Helper()
	var keys []string
	var vals [][]byte
	for k, v := range kv {
		keys = append(keys, k)
		vals = append(vals, v)
	}
	for i, err := range b.BatchOffload(keys, vals) {
		if err != nil {
			t.Fatalf("offload %q: %v", keys[i], err)
		}
	}
}

// perkeyCheck loads every key of want and compares the bytes.
func perkeyCheck(t *testing.T, b Backend, want map[string][]byte) {
	t.Helper()
	var keys []string
	var dsts [][]byte
	for k, v := range want {
		keys = append(keys, k)
		dsts = append(dsts, make([]byte, len(v)))
	}
	for i, err := range b.BatchLoad(keys, dsts) {
		if err != nil {
			t.Fatalf("load %q: %v", keys[i], err)
		}
		if !bytes.Equal(dsts[i], want[keys[i]]) {
			t.Fatalf("load %q: wrong bytes", keys[i])
		}
		if s, ok := b.Size(keys[i]); !ok || s != uint64(len(want[keys[i]])) {
			t.Fatalf("Size(%q) = %d, %v", keys[i], s, ok)
		}
	}
}

func perkeyLoadErr(b Backend, key string, n int) error {
	return b.BatchLoad([]string{key}, [][]byte{make([]byte, n)})[0]
}

func perkeyScan(t *testing.T, b Backend) map[string]uint64 {
	t.Helper()
	got := map[string]uint64{}
	if err := b.ScanMeta(func(k string, s uint64) error { got[k] = s; return nil }); err != nil {
		t.Fatal(err)
	}
	return got
}

func perkeySizes(m map[string][]byte) map[string]uint64 {
	out := map[string]uint64{}
	for k, v := range m {
		out[k] = uint64(len(v))
	}
	return out
}

var perkeyMixedSizes = []int{1, 7, 100, 4095, 4096, 4097, 65536, 1<<20 + 3}

func perkeySuite(t *testing.T, open perkeyOpener) {
	t.Run("RoundTrip", func(t *testing.T) {
		perkeyEngines(t, func(t *testing.T, eng fileio.Engine) {
			b := open(t, t.TempDir(), eng, 64<<20, 0)
			defer b.Close()
			want := map[string][]byte{}
			for i, n := range perkeyMixedSizes {
				want[fmt.Sprintf("key-%d/%d", i, n)] = perkeyVal(i, n)
			}
			perkeyPut(t, b, want)
			perkeyCheck(t, b, want)
			var total uint64
			for _, v := range want {
				total += uint64(len(v))
			}
			if by, n := b.Usage(); by != total || n != len(want) {
				t.Fatalf("Usage = %d, %d; want %d, %d", by, n, total, len(want))
			}
		})
	})
	t.Run("MissingAndSize", func(t *testing.T) {
		perkeyEngines(t, func(t *testing.T, eng fileio.Engine) {
			b := open(t, t.TempDir(), eng, 16<<20, 0)
			defer b.Close()
			if err := perkeyLoadErr(b, "nope", 10); !errors.Is(err, ErrNotFound) {
				t.Fatalf("missing: %v", err)
			}
			if _, ok := b.Size("nope"); ok {
				t.Fatal("Size of a missing key")
			}
			perkeyPut(t, b, map[string][]byte{"k": perkeyVal(1, 5000)})
			for _, n := range []int{4999, 5001, 0} {
				if err := perkeyLoadErr(b, "k", n); !errors.Is(err, ErrSize) {
					t.Fatalf("dst %d: %v", n, err)
				}
			}
		})
	})
	t.Run("ReplaceRemove", func(t *testing.T) {
		perkeyEngines(t, func(t *testing.T, eng fileio.Engine) {
			b := open(t, t.TempDir(), eng, 16<<20, 0)
			defer b.Close()
			perkeyPut(t, b, map[string][]byte{"a": perkeyVal(1, 9000), "b": perkeyVal(2, 10)})
			want := map[string][]byte{"a": perkeyVal(3, 123), "b": perkeyVal(2, 10)}
			perkeyPut(t, b, map[string][]byte{"a": want["a"]})
			perkeyCheck(t, b, want)
			if by, n := b.Usage(); by != 133 || n != 2 {
				t.Fatalf("Usage after replace = %d, %d", by, n)
			}
			if err := b.Remove([]string{"a", "missing"}); err != nil {
				t.Fatal(err)
			}
			if err := perkeyLoadErr(b, "a", 123); !errors.Is(err, ErrNotFound) {
				t.Fatalf("removed: %v", err)
			}
			delete(want, "a")
			perkeyCheck(t, b, want)
			if by, n := b.Usage(); by != 10 || n != 1 {
				t.Fatalf("Usage after remove = %d, %d", by, n)
			}
		})
	})
	t.Run("Limits", func(t *testing.T) {
		perkeyEngines(t, func(t *testing.T, eng fileio.Engine) {
			b := open(t, t.TempDir(), eng, 64<<10, 3)
			defer b.Close()
			perkeyPut(t, b, map[string][]byte{"1": {1}, "2": {2}, "3": {3}})
			if err := b.BatchOffload([]string{"4"}, [][]byte{{4}})[0]; !errors.Is(err, ErrFull) {
				t.Fatalf("4th key: %v", err)
			}
			perkeyPut(t, b, map[string][]byte{"3": {33}}) // a replace is no new key
			if err := b.BatchOffload([]string{"3"}, [][]byte{make([]byte, 128<<10)})[0]; !errors.Is(err, ErrFull) {
				t.Fatalf("too big: %v", err)
			}
			perkeyCheck(t, b, map[string][]byte{"1": {1}, "2": {2}, "3": {33}})
			b.Remove([]string{"1"})
			perkeyPut(t, b, map[string][]byte{"4": {4}})
			if _, n := b.Usage(); n != 3 {
				t.Fatalf("keys = %d", n)
			}
		})
	})
	t.Run("Restart", func(t *testing.T) {
		perkeyEngines(t, func(t *testing.T, eng fileio.Engine) {
			dir := t.TempDir()
			b := open(t, dir, eng, 32<<20, 0)
			all := map[string][]byte{}
			for i, n := range perkeyMixedSizes {
				all[fmt.Sprintf("k%d", i)] = perkeyVal(i, n)
			}
			perkeyPut(t, b, all)
			perkeyPut(t, b, map[string][]byte{"k1": perkeyVal(99, 333), "k2": perkeyVal(98, 8192)})
			all["k1"], all["k2"] = perkeyVal(99, 333), perkeyVal(98, 8192)
			if err := b.Remove([]string{"k3", "k4"}); err != nil {
				t.Fatal(err)
			}
			delete(all, "k3")
			delete(all, "k4")
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			b = open(t, dir, eng, 32<<20, 0)
			defer b.Close()
			if got := perkeyScan(t, b); !maps.Equal(got, perkeySizes(all)) {
				t.Fatalf("ScanMeta = %v, want %v", got, perkeySizes(all))
			}
			perkeyCheck(t, b, all)
			if err := perkeyLoadErr(b, "k3", perkeyMixedSizes[3]); !errors.Is(err, ErrNotFound) {
				t.Fatalf("removed key resurrected: %v", err)
			}
			// Still writable after recovery, and a second restart agrees.
			perkeyPut(t, b, map[string][]byte{"new": perkeyVal(7, 5000)})
			all["new"] = perkeyVal(7, 5000)
			b.Close()
			b = open(t, dir, eng, 32<<20, 0)
			defer b.Close()
			if got := perkeyScan(t, b); !maps.Equal(got, perkeySizes(all)) {
				t.Fatalf("second ScanMeta = %v", got)
			}
			perkeyCheck(t, b, all)
		})
	})
	t.Run("Concurrent", func(t *testing.T) {
		perkeyEngines(t, func(t *testing.T, eng fileio.Engine) {
			b := open(t, t.TempDir(), eng, 64<<20, 0)
			defer b.Close()
			var wg sync.WaitGroup
			errc := make(chan error, 8)
			for g := 0; g < 8; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < 25; i++ {
						own := fmt.Sprintf("g%d-%d", g, i)
						shared := fmt.Sprintf("shared-%d", i%4)
						v := perkeyVal(g*100+i, 1+(i*977)%20000)
						sv := perkeyVal(1000+i%4, 3000) // same bytes from every writer
						errs := b.BatchOffload([]string{own, shared}, [][]byte{v, sv})
						if errs[0] != nil || errs[1] != nil {
							errc <- fmt.Errorf("offload: %v %v", errs[0], errs[1])
							return
						}
						d1, d2 := make([]byte, len(v)), make([]byte, 3000)
						errs = b.BatchLoad([]string{own, shared}, [][]byte{d1, d2})
						if errs[0] != nil || !bytes.Equal(d1, v) {
							errc <- fmt.Errorf("load %s: %v", own, errs[0])
							return
						}
						if errs[1] != nil || !bytes.Equal(d2, sv) {
							errc <- fmt.Errorf("load %s: %v", shared, errs[1])
							return
						}
						if i%3 == 0 {
							if err := b.Remove([]string{own}); err != nil {
								errc <- err
								return
							}
						}
					}
				}()
			}
			wg.Wait()
			close(errc)
			for err := range errc {
				t.Fatal(err)
			}
			if _, n := b.Usage(); n != 8*16+4 {
				t.Fatalf("keys = %d, want %d", n, 8*16+4)
			}
		})
	})
}
