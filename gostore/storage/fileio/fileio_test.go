package fileio

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/gostore/gostore/gostore/internal/testbase"
)

// engines returns both engines; the io_uring one must really be io_uring.
func engines(t testing.TB) []Engine {
	t.Helper()
	p, err := New(false)
	if err != nil {
		t.Fatal(err)
	}
	u, err := New(true)
	if err != nil {
		t.Fatal(err)
	}
	if p.Name() != "pread" || u.Name() != "io_uring" {
		t.Fatalf("engine names %q, %q; want pread, io_uring (io_uring must work on this kernel)", p.Name(), u.Name())
	}
	t.Cleanup(func() { p.Close(); u.Close() })
	return []Engine{p, u}
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	x := uint32(seed)*2654435761 + 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return b
}

func tempFile(t testing.TB, name string) *os.File {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(t.TempDir(), name), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func TestRoundTrip(t *testing.T) {
	cases := []struct {
		size int
		off  int64
	}{{1, 7}, {4096, 4093}, {1<<20 + 3, 12345}, {4096, 8192}}
	for _, e := range engines(t) {
		for _, c := range cases {
			t.Run(fmt.Sprintf("%s/%d@%d", e.Name(), c.size, c.off), func(t *testing.T) {
				f := tempFile(t, "rt")
				want := pattern(c.size, byte(c.size))
				if err := e.WriteAt(f, want, c.off); err != nil {
					t.Fatal(err)
				}
				got := make([]byte, c.size)
				if err := e.ReadAt(f, got, c.off); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want) {
					t.Fatal("read back differs from written bytes")
				}
				disk, err := os.ReadFile(f.Name())
				if err != nil {
					t.Fatal(err)
				}
				if int64(len(disk)) != c.off+int64(c.size) || !bytes.Equal(disk[c.off:], want) {
					t.Fatalf("on-disk file (len %d) does not hold the written bytes", len(disk))
				}
				if !bytes.Equal(disk[:c.off], make([]byte, c.off)) {
					t.Fatal("hole before offset is not zero")
				}
			})
		}
	}
}

// batchCase writes n regions of distinct sizes and patterns across two files
// and reads them all back with one ReadBatch.
func testBatch(t *testing.T, e Engine, n int) {
	files := []*os.File{tempFile(t, "a"), tempFile(t, "b")}
	reqs := make([]Request, n)
	wants := make([][]byte, n)
	offs := []int64{0, 0}
	for i := range reqs {
		f := i % 2
		size := 16<<10 + i*37
		wants[i] = pattern(size, byte(i))
		if _, err := files[f].WriteAt(wants[i], offs[f]); err != nil {
			t.Fatal(err)
		}
		reqs[i] = Request{File: files[f], Buf: make([]byte, size), Off: offs[f]}
		offs[f] += int64(size) + 3
	}
	errs := e.ReadBatch(reqs)
	if len(errs) != n {
		t.Fatalf("got %d errors for %d requests", len(errs), n)
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("req %d: %v", i, err)
		}
		if !bytes.Equal(reqs[i].Buf, wants[i]) {
			t.Fatalf("req %d: wrong bytes", i)
		}
	}
}

func TestReadBatch(t *testing.T) {
	for _, e := range engines(t) {
		for _, n := range []int{1, 32, 100} {
			t.Run(fmt.Sprintf("%s/%d", e.Name(), n), func(t *testing.T) { testBatch(t, e, n) })
		}
	}
}

func TestReadPastEOF(t *testing.T) {
	for _, e := range engines(t) {
		t.Run(e.Name(), func(t *testing.T) {
			f := tempFile(t, "eof")
			data := pattern(100, 1)
			if err := e.WriteAt(f, data, 0); err != nil {
				t.Fatal(err)
			}
			if err := e.ReadAt(f, make([]byte, 200), 0); !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("read straddling EOF: err %v, want ErrUnexpectedEOF", err)
			}
			if err := e.ReadAt(f, make([]byte, 10), 1000); !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("read beyond EOF: err %v, want ErrUnexpectedEOF", err)
			}
			good := make([]byte, 50)
			errs := e.ReadBatch([]Request{
				{File: f, Buf: good, Off: 50},
				{File: f, Buf: make([]byte, 51), Off: 50},
				{File: f, Buf: make([]byte, 1), Off: -1},
			})
			if errs[0] != nil || !bytes.Equal(good, data[50:]) {
				t.Fatalf("in-range batch read: %v", errs[0])
			}
			if !errors.Is(errs[1], io.ErrUnexpectedEOF) {
				t.Fatalf("batch read past EOF: %v", errs[1])
			}
			if errs[2] == nil {
				t.Fatal("negative offset accepted")
			}
		})
	}
}

