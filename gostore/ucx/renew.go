// renew.go: replacing a Worker's UCP worker after a peer without
// peer-failure detection was taken as gone.

package ucx

/*
#include <stdlib.h>
#include "gs_ucx.h"
*/
import "C"

import (
	"context"
	"errors"
	"log/slog"
	"unsafe"

	"github.com/gostore/gostore/gostore/wire"
)

// Why renew: UCX 1.13's shared-memory transports (posix, sysv) deliver
// every active message, including the replies of software RMA, through one
// receive FIFO per UCP worker, shared by all its peers. A sender claims a
// slot by advancing the FIFO's head, copies its message in, then marks the
// slot written; the receiver reads the slots in order. A peer killed
// between claim and mark leaves a slot that is never marked, and every
// message behind it, from live peers too, is never read: the worker
// no longer hears from anyone over shared memory, and UCX has no way back.
// So when such a peer is taken as gone the Worker moves to a new UCP worker
// (a new FIFO, endpoints rebuilt on demand) and posts the ops that were
// cut short once more.

// uworker is one UCP worker of a Worker: its current one, or one renewed
// away that lives on until no Do holds an endpoint of it (its abandoned
// requests use only C bounce buffers or none, so destroying it then
// cannot touch a caller's memory).
type uworker struct {
	h     C.ucp_worker_h
	efd   C.int
	holds int                    // Do calls' holds on its endpoints (see connect, release)
	eps   map[*endpoint]struct{} // its endpoints whose rkeys are not yet destroyed
}

func newUWorker(c *Context) (*uworker, error) {
	u := &uworker{eps: map[*endpoint]struct{}{}}
	if st := C.gs_ucx_worker_create(c.h, C.UCS_THREAD_MODE_SERIALIZED, &u.h); st != C.UCS_OK {
		return nil, wire.Errorf(wire.ErrTransferFail, "ucx worker_create: %s", statusString(st))
	}
	if st := C.gs_ucx_worker_efd(u.h, &u.efd); st != C.UCS_OK {
		C.gs_ucx_worker_destroy(u.h)
		return nil, wire.Errorf(wire.ErrTransferFail, "ucx worker event fd: %s", statusString(st))
	}
	return u, nil
}

// renewed marks an op's error as one Do posts again: the op was cut short
// by its UCP worker's renewal, or it stalled, which may be the renewed
// worker's blocked FIFO rather than its own peer. The wire code is the
// wrapped error's.
type renewed struct{ error }

func (e renewed) Unwrap() error { return e.error }

// Do moves every op, many in flight, and returns one error per op (nil
// when its bytes arrived). Writes are flushed: their bytes are in the
// peer's memory when Do returns. On ctx end, Do waits for its requests
// still in flight, and CloseDrainBound later force-closes the endpoints of
// those that did not end, which cancels them (see wait), so Do never
// returns while UCX could still touch the caller's memory. Ops cut short by a renewal of the UCP
// worker (see renew) are posted once more on the new one, so a live peer
// does not fail because another peer died; a dead peer's ops fail on that
// second try (at connect, or after PeerStallBound again).
func (w *Worker) Do(ctx context.Context, ops []Op) []error {
	// Wait progresses the worker at once: Begin's push is for a caller
	// that does something else first.
	return (&Begun{t: w.begin(ctx, ops)}).Wait()
}

// Begun is a Do whose ops are posted (Begin) and not yet waited for.
type Begun struct{ t *try }

// Begin is the first half of Do: it posts every op (connecting, and
// reading a new endpoint's canary, first) and returns without waiting for
// them, for a caller with something else to do while they move (a get
// that asks the master while it reads from where the object was). The
// caller must call Wait exactly once and must not touch the ops' memory
// before (UCX may be writing it); ctx bounds the Wait as it bounds a Do.
// Close waits for the Wait.
func (w *Worker) Begin(ctx context.Context, ops []Op) *Begun {
	t := w.begin(ctx, ops)
	if len(t.reqs) > 0 {
		// Push out what UCX queued rather than sent (a lane not yet
		// ready): the peer then works while the caller does.
		w.mu.Lock()
		C.gs_ucx_progress(w.cur.h)
		w.mu.Unlock()
	}
	return &Begun{t: t}
}

