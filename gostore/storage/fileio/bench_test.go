package fileio

import (
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkRead32x1MiB reads 32 distinct 1 MiB extents with one ReadBatch,
// from the page cache (buffered) and with O_DIRECT into aligned buffers.
func BenchmarkRead32x1MiB(b *testing.B) {
	const n, size = 32, 1 << 20
	path := filepath.Join(b.TempDir(), "bench")
	if err := os.WriteFile(path, pattern(n*size, 1), 0o644); err != nil {
		b.Fatal(err)
	}
	for _, mode := range []string{"buffered", "direct"} {
		var f *os.File
		var err error
		if mode == "direct" {
			var direct bool
			f, direct, err = OpenDirect(path, os.O_RDONLY, 0)
			if err == nil && !direct {
				f.Close()
				continue
			}
		} else {
			f, err = os.Open(path)
		}
		if err != nil {
			b.Fatal(err)
		}
		bufs := make([][]byte, n)
		for i := range bufs {
			bufs[i] = AlignedBuffer(size, Alignment)
		}
		for _, e := range engines(b) {
			b.Run(mode+"/"+e.Name(), func(b *testing.B) {
				reqs := make([]Request, n)
				for i := range reqs {
					reqs[i] = Request{File: f, Buf: bufs[i], Off: int64(i) * size}
				}
				b.SetBytes(n * size)
				for b.Loop() {
					for i, err := range e.ReadBatch(reqs) {
						if err != nil {
							b.Fatal(i, err)
						}
					}
				}
			})
		}
		for _, buf := range bufs {
			FreeAligned(buf)
		}
		f.Close()
	}
}

// BenchmarkRead32x1MiBRegistered repeats the O_DIRECT batch on io_uring with
// the destination buffers inside a RegisterFixed region ("fixed") and outside
// it ("plain"), and reports the fixed share so a run shows which path it took.
func BenchmarkRead32x1MiBRegistered(b *testing.B) {
	const n, size = 32, 1 << 20
	path := filepath.Join(b.TempDir(), "bench")
	if err := os.WriteFile(path, pattern(n*size, 1), 0o644); err != nil {
		b.Fatal(err)
	}
	f, direct, err := OpenDirect(path, os.O_RDONLY, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if !direct {
		b.Skip("no O_DIRECT here")
	}
	for _, mode := range []string{"fixed", "plain"} {
		b.Run(mode, func(b *testing.B) {
			region := AlignedBuffer(n*size, 0)
			defer FreeAligned(region)
			e, err := New(true)
			if err != nil || e.Name() != "io_uring" {
				b.Fatal("io_uring unavailable", err)
			}
			defer e.Close() // before FreeAligned: the region stays mapped until Close returns
			if mode == "fixed" {
				if err := e.RegisterFixed(region); err != nil {
					b.Fatal(err)
				}
			}
			reqs := make([]Request, n)
			for i := range reqs {
				reqs[i] = Request{File: f, Buf: region[i*size : (i+1)*size], Off: int64(i) * size}
			}
			b.SetBytes(n * size)
			for b.Loop() {
				for i, err := range e.ReadBatch(reqs) {
					if err != nil {
						b.Fatal(i, err)
					}
				}
			}
			fixed, plain := e.Counters()
			b.ReportMetric(float64(fixed)/float64(fixed+plain), "fixed-share")
			if mode == "fixed" && fixed == 0 {
				b.Fatal("no read used READ_FIXED")
			}
		})
	}
}

// BenchmarkReadAtParallel issues 64 KiB reads from many goroutines on one
// Engine; with a ring per concurrent call the io_uring engine scales with them.
func BenchmarkReadAtParallel(b *testing.B) {
	const size, span = 64 << 10, 64 << 20
	path := filepath.Join(b.TempDir(), "bench")
	if err := os.WriteFile(path, pattern(span, 2), 0o644); err != nil {
		b.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	for _, e := range engines(b) {
		b.Run(e.Name(), func(b *testing.B) {
			b.SetBytes(size)
			b.RunParallel(func(pb *testing.PB) {
				buf := make([]byte, size)
				for i := 0; pb.Next(); i++ {
					if err := e.ReadAt(f, buf, int64(i*size%span)); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
