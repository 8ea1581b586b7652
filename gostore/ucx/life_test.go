package ucx

import (
	"bytes"
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/gostore/gostore/gostore/wire"
)

// Memory that is not Go's (an mmap, as a segment or a buffer from C or
// Python is) can be exposed and used as parts: pinning it is a no-op.
func TestForeignMemory(t *testing.T) {
	needUCX(t)
	mmap := func(n int) []byte {
		b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { syscall.Munmap(b) })
		return b
	}
	seg, buf := mmap(4<<20), mmap(1<<20)
	c, err := NewContext(ContextOptions{Transports: "tcp"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	x, err := c.Expose(uintptrOf(seg), uint64(len(seg)), MemHost)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	w, err := c.NewWorker()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	fill(buf, 5)
	if err := one(w, Op{Desc: x.Desc(), Offset: 3 << 20, Parts: scatter(buf, 2), Write: true}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(seg[3<<20:], buf) {
		t.Fatal("put from mmap'd memory: bytes differ")
	}
	clear(buf)
	if err := one(w, Op{Desc: x.Desc(), Offset: 3 << 20, Parts: []Part{{Host: buf}}}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(seg[3<<20:], buf) {
		t.Fatal("get into mmap'd memory: bytes differ")
	}
}

// A Do whose ctx ends mid-transfer returns TRANSFER_FAIL with nothing left
// writing into the caller's memory (its requests ended, or were cancelled
// by a force close of their endpoint), and the next Do to the same peer
// works.
func TestCancelledDo(t *testing.T) {
	r := newRig(t, "tcp", 64<<20)
	fill(r.mem, 11)
	dsts := make([][]byte, 4)
	ops := make([]Op, 4)
	for i := range ops {
		dsts[i] = make([]byte, 16<<20)
		ops[i] = Op{Desc: r.x.Desc(), Offset: uint64(i) * (16 << 20), Parts: []Part{{Host: dsts[i]}}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	start := time.Now()
	errs := r.w.Do(ctx, ops)
	t.Logf("cancelled Do returned after %v", time.Since(start))
	failed := 0
	for _, err := range errs {
		if err != nil {
			failed++
			if wire.CodeOf(err) != wire.ErrTransferFail {
				t.Fatalf("cancelled op: %v", err)
			}
		}
	}
	if failed == 0 {
		t.Skip("64 MiB moved within 1 ms: nothing to cancel")
	}
	t.Logf("%d of 4 ops cancelled: %v", failed, errs)
	marked := bytes.Repeat([]byte{0x5A}, 16<<20)
	for _, d := range dsts {
		copy(d, marked)
	}
	// Progress the worker a while with another op: a request still
	// pointing at dsts would write them now.
	small := make([]byte, 4096)
	if err := one(r.w, Op{Desc: r.x.Desc(), Parts: []Part{{Host: small}}}); err != nil {
		t.Fatalf("after a cancelled Do: %v", err)
	}
	if !bytes.Equal(small, r.mem[:4096]) {
		t.Fatal("after a cancelled Do: wrong bytes")
	}
	for i, d := range dsts {
		if !bytes.Equal(d, marked) {
			t.Fatalf("buffer %d was written after Do returned", i)
		}
	}
}

// A context with a live worker or exposure refuses to close (logged)
// rather than pull UCX from under them; closed in order, all goes.
func TestContextCloseOrder(t *testing.T) {
	r := newRig(t, "tcp", 1<<20)
	r.ctx.Close() // refused: both children live
	src := []byte("still works")
	if err := one(r.w, Op{Desc: r.x.Desc(), Parts: []Part{{Host: src}}, Write: true}); err != nil {
		t.Fatalf("after a refused Context.Close: %v", err)
	}
	if !bytes.Equal(r.mem[:len(src)], src) {
		t.Fatal("after a refused Context.Close: bytes differ")
	}
}

// Forget racing with Do calls from several goroutines: every op either
// moves the right bytes or fails with TRANSFER_FAIL (its endpoint was
// dropped under it), nothing crashes or races, and Do works afterwards.
func TestForgetDuringDo(t *testing.T) {
	if !inChild(t) {
		return
	}
	r := newRig(t, "tcp", 8<<20)
	fill(r.mem, 17)
	d := r.x.Desc()
	stop := make(chan struct{})
	done := make(chan error, 8)
	for g := 0; g < 8; g++ {
		go func(g int) {
			buf := make([]byte, 1<<20)
			off := uint64(g) << 20
			for {
				select {
				case <-stop:
					done <- nil
					return
				default:
				}
				err := one(r.w, Op{Desc: d, Offset: off, Parts: scatter(buf, 2)})
				if err != nil && wire.CodeOf(err) != wire.ErrTransferFail {
					done <- err
					return
				}
				if err == nil && !bytes.Equal(buf, r.mem[off:off+1<<20]) {
					done <- fmt.Errorf("goroutine %d: wrong bytes", g)
					return
				}
			}
		}(g)
	}
	for i := 0; i < 50; i++ {
		r.w.Forget(d)
		time.Sleep(2 * time.Millisecond)
	}
	close(stop)
	for g := 0; g < 8; g++ {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	buf := make([]byte, 4096)
	if err := one(r.w, Op{Desc: d, Parts: []Part{{Host: buf}}}); err != nil || !bytes.Equal(buf, r.mem[:4096]) {
		t.Fatalf("after the Forgets: %v", err)
	}
}

// Worker.Close while Do calls are in flight: they end (with their bytes or
// TRANSFER_FAIL), Close returns, and later Do calls are refused.
func TestCloseDuringDo(t *testing.T) {
	if !inChild(t) {
		return
	}
	r := newRig(t, "tcp", 64<<20)
	fill(r.mem, 19)
	const n = 4
	res := make(chan error, n)
	started := make(chan struct{}, n)
	for g := 0; g < n; g++ {
		go func(g int) {
			buf := make([]byte, 16<<20)
			off := uint64(g) * (16 << 20)
			started <- struct{}{}
			err := one(r.w, Op{Desc: r.x.Desc(), Offset: off, Parts: []Part{{Host: buf}}})
			if err == nil && !bytes.Equal(buf, r.mem[off:off+16<<20]) {
				err = fmt.Errorf("goroutine %d: wrong bytes", g)
			} else if err != nil && wire.CodeOf(err) != wire.ErrTransferFail {
				err = fmt.Errorf("goroutine %d: %v", g, err)
			} else {
				err = nil
			}
			res <- err
		}(g)
	}
	for g := 0; g < n; g++ {
		<-started
	}
	closed := make(chan struct{})
	go func() { r.w.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not return with Do calls in flight")
	}
	for g := 0; g < n; g++ {
		if err := <-res; err != nil {
			t.Fatal(err)
		}
	}
	if err := one(r.w, Op{Desc: r.x.Desc(), Parts: []Part{{Host: make([]byte, 8)}}}); wire.CodeOf(err) != wire.ErrTransferFail {
		t.Fatalf("Do after Close: %v", err)
	}
}
