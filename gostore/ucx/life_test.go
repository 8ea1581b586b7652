package ucx

import (
	"bytes"
	"context"
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
// writing into the caller's memory (its endpoint was force-closed), and the
// next Do to the same peer connects afresh and works.
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
