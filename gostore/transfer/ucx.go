// ucx.go defines the UCX route: one-sided puts and gets straight into a
// peer's segment that its owner exposed with UCX (gostore/ucx), through
// the Worker the caller gave the Engine.

package transfer

import (
	"context"

	"github.com/gostore/gostore/gostore/ucx"
)

// ucxTransport hands ops to the Engine's UCX worker, which posts them all
// (many in flight) and returns when each is done: a write's bytes in the
// peer's memory. Device parts reach it as GPU pointers when the worker's
// UCX has CUDA (ucxDirect), else staged by Do like TCP's.
type ucxTransport struct{ e *Engine }

func (t ucxTransport) Start(ctx context.Context, ops []Op, idx []int, errs []error) func() []int {
	e := t.e
	uops := make([]ucx.Op, len(idx))
	e.mu.Lock()
	for k, i := range idx {
		op := &ops[i]
		e.segUCX[op.Peer.SegID] = op.Peer.UCX
		uops[k] = ucx.Op{Desc: op.Peer.UCX, Offset: op.Offset, Write: op.Write, Parts: ucxParts(op)}
	}
	e.mu.Unlock()
	res := e.ucx.Do(ctx, uops)
	for k, i := range idx {
		errs[i] = res[k]
	}
	return noFallback
}

// ucxParts is op's memory as UCX parts: host buffers, and device parts
// (left in op by ucxDirect) as GPU pointers in their placeholders.
func ucxParts(op *Op) []ucx.Part {
	parts := make([]ucx.Part, len(op.Bufs))
	for j, b := range op.Bufs {
		parts[j].Host = b
	}
	for _, d := range op.Device {
		parts[d.Index] = ucx.Part{Dev: uintptr(d.Ptr), Len: d.Size}
	}
	return parts
}

// ucxDirect reports whether op's device parts go to UCX as they are: GPU
// memory, with a UCX that has CUDA. A part in another process's memory,
// or any device part without CUDA, is staged.
func (e *Engine) ucxDirect(op *Op) bool {
	if !e.ucxCUDA {
		return false
	}
	for _, d := range op.Device {
		if d.Pid != 0 {
			return false
		}
	}
	return true
}
