// route.go defines the routes an op can take and the Transport behind
// each: the own segment, same-host shared memory and CUDA IPC copy in the
// caller's goroutine; TCP pipelines requests to the peer's Server; UCX
// (ucx.go) puts and gets straight into the peer's memory.

package transfer

import (
	"context"
	"sort"
	"sync"

	"github.com/gostore/gostore/gostore/internal/fanout"
	"github.com/gostore/gostore/gostore/wire"
)

// Route is how the Engine reaches a segment.
type Route uint8

const (
	// RouteTCP: requests to the peer's transfer server (another host, or
	// a segment this process cannot map).
	RouteTCP Route = iota
	// RouteOwn: the segment this process contributes (Engine.SetOwn).
	RouteOwn
	// RouteShm: a same-host peer's host segment, mapped here.
	RouteShm
	// RouteIPC: a same-host peer's GPU segment, opened from its IPC handle.
	RouteIPC
	// RouteUCX: one-sided puts and gets into a peer's segment its owner
	// exposed with UCX (Peer.UCX), over the Engine's Options.UCX worker.
	RouteUCX
	numRoutes
)

// Routes lists every route, in the order of the constants.
func Routes() []Route {
	rs := make([]Route, numRoutes)
	for i := range rs {
		rs[i] = Route(i)
	}
	return rs
}

func (r Route) String() string {
	switch r {
	case RouteOwn:
		return "own"
	case RouteShm:
		return "shm"
	case RouteIPC:
		return "ipc"
	case RouteTCP:
		return "tcp"
	case RouteUCX:
		return "ucx"
	}
	return "unknown"
}

// Cost orders routes from cheapest: the own segment, then a mapping, then
// UCX (one-sided, no server thread on its path where the NIC does RMA),
// then our TCP.
func (r Route) Cost() int {
	switch r {
	case RouteOwn:
		return 0
	case RouteShm, RouteIPC:
		return 1
	case RouteUCX:
		return 2
	}
	return 3
}

// A Transport moves the bytes of the ops the Engine routes to it.
type Transport interface {
	// Start begins ops[i] for every i in idx and returns a function that
	// waits for them, having set errs[i] for each (nil on success), and
	// returns the ops the transport could not serve after all, which the
	// Engine then sends over TCP. Start may do the work itself (the local
	// routes) or only send it (TCP). It touches no other entries of errs.
	Start(ctx context.Context, ops []Op, idx []int, errs []error) (wait func() (fallback []int))
}

func noFallback() []int { return nil }

// ownTransport copies to and from the segment this process contributes.
type ownTransport struct{ e *Engine }

func (t ownTransport) Start(_ context.Context, ops []Op, idx []int, errs []error) func() []int {
	e := t.e
	e.ownMu.RLock()
	own := e.own
	e.ownMu.RUnlock()
	for _, i := range idx {
		op := &ops[i]
		if op.Peer.SegID != own.id { // SetOwn changed meanwhile
			errs[i] = wire.Errorf(wire.ErrSegmentNotFound, "segment %d is no longer this process's", op.Peer.SegID)
			continue
		}
		if own.dev != nil {
			errs[i] = e.copyIPC(own.dev, op)
		} else {
			errs[i] = e.copyShm(own.host, op)
		}
	}
	return noFallback
}

// mappedTransport copies to and from same-host peers' segments opened in
// this process (shared memory or IPC), falling back to TCP for a segment
// that cannot be opened.
type mappedTransport[M any] struct {
	e    *Engine
	maps *peerMaps[M]
	copy func(M, *Op) error
}

func (t mappedTransport[M]) Start(_ context.Context, ops []Op, idx []int, errs []error) func() []int {
	var late []int
	var mu sync.Mutex // guards late when ops are copied in parallel
	one := func(i int) {
		m, useTCP, err := t.maps.acquire(ops[i].Peer)
		switch {
		case useTCP:
			mu.Lock()
			late = append(late, i)
			mu.Unlock()
		case err != nil:
			errs[i] = err
		default:
			errs[i] = t.copy(m.mem, &ops[i])
			m.release()
		}
	}
	fanout.Each(len(idx), copyWorkers(ops, idx), func(k int) { one(idx[k]) })
	sort.Ints(late) // in the order the ops came, as a serial copy leaves them
	return func() []int { return late }
}

// copyWorkers is how many goroutines copy the ops idx of a batch on a
// mapped route: one per core for several ops of a few MiB in all whose
// parts are each too small to be split (CopyScatter and copyProcess split
// a large one themselves), else 1.
func copyWorkers(ops []Op, idx []int) int {
	if len(idx) < 2 {
		return 1
	}
	var total uint64
	for _, i := range idx {
		n, _ := opLen(&ops[i])
		if n >= 2*parallelCopyMin {
			return 1
		}
		total += n
	}
	return max(1, min(len(idx), copyShares(total)))
}

// tcpTransport sends ops to the peers' transfer servers. A broken pooled
// connection (peer restarted, stale stream) fails the ops on it; they are
// retried once on fresh connections. Transfers are idempotent, so a retry
// is safe.
type tcpTransport struct{ e *Engine }

func (t tcpTransport) Start(ctx context.Context, ops []Op, idx []int, errs []error) func() []int {
	e := t.e
	c := e.startTCP(ctx, ops, idx)
	return func() []int {
		if c == nil {
			return nil
		}
		retry := c.wait(ctx, errs, nil)
		if len(retry) > 0 && ctx.Err() == nil && !e.isClosed() {
			if c := e.startTCP(ctx, ops, retry); c != nil {
				c.wait(ctx, errs, nil)
			}
		}
		return nil
	}
}

// copyShm performs op against host memory mapped here (a peer's shared
// mapping or the own segment). Device parts go straight between the GPU
// and the mapping once it is page-locked, or through the bounces when it
// cannot be; parts in another process's memory go straight.
func (e *Engine) copyShm(mem []byte, op *Op) error {
	if len(op.Device) == 0 {
		if err := CopyScatter(mem, op.Offset, op.Bufs, op.Write); err != nil {
			return wire.Errorf(wire.ErrInvalidParams, "segment %d: %v", op.Peer.SegID, err)
		}
		return nil
	}
	if !onGPU(op) || e.pins.ensure(mem) {
		return e.copyMixed(mem, nil, op)
	}
	return e.stagedCopy(op, func(h *Op) error { return e.copyShm(mem, h) })
}

// copyIPC performs op against GPU memory (a peer's segment opened over
// IPC, or the own GPU segment): host parts through the driver, device
// parts GPU to GPU.
func (e *Engine) copyIPC(mem DeviceMemory, op *Op) error {
	if len(op.Device) > 0 {
		return e.copyMixed(nil, mem, op)
	}
	for _, b := range op.Bufs {
		e.beforeDeviceCopy(b)
	}
	return CopyDevice(mem, op.Offset, op.Bufs, op.Write)
}