func openDirect(t *testing.T, name string) *os.File {
	t.Helper()
	f, direct, err := OpenDirect(filepath.Join(t.TempDir(), name), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if !direct {
		t.Skip("file system does not support O_DIRECT")
	}
	if !isDirect(int(f.Fd())) {
		t.Fatal("OpenDirect reported O_DIRECT but the descriptor lacks it")
	}
	return f
}

func TestDirectAligned(t *testing.T) {
	for _, e := range engines(t) {
		t.Run(e.Name(), func(t *testing.T) {
			f := openDirect(t, "d")
			const n = 1 << 20
			w := AlignedBuffer(n, Alignment)
			defer FreeAligned(w)
			copy(w, pattern(n, 9))
			if err := e.WriteAt(f, w, 8192); err != nil {
				t.Fatal(err)
			}
			r := AlignedBuffer(n, Alignment)
			defer FreeAligned(r)
			if err := e.ReadAt(f, r, 8192); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(r, w) {
				t.Fatal("O_DIRECT read back differs")
			}
			// Batch of aligned direct reads of 4 KiB blocks.
			reqs := make([]Request, 40)
			for i := range reqs {
				reqs[i] = Request{File: f, Buf: AlignedBuffer(Alignment, 0), Off: 8192 + int64(i)*Alignment}
				defer FreeAligned(reqs[i].Buf)
			}
			for i, err := range e.ReadBatch(reqs) {
				if err != nil || !bytes.Equal(reqs[i].Buf, w[i*Alignment:(i+1)*Alignment]) {
					t.Fatalf("direct batch req %d: %v", i, err)
				}
			}
		})
	}
}

// unalignedBuf returns n bytes whose address is not a multiple of Alignment.
func unalignedBuf(n int) []byte {
	b := heapAligned(n + 1)
	return b[1 : n+1]
}

func TestDirectBounce(t *testing.T) {
	for _, e := range engines(t) {
		t.Run(e.Name(), func(t *testing.T) {
			f := openDirect(t, "b")
			// Existing content that the read-modify-write must preserve.
			base := pattern(3*Alignment, 3)
			if err := e.WriteAt(f, alignedCopy(base), 0); err != nil {
				t.Fatal(err)
			}
			// Unaligned buffer, offset and length, straddling EOF.
			w := unalignedBuf(10000)
			copy(w, pattern(len(w), 4))
			const off = 5000
			if uintptr(unsafe.Pointer(&w[0]))%Alignment == 0 {
				t.Fatal("test buffer unexpectedly aligned")
			}
			if err := e.WriteAt(f, w, off); err != nil {
				t.Fatalf("bounce write: %v", err)
			}
			want := append(append([]byte{}, base[:off]...), w...)
			disk, err := os.ReadFile(f.Name())
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(disk, want) {
				t.Fatalf("file after bounce write: len %d want %d, or bytes differ", len(disk), len(want))
			}
			// Small write inside one block keeps the size and neighbours.
			if err := e.WriteAt(f, []byte("xyz"), 10); err != nil {
				t.Fatal(err)
			}
			copy(want[10:], "xyz")
			r := unalignedBuf(len(want) - 3)
			if err := e.ReadAt(f, r, 3); err != nil {
				t.Fatalf("bounce read: %v", err)
			}
			if !bytes.Equal(r, want[3:]) {
				t.Fatal("bounce read differs")
			}
			errs := e.ReadBatch([]Request{
				{File: f, Buf: unalignedBuf(100), Off: 4090},
				{File: f, Buf: make([]byte, 2), Off: int64(len(want)) - 1},
			})
			if errs[0] != nil {
				t.Fatal(errs[0])
			}
			if !errors.Is(errs[1], io.ErrUnexpectedEOF) {
				t.Fatalf("bounce read past EOF: %v", errs[1])
			}
		})
	}
}

// alignedCopy is a test helper: an aligned heap copy of b.
func alignedCopy(b []byte) []byte {
	c := heapAligned(len(b))
	copy(c, b)
	return c
}

func TestDatasync(t *testing.T) {
	for _, e := range engines(t) {
		t.Run(e.Name(), func(t *testing.T) {
			f := tempFile(t, "s")
			if err := e.WriteAt(f, pattern(8192, 5), 0); err != nil {
				t.Fatal(err)
			}
			if err := e.Datasync(f); err != nil {
				t.Fatal(err)
			}
			ro, err := os.Open(f.Name())
			if err != nil {
				t.Fatal(err)
			}
			defer ro.Close()
			// fdatasync on a read-only descriptor of a regular file succeeds;
			// on a pipe it fails with EINVAL, which must surface.
			if err := e.Datasync(ro); err != nil {
				t.Fatal(err)
			}
			pr, pw, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer pr.Close()
			defer pw.Close()
			if err := e.Datasync(pw); err == nil {
				t.Fatal("fdatasync on a pipe reported success")
			}
		})
	}
}

func TestClosedEngine(t *testing.T) {
	for _, e := range engines(t) {
		t.Run(e.Name(), func(t *testing.T) {
			f := tempFile(t, "c")
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
			if err := e.Close(); err != nil {
				t.Fatal("second Close:", err)
			}
			if err := e.WriteAt(f, []byte("x"), 0); err == nil {
				t.Fatal("write on closed engine succeeded")
			}
			if errs := e.ReadBatch([]Request{{File: f, Buf: make([]byte, 1)}}); errs[0] == nil {
				t.Fatal("batch on closed engine succeeded")
			}
		})
	}
}

func TestConcurrentUse(t *testing.T) {
	for _, e := range engines(t) {
		t.Run(e.Name(), func(t *testing.T) {
			f := tempFile(t, "cc")
			var wg sync.WaitGroup
			errc := make(chan error, 8)
			for g := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					want := pattern(64<<10, byte(g))
					off := int64(g) * (64<<10 + 1)
					for range 20 {
						if err := e.WriteAt(f, want, off); err != nil {
							errc <- err
							return
						}
						got := make([]byte, len(want))
						if err := e.ReadAt(f, got, off); err != nil || !bytes.Equal(got, want) {
							errc <- fmt.Errorf("goroutine %d: %v / mismatch", g, err)
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errc)
			for err := range errc {
				t.Fatal(err)
			}
		})
	}
}

func TestUseURing(t *testing.T) {
	for v, want := range map[string]bool{
		"": true, "true": true, "1": true, " Yes ": true, "ON": true,
		"false": false, "0": false, "no": false, " Off\t": false,
		"nope": true, // unrecognised: the default, with a warning
	} {
		logs := captureLog(t)
		if got := UseURing(v); got != want {
			t.Errorf("UseURing(%q) = %v, want %v", v, got, want)
		}
		if warned := strings.Contains(logs.String(), "unrecognised"); warned != (v == "nope") {
			t.Errorf("UseURing(%q): warning logged = %v", v, warned)
		}
	}
}

// captureLog redirects the default slog logger to a buffer for the test.
func captureLog(t *testing.T) *testbase.LogBuffer {
	t.Helper()
	var buf testbase.LogBuffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	t.Cleanup(func() { slog.SetDefault(old) })
	return &buf
}

func TestProbeFallback(t *testing.T) {
	probeHook = func() error { return errors.New("simulated io_uring failure") }
	t.Cleanup(func() { probeHook = nil })
	e, err := New(true)
	if err != nil {
		t.Fatalf("fallback must not be an error: %v", err)
	}
	defer e.Close()
	if e.Name() != "pread" {
		t.Fatalf("engine %q after failed probe, want pread", e.Name())
	}
	f := tempFile(t, "p")
	if err := e.WriteAt(f, []byte("ok"), 0); err != nil {
		t.Fatal(err)
	}
}

func TestAlignedBuffer(t *testing.T) {
	for _, c := range []struct{ size, align int }{{1, 0}, {4096, 4096}, {1<<20 + 3, 512}, {100, 1 << 16}} {
		b := AlignedBuffer(c.size, c.align)
		align := c.align
		if align == 0 {
			align = Alignment
		}
		if len(b) != c.size || uintptr(unsafe.Pointer(&b[0]))%uintptr(align) != 0 {
			t.Fatalf("AlignedBuffer(%d,%d): len %d addr %p", c.size, c.align, len(b), &b[0])
		}
		b[0], b[len(b)-1] = 1, 2 // writable end to end
		if err := FreeAligned(b); err != nil {
			t.Fatal(err)
		}
	}
	defer func() {
		if recover() == nil {
			t.Fatal("AlignedBuffer accepted a non-power-of-two alignment")
		}
	}()
	AlignedBuffer(10, 3000)
}

func TestOpenDirectFallback(t *testing.T) {
	// /dev/shm is tmpfs; whatever it answers, the result must be usable and the
	// flag must match the descriptor.
	dir := t.TempDir()
	for _, d := range []string{dir, "/dev/shm"} {
		p := filepath.Join(d, fmt.Sprintf("fileio-od-%d", os.Getpid()))
		f, direct, err := OpenDirect(p, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			if d == "/dev/shm" {
				continue
			}
			t.Fatal(err)
		}
		if direct != isDirect(int(f.Fd())) {
			t.Fatalf("%s: reported direct=%v, descriptor disagrees", d, direct)
		}
		f.Close()
		os.Remove(p)
	}
}

// A submission slot reused after a datasync must not carry the datasync
// flag into the next read or write (giouring does not clear it).
func TestReadsAfterDatasync(t *testing.T) {
	for _, e := range engines(t) {
		f := tempFile(t, "f-"+e.Name())
		data := make([]byte, 64*1024)
		for i := range data {
			data[i] = byte(i * 7)
		}
		for round := range 3 {
			if err := e.WriteAt(f, data, 0); err != nil {
				t.Fatalf("round %d write: %v", round, err)
			}
			if err := e.Datasync(f); err != nil {
				t.Fatal(err)
			}
			for i := range 70 { // more than a ring's worth of slots
				got := make([]byte, 512)
				if err := e.ReadAt(f, got, int64(i*512)); err != nil {
					t.Fatalf("round %d read %d after datasync: %v", round, i, err)
				}
				if !bytes.Equal(got, data[i*512:(i+1)*512]) {
					t.Fatalf("%s round %d read %d: bytes differ", e.Name(), round, i)
				}
			}
		}
	}
}