// Wait is the second half of Do: it returns once every op Begin posted
// ended, one error per op, with Do's one try again for ops cut short by a
// renewal.
func (b *Begun) Wait() []error {
	t := b.t
	w, ctx, ops := t.w, t.ctx, t.ops
	errs := t.finish()
	var again []int
	for i, err := range errs {
		var r renewed
		if errors.As(err, &r) {
			errs[i] = r.error
			if ctx.Err() == nil {
				again = append(again, i)
			}
		}
	}
	if len(again) == 0 {
		return errs
	}
	retry := make([]Op, len(again))
	for k, i := range again {
		retry[k] = ops[i]
	}
	for k, err := range w.begin(ctx, retry).finish() {
		var r renewed
		if errors.As(err, &r) {
			err = r.error
		}
		var e, first *wire.Error
		if errors.As(err, &e) && errors.As(errs[again[k]], &first) {
			// The first try's error says why the op was posted again.
			err = wire.Errorf(e.Code, "%s (posted again after: %s)", e.Msg, first.Msg)
		}
		errs[again[k]] = err
	}
	return errs
}

// renew moves the Worker to a new UCP worker: the endpoints of the old one
// leave the cache (Do calls holding them see their requests abandoned, see
// stalled, and post again), and the old one is destroyed once no Do holds
// an endpoint of it. If no new worker can be made the old one stays. why
// is the log's reason. w.mu held.
func (w *Worker) renew(why string) {
	nu, err := newUWorker(w.c)
	if err != nil {
		slog.Error("ucx: "+why+" and no new worker could be made; keeping the old one", "err", err)
		return
	}
	old := w.cur
	for k, ep := range w.eps {
		if ep.uw == old {
			delete(w.eps, k)
		}
	}
	w.cur = nu
	w.old = append(w.old, old)
	w.renewals++
	slog.Warn("ucx: " + why + "; the worker is renewed, endpoints reconnect")
	if old.holds == 0 {
		w.destroy(old)
	}
}

// release ends a Do's hold on ep. w.mu held.
func (w *Worker) release(ep *endpoint) {
	ep.users--
	ep.uw.holds--
	w.retire(ep)
	if ep.uw != w.cur && ep.uw.holds == 0 {
		w.destroy(ep.uw)
	}
}

// destroy destroys an old UCP worker no Do holds: its rkeys first, then the
// worker (which ends its endpoints and requests), then the C memory of its
// abandoned requests and endpoints. w.mu held.
func (w *Worker) destroy(u *uworker) {
	for i, o := range w.old {
		if o == u {
			w.old = append(w.old[:i], w.old[i+1:]...)
			break
		}
	}
	var orphans []request
	kept := w.orphans[:0]
	for _, r := range w.orphans {
		if r.ep.uw == u {
			orphans = append(orphans, r)
		} else {
			kept = append(kept, r)
		}
	}
	w.orphans = kept
	var closing []closingEP
	keptC := w.closing[:0]
	for _, c := range w.closing {
		if c.uw == u {
			closing = append(closing, c)
		} else {
			keptC = append(keptC, c)
		}
	}
	w.closing = keptC
	for ep := range u.eps {
		dropKeys(ep)
		ep.dead, ep.users, ep.orph = true, 0, 0
		if !ep.closed {
			// The worker's destroy closes it.
			ep.closed = true
			closing = append(closing, closingEP{gs: ep.gs, uw: u})
		}
	}
	u.eps = nil
	C.gs_ucx_worker_destroy(u.h)
	for _, r := range orphans {
		r.end(C.UCS_ERR_CANCELED)
	}
	for _, c := range closing {
		C.free(unsafe.Pointer(c.gs))
	}
}

// closesInFlight counts the endpoint closes that progress can still end
// (not the kept ones, see closingEP). w.mu held.
func (w *Worker) closesInFlight() int {
	n := 0
	for _, c := range w.closing {
		if !c.keep {
			n++
		}
	}
	return n
}
