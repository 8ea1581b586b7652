// ucx.go defines the UCX route: one-sided puts and gets straight into a
// peer's segment that its owner exposed with UCX (gostore/ucx), through
// the Worker the caller gave the Engine.

package transfer

import (
	"context"
	"time"

	"github.com/gostore/gostore/gostore/grant"
	"github.com/gostore/gostore/gostore/ucx"
	"github.com/gostore/gostore/gostore/wire"
)

// ucxTransport hands ops to the Engine's UCX worker, which posts them all
// (many in flight) and returns when each is done: a write's bytes in the
// peer's memory. Device parts reach it as GPU pointers when the worker's
// UCX has CUDA (ucxDirect), else staged by Do like TCP's.
type ucxTransport struct{ e *Engine }

func (t ucxTransport) Start(ctx context.Context, ops []Op, idx []int, errs []error) func() []int {
	e := t.e
	uops := make([]ucx.Op, 0, len(idx))
	posted := make([]int, 0, len(idx))
	now := time.Now().UnixNano()
	e.mu.Lock()
	for _, i := range idx {
		op := &ops[i]
		if err := ucxAllowed(op, now); err != nil {
			errs[i] = err
			continue
		}
		uops = append(uops, e.ucxOp(op))
		posted = append(posted, i)
	}
	e.mu.Unlock()
	if len(uops) == 0 {
		return noFallback
	}
	res := e.ucx.Do(ctx, uops)
	for k, i := range posted {
		errs[i] = res[k]
	}
	return noFallback
}

// ucxOp is op as the worker takes it; it records op's desc under its
// segment for Forget. e.mu held.
func (e *Engine) ucxOp(op *Op) ucx.Op {
	e.segUCX[op.Peer.SegID] = op.Peer.UCX
	return ucx.Op{Desc: op.Peer.UCX, Offset: op.Offset, Write: op.Write, Parts: ucxParts(op)}
}

// beginUCX is Begin over UCX: op posted, its wait left to Begun.Wait. A
// get over tcp or shared memory is a round trip through the owner's
// worker; posted first, it is answered while the caller asks the master
// (client/spots.go). nil when op carries more than ucxBeginBytes or its
// grant does not let it go.
func (e *Engine) beginUCX(ctx context.Context, op *Op, total uint64) *Begun {
	if total > ucxBeginBytes || ucxAllowed(op, time.Now().UnixNano()) != nil {
		return nil
	}
	e.mu.Lock()
	uop := e.ucxOp(op)
	e.mu.Unlock()
	return &Begun{ucx: e.ucx.Begin(ctx, []ucx.Op{uop})}
}

// ucxBeginBytes bounds an op Begin posts over UCX: past it the transfer,
// not the round trip, is most of a get's time (1 MiB: about 0.5 ms at
// 2 GB/s, against 0.1 ms for the master's answer), and a read from a spot
// that the master's answer turns down would waste that much bandwidth.
const ucxBeginBytes = 1 << 20

// ucxAllowed refuses, before it is posted, an op whose grant does not let
// it go: on TCP the owner's server verifies every request's grant, but no
// thread of the owner sees a one-sided op. So the op must carry a grant,
// for its segment, range and direction, not expired: the bounded writes
// of the TCP route hold for an initiator that keeps to this (whether the
// grant is authentic only the owner's key could tell; the desc is the
// capability, see doc.go).
func ucxAllowed(op *Op, now int64) error {
	f, err := grant.Decode(op.Grant)
	if err == nil {
		total, _ := opLen(op)
		err = grant.Allows(f, grant.Request{SegID: op.Peer.SegID, Offset: op.Offset, N: total, Write: op.Write}, now)
	}
	if err != nil {
		return wire.Errorf(wire.CodeOf(err), "segment %d over UCX, [%d,+) %s: %v", op.Peer.SegID, op.Offset, dirName(op.Write), err)
	}
	return nil
}

func dirName(write bool) string {
	if write {
		return "write"
	}
	return "read"
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
