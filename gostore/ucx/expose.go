// expose.go: memory exposed for peers' one-sided access, and the worker
// that serves it.

package ucx

/*
#include <stdlib.h>
#include "gs_ucx.h"
*/
import "C"

import (
	crand "crypto/rand"
	"log/slog"
	"runtime"
	"sync"
	"syscall"
	"unsafe"

	"github.com/gostore/gostore/gostore/wire"
)

// MemType says where exposed memory or a Part lives.
type MemType int

const (
	MemHost MemType = iota // host memory
	MemCUDA                // CUDA device memory (needs Info.CUDA)
)

func (m MemType) ucs() C.int {
	if m == MemCUDA {
		return C.UCS_MEMORY_TYPE_CUDA
	}
	return C.UCS_MEMORY_TYPE_HOST
}

// Exposure is a registered range and the worker that serves peers' RMA to
// it, progressed by its own goroutine (locked to an OS thread) that sleeps
// on the worker's event fd when idle.
type Exposure struct {
	c      *Context
	memh   C.ucp_mem_h
	canary unsafe.Pointer // C memory holding the desc's nonce; never freed
	cmemh  C.ucp_mem_h    // the canary's registration
	desc   []byte

	stopR, stopW int           // the pipe that wakes the goroutine to stop
	done         chan struct{} // closed once the goroutine destroyed the worker
	once         sync.Once
}

// Expose registers [base, base+size) and starts the worker serving it.
func (c *Context) Expose(base uintptr, size uint64, mt MemType) (*Exposure, error) {
	if base == 0 || size == 0 || uint64(base)+size < uint64(base) {
		return nil, wire.Errorf(wire.ErrInvalidParams, "ucx expose: bad range %#x+%d", base, size)
	}
	if mt != MemHost && mt != MemCUDA {
		return nil, wire.Errorf(wire.ErrInvalidParams, "ucx expose: unknown memory type %d", mt)
	}
	if mt == MemCUDA && !c.info.CUDA {
		return nil, wire.Errorf(wire.ErrInvalidParams, "ucx expose: this UCX has no CUDA support")
	}
	if !c.acquire() {
		return nil, wire.Errorf(wire.ErrTransferFail, "ucx expose: context closed")
	}
	x := &Exposure{c: c, done: make(chan struct{})}
	ok := false
	defer func() {
		if !ok {
			c.release()
		}
	}()
	if st := C.gs_ucx_mem_map(c.h, C.uintptr_t(base), C.size_t(size), mt.ucs(), &x.memh); st != C.UCS_OK {
		return nil, wire.Errorf(wire.ErrTransferFail, "ucx mem_map %#x+%d: %s", base, size, statusString(st))
	}
	var rbuf unsafe.Pointer
	var rlen C.size_t
	if st := C.gs_ucx_rkey_pack(c.h, x.memh, &rbuf, &rlen); st != C.UCS_OK {
		C.gs_ucx_mem_unmap(c.h, x.memh)
		return nil, wire.Errorf(wire.ErrTransferFail, "ucx rkey_pack: %s", statusString(st))
	}
	rkey := C.GoBytes(rbuf, C.int(rlen))
	C.free(rbuf)
	d := &desc{memType: mt, base: uint64(base), size: size, rkey: rkey}
	if _, err := crand.Read(d.nonce[:]); err != nil {
		C.gs_ucx_mem_unmap(c.h, x.memh)
		return nil, wire.Errorf(wire.ErrTransferFail, "ucx expose: nonce: %v", err)
	}
	// The canary outlives the exposure (a stale Desc may still read it);
	// nonceLen bytes per Expose are the price.
	x.canary = C.calloc(1, nonceLen)
	copy(unsafe.Slice((*byte)(x.canary), nonceLen), d.nonce[:])
	d.canary = uint64(uintptr(x.canary))
	if st := C.gs_ucx_mem_map(c.h, C.uintptr_t(d.canary), nonceLen, MemHost.ucs(), &x.cmemh); st != C.UCS_OK {
		C.gs_ucx_mem_unmap(c.h, x.memh)
		return nil, wire.Errorf(wire.ErrTransferFail, "ucx mem_map canary: %s", statusString(st))
	}
	if st := C.gs_ucx_rkey_pack(c.h, x.cmemh, &rbuf, &rlen); st != C.UCS_OK {
		x.unmap()
		return nil, wire.Errorf(wire.ErrTransferFail, "ucx rkey_pack canary: %s", statusString(st))
	}
	d.ckey = C.GoBytes(rbuf, C.int(rlen))
	C.free(rbuf)
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK); err != nil {
		x.unmap()
		return nil, wire.Errorf(wire.ErrTransferFail, "ucx expose: pipe: %v", err)
	}
	x.stopR, x.stopW = p[0], p[1]
	started := make(chan error, 1)
	go x.serve(&d.addr, started)
	if err := <-started; err != nil {
		<-x.done
		x.release()
		return nil, err
	}
	x.desc = d.encode()
	ok = true
	return x, nil
}

