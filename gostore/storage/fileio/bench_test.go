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
