package ucx

import (
	"bytes"
	"context"
	"math/rand"
	"testing"
	"time"
	"unsafe"
)

// needUCX skips, saying why, where libucp cannot be loaded.
func needUCX(t testing.TB) {
	t.Helper()
	if info := Probe(); !info.Available {
		t.Skipf("UCX unavailable: %s", info.Reason)
	}
}

// rig is a context with one exposure over a Go buffer and one worker.
type rig struct {
	ctx *Context
	mem []byte
	x   *Exposure
	w   *Worker
}

func newRig(t testing.TB, tls string, size int) *rig {
	t.Helper()
	needUCX(t)
	c, err := NewContext(ContextOptions{Transports: tls})
	if err != nil {
		t.Fatalf("NewContext(%q): %v", tls, err)
	}
	r := &rig{ctx: c, mem: make([]byte, size)}
	r.x, err = c.Expose(uintptrOf(r.mem), uint64(size), MemHost)
	if err != nil {
		c.Close()
		t.Fatalf("Expose: %v", err)
	}
	r.w, err = c.NewWorker()
	if err != nil {
		r.x.Close()
		c.Close()
		t.Fatalf("NewWorker: %v", err)
	}
	t.Cleanup(r.close)
	return r
}

// newInitiator is a context with only a worker: the side that reaches
// another process's exposure. Both close at the test's end.
func newInitiator(t testing.TB, tls string) *Worker {
	t.Helper()
	c, err := NewContext(ContextOptions{Transports: tls})
	if err != nil {
		t.Fatalf("NewContext(%q): %v", tls, err)
	}
	w, err := c.NewWorker()
	if err != nil {
		c.Close()
		t.Fatalf("NewWorker: %v", err)
	}
	t.Cleanup(func() {
		w.Close()
		c.Close()
	})
	return w
}

func (r *rig) close() {
	r.w.Close()
	r.x.Close()
	r.ctx.Close()
}

func do(t testing.TB, w *Worker, ops ...Op) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i, err := range w.Do(ctx, ops) {
		if err != nil {
			t.Fatalf("op %d: %v", i, err)
		}
	}
}

// A put lands in the exposed memory and a get brings it back, over tcp.
func TestPutGetOverTCP(t *testing.T) {
	r := newRig(t, "tcp", 1<<20)
	src := make([]byte, 64<<10)
	rand.New(rand.NewSource(1)).Read(src)
	do(t, r.w, Op{Desc: r.x.Desc(), Offset: 4096, Parts: []Part{{Host: src}}, Write: true})
	if !bytes.Equal(r.mem[4096:4096+len(src)], src) {
		t.Fatal("put: exposed memory does not hold the bytes written")
	}
	dst := make([]byte, len(src))
	do(t, r.w, Op{Desc: r.x.Desc(), Offset: 4096, Parts: []Part{{Host: dst}}})
	if !bytes.Equal(dst, src) {
		t.Fatal("get: bytes read differ from the exposed memory")
	}
}

func uintptrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(&b[0])) }