// serve owns the exposure's worker from creation to destruction, on one OS
// thread (the worker is UCS_THREAD_MODE_SINGLE). UCX emulates RMA in
// software on tcp and shared memory, so the target must progress; on
// verbs and cma the NIC or kernel moves the bytes and this just sleeps.
func (x *Exposure) serve(addr *[]byte, started chan<- error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer close(x.done)
	var w C.ucp_worker_h
	if st := C.gs_ucx_worker_create(x.c.h, C.UCS_THREAD_MODE_SINGLE, &w); st != C.UCS_OK {
		started <- wire.Errorf(wire.ErrTransferFail, "ucx worker_create: %s", statusString(st))
		return
	}
	defer C.gs_ucx_worker_destroy(w)
	var abuf unsafe.Pointer
	var alen C.size_t
	if st := C.gs_ucx_worker_address(w, &abuf, &alen); st != C.UCS_OK {
		started <- wire.Errorf(wire.ErrTransferFail, "ucx worker address: %s", statusString(st))
		return
	}
	*addr = C.GoBytes(abuf, C.int(alen))
	C.free(abuf)
	var efd C.int
	if st := C.gs_ucx_worker_efd(w, &efd); st != C.UCS_OK {
		started <- wire.Errorf(wire.ErrTransferFail, "ucx worker event fd: %s", statusString(st))
		return
	}
	started <- nil
	var st C.ucs_status_t
	if C.gs_ucx_serve(w, efd, C.int(x.stopR), -1, &st) == 1 {
		return
	}
	// Cannot sleep on the fd: poll it with a timeout instead.
	slog.Warn("ucx exposure: worker_arm failed; polling every 1 ms instead", "status", statusString(st))
	C.gs_ucx_serve(w, efd, C.int(x.stopR), 1, &st)
}

// Desc is what a peer needs to reach the exposure (version, worker
// address, packed rkey, base, size). It carries a remote key: hand it only
// to authenticated peers.
func (x *Exposure) Desc() []byte { return append([]byte(nil), x.desc...) }

// Close stops and destroys the worker, then unregisters the memory, so a
// peer holding the old Desc gets an error, never bytes of memory exposed
// later. Close the exposure before the memory is freed.
func (x *Exposure) Close() {
	x.once.Do(func() {
		// Zero the nonce first: from here on no new endpoint accepts the
		// Desc, whichever worker its address leads to.
		clear(unsafe.Slice((*byte)(x.canary), nonceLen))
		syscall.Write(x.stopW, []byte{1})
		<-x.done
		x.release()
		x.c.release()
	})
}

func (x *Exposure) unmap() {
	C.gs_ucx_mem_unmap(x.c.h, x.cmemh)
	C.gs_ucx_mem_unmap(x.c.h, x.memh)
}

func (x *Exposure) release() {
	x.unmap()
	syscall.Close(x.stopR)
	syscall.Close(x.stopW)
}
