package ucx

import (
	"bytes"
	"context"
	"fmt"
	"math/rand"
	"sync"
	"testing"
	"time"
)

// The transports of the matrix: tcp on loopback, shared memory (posix,
// sysv: UCX 1.13 can detect no peer failure on them, so endpoints connect
// without), and cma (the kernel's process_vm_readv/writev; it has no active
// messages, so UCX needs another transport beside it to connect).
var transports = []string{"tcp", "posix", "sysv", "posix,self", "cma,posix", "cma,tcp"}

// fill writes the pattern of (seed, offset) into b, so any misplaced byte
// shows.
func fill(b []byte, seed int64) {
	rand.New(rand.NewSource(seed)).Read(b)
}

// scatter splits b into n parts of uneven lengths.
func scatter(b []byte, n int) []Part {
	parts := make([]Part, 0, n)
	for i := 0; i < n && len(b) > 0; i++ {
		k := len(b) / (n - i)
		if i%2 == 0 && i < n-1 {
			k = k / 2
		}
		if k == 0 || i == n-1 {
			k = len(b)
		}
		parts = append(parts, Part{Host: b[:k]})
		b = b[k:]
	}
	return parts
}

// Concurrent batches of scattered puts, then gets, of 4 KiB to 16 MiB,
// from 8 goroutines: every byte lands where it was sent and comes back.
func TestPutGetMatrix(t *testing.T) {
	for _, tls := range transports {
		t.Run(tls, func(t *testing.T) {
			const size = 64 << 20
			r := newRig(t, tls, size)
			d := r.x.Desc()

			// Small ops: 8 goroutines, each its 8 MiB region, batches of 32.
			const region = size / 8
			var wg sync.WaitGroup
			errc := make(chan error, 8)
			for g := 0; g < 8; g++ {
				wg.Add(1)
				go func(g int) {
					defer wg.Done()
					errc <- batches(r.w, d, uint64(g*region), int64(g))
				}(g)
			}
			wg.Wait()
			close(errc)
			for err := range errc {
				if err != nil {
					t.Fatal(err)
				}
			}

			// Large ops, 1 to 16 MiB, scattered, two goroutines at once.
			sizes := []int{1 << 20, 4 << 20, 16 << 20}
			for i, n := range sizes {
				wg.Add(1)
				go func(i, n int) {
					defer wg.Done()
					off := uint64(i * (16 << 20))
					src := make([]byte, n)
					fill(src, int64(100+i))
					if err := one(r.w, Op{Desc: d, Offset: off, Parts: scatter(src, 3), Write: true}); err != nil {
						t.Errorf("put %d bytes: %v", n, err)
						return
					}
					if !bytes.Equal(r.mem[off:off+uint64(n)], src) {
						t.Errorf("put %d bytes: exposed memory differs", n)
					}
					dst := make([]byte, n)
					if err := one(r.w, Op{Desc: d, Offset: off, Parts: scatter(dst, 4)}); err != nil {
						t.Errorf("get %d bytes: %v", n, err)
						return
					}
					if !bytes.Equal(dst, src) {
						t.Errorf("get %d bytes: bytes differ", n)
					}
				}(i, n)
			}
			wg.Wait()
		})
	}
}

// batches writes 4 batches of 32 scattered ops (4 to 64 KiB) into the
// region at base, checks the exposed memory, and reads them back.
func batches(w *Worker, d []byte, base uint64, seed int64) error {
	rnd := rand.New(rand.NewSource(seed))
	off := base
	for b := 0; b < 4; b++ {
		var puts, gets []Op
		var srcs, dsts [][]byte
		var offs []uint64
		for i := 0; i < 32; i++ {
			n := 4096 << rnd.Intn(5) // 4 KiB .. 64 KiB
			src := make([]byte, n)
			rnd.Read(src)
			dst := make([]byte, n)
			puts = append(puts, Op{Desc: d, Offset: off, Parts: scatter(src, 1+i%3), Write: true})
			gets = append(gets, Op{Desc: d, Offset: off, Parts: scatter(dst, 1+(i+1)%3)})
			srcs, dsts, offs = append(srcs, src), append(dsts, dst), append(offs, off)
			off += uint64(n)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		for i, err := range w.Do(ctx, puts) {
			if err != nil {
				cancel()
				return fmt.Errorf("put %d: %w", i, err)
			}
		}
		for i, err := range w.Do(ctx, gets) {
			if err != nil {
				cancel()
				return fmt.Errorf("get %d: %w", i, err)
			}
		}
		cancel()
		for i := range srcs {
			if !bytes.Equal(dsts[i], srcs[i]) {
				return fmt.Errorf("batch %d op %d at %d: bytes read differ from bytes written", b, i, offs[i])
			}
		}
	}
	return nil
}

func one(w *Worker, op Op) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return w.Do(ctx, []Op{op})[0]
}
