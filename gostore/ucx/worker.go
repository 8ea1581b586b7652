// worker.go: the initiator side, one-sided puts and gets to peers'
// exposures.

package ucx

/*
#include <stdlib.h>
#include "gs_ucx.h"
*/
import "C"

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/gostore/gostore/gostore/wire"
)

// Part is one piece of an op's local memory: Host (Go or C memory) when
// non-nil, else the GPU pointer Dev with length Len.
type Part struct {
	Host []byte
	Dev  uintptr
	Len  uint64
}

func (p *Part) size() uint64 {
	if p.Host != nil {
		return uint64(len(p.Host))
	}
	return p.Len
}

// Op moves Parts, in order and contiguous, to (Write) or from the peer
// exposure Desc at Offset.
type Op struct {
	Desc   []byte
	Offset uint64
	Parts  []Part
	Write  bool
}

// Worker is the initiator: safe for concurrent use. The UCP worker is
// UCS_THREAD_MODE_SERIALIZED and every call into it holds mu.
type Worker struct {
	c *Context

	mu sync.Mutex
	// cur is the UCP worker that new endpoints and the progress loop
	// use; old holds the ones renewed away (see renew).
	cur      *uworker
	old      []*uworker
	closed   bool
	active   int                  // Do calls between their post and their end
	eps      map[string]*endpoint // by the peer's worker address
	closing  []closingEP          // endpoints whose close is in flight
	draining []*endpoint          // dead endpoints whose close waits for their users (see closeEP)
	orphans  []request            // requests a Do gave up on (see orphan)
	renewals int                  // UCP workers renewed away (see renew); tests read it
	gone     map[string]gonePeer  // peers the stall path gave up on, by worker address (see stalled)

	noPeerErrors bool // no transport detects peer failure: endpoints use MODE_NONE
}

// endpoint is a cached connection to one peer exposure's worker and the
// rkeys unpacked on it.
type endpoint struct {
	gs     *C.struct_gs_ep // C memory: the error callback's argument
	uw     *uworker        // the UCP worker it was made on
	key    string
	rkeys  map[string]*remoteKey // by the desc's packed rkey
	users  int                   // Do calls and orphaned requests holding it
	orph   int                   // of users, the orphaned requests (see orphan)
	dead   bool                  // out of the cache; its rkeys go with the last user
	closed bool                  // ucp_ep_close_nbx was called
	// ready: a request on it completed, so its wireup (the handshake) is
	// over; see closeEP.
	ready bool
	// moved: when a request on it last completed; without peer-failure
	// detection a request that sees none for PeerStallBound is taken as
	// the peer gone (see wait).
	moved time.Time
	// suspect: made while its peer was given up on once (see gonePeer);
	// a completed request clears that, a stall confirms it.
	suspect bool
	// drainBy: when a dead endpoint that only orphaned requests hold is
	// closed at the latest (see closeEP); zero until it died with users.
	drainBy time.Time
	// cut: close it now, cancelling whatever is in flight on it (a Do
	// whose own requests outlived its ctx by CloseDrainBound, or Close).
	cut bool

	peerErrors bool // UCP_ERR_HANDLING_MODE_PEER: a dead peer ends its requests
	// recheck: its RMA may bypass the peer's worker (bypasses), so the
	// canary is read on every Do (see verify), not once per rkey. True
	// until laned: the first canary read came back, its lanes are known.
	recheck, laned bool
}

// PeerStallBound is how long a request on an endpoint without peer-failure
// detection (UCX 1.13's shared memory) may wait with no request of that
// endpoint completing before the peer is taken as gone: the op fails with
// wire.ErrTransferFail and its bounce buffers are left to the worker, as at
// a ctx end. A live peer completes a request far sooner (one part at
// memory speed); a part so large that it needs longer fails here.
const PeerStallBound = 3 * time.Second

// CloseDrainBound is how long a Do whose ctx ended waits for its requests
// in flight on an endpoint whose peer has not failed before it
// force-closes that endpoint, which cancels them (and every other Do's on
// it, which UCX cannot spare: it has no cancel for one RMA request). It
// bounds how late Do returns after its ctx ended against a live peer that
// is slow. Close and the orphaned requests of a dead endpoint get the same
// bound (see closeEP); a failed peer's endpoint is closed at once.
const CloseDrainBound = 500 * time.Millisecond

// GoneFor is how long a peer given up on twice by the stall path (see
// PeerStallBound) is refused at connect with wire.ErrTransferFail, rather
// than connected again: every stall of a peer on the current UCP worker
// renews it, which cuts short every other Do on endpoints without
// peer-failure detection, and a hung or dead peer that callers keep
// asking for would do that every PeerStallBound.
const GoneFor = 30 * time.Second

// gonePeer is a peer the stall path gave up on. The first stall cannot
// tell the dead peer from a live one whose replies wait behind it in a
// receive queue a dead peer blocked (see renew), so it only renews the
// worker and lets the peer be connected once more; a stall of that new
// endpoint confirms the peer gone (refused until at+GoneFor, without a
// renewal: the new worker's queue was never shared with it, unless
// another peer's first stall, begun before, undoes that, see giveUp), a
// completed request clears it.
type gonePeer struct {
	at        time.Time
	confirmed bool
}

// remoteKey is a desc's rkey and canary key unpacked on an endpoint; the
// endpoint serves the desc only once the canary read back its nonce.
type remoteKey struct {
	data, canary C.ucp_rkey_h
	verified     bool
}

type closingEP struct {
	req unsafe.Pointer
	gs  *C.struct_gs_ep
	uw  *uworker
	// keep: an endpoint without peer-failure detection, which UCX
	// refuses to force-close; it stays open, and gs (its error
	// callback's argument) allocated, until its UCP worker is destroyed.
	keep bool
}

// NewWorker makes an initiator worker on c.
func (c *Context) NewWorker() (*Worker, error) {
	if !c.acquire() {
		return nil, wire.Errorf(wire.ErrTransferFail, "ucx worker: context closed")
	}
	w := &Worker{c: c, eps: map[string]*endpoint{}, gone: map[string]gonePeer{}, noPeerErrors: !peerFailureAM(c.info.Resources)}
	if w.noPeerErrors {
		slog.Warn("ucx: no transport detects peer failure; endpoints connect without it (a dead peer is seen at the op's deadline or after ucx.PeerStallBound without progress)", "resources", c.info.Resources)
	}
	uw, err := newUWorker(c)
	if err != nil {
		c.release()
		return nil, err
	}
	w.cur = uw
	return w, nil
}

// request is one posted UCX request of a Do and the ops it completes.
type request struct {
	req unsafe.Pointer
	ep  *endpoint
	ops []int
	// bounce is C memory standing in for the caller's on an endpoint that
	// cannot detect peer failure (its requests may never end; see post);
	// into is a get's caller memory, filled from bounce once it succeeded.
	bounce unsafe.Pointer
	into   []byte
	posted time.Time
	// stale: an orphan whose peer was already given up on (see
	// stalledOrphans).
	stale bool
}

// end releases r after UCX ended it with st.
func (r *request) end(st C.ucs_status_t) {
	if r.bounce == nil {
		return
	}
	if st == C.UCS_OK && r.into != nil {
		copy(r.into, unsafe.Slice((*byte)(r.bounce), len(r.into)))
	}
	C.free(r.bounce)
	r.bounce = nil
}

// try is one try of a Do: every op posted once, on the current UCP worker
// (begin), then waited for (finish). Between the two the Worker counts it
// active (Close waits for it) and it holds its endpoints.
type try struct {
	w      *Worker
	ctx    context.Context
	ops    []Op
	descs  []*desc
	errs   []error
	reqs   []request
	held   []*endpoint
	pin    runtime.Pinner // Go memory of the ops' parts, until finish
	active bool           // counted in w.active (begin reached the worker)
	later  []*canaryCheck // canary reads posted after the gets they vouch for (see verify)
}

// begin checks and posts every op once. On ctx end, finish closes the
// endpoints with requests still in flight (see closeEP) and waits for
// them, so a try never ends while UCX could still touch the caller's
// memory.
func (w *Worker) begin(ctx context.Context, ops []Op) *try {
	t := &try{w: w, ctx: ctx, ops: ops, errs: make([]error, len(ops)), descs: make([]*desc, len(ops))}
	errs, descs := t.errs, t.descs
	for i := range ops {
		descs[i], errs[i] = w.check(&ops[i])
	}

	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		for i := range errs {
			if errs[i] == nil {
				errs[i] = wire.Errorf(wire.ErrTransferFail, "ucx: worker closed")
			}
		}
		return t
	}
	w.active++
	t.active = true
	eps := make([]*endpoint, len(ops))
	rks := make([]*remoteKey, len(ops))
	for i := range ops {
		if errs[i] != nil {
			continue
		}
		ep, rk, err := w.connect(descs[i])
		if err != nil {
			errs[i] = err
			continue
		}
		t.held = append(t.held, ep)
		eps[i], rks[i] = ep, rk
	}
	waited, later := w.verify(ctx, ops, descs, errs, eps, rks)
	if waited {
		// verify let go of w.mu while waiting: endpoints may have failed.
		for i, ep := range eps {
			if errs[i] == nil && ep.dead {
				errs[i] = wire.Errorf(wire.ErrTransferFail, "ucx %s %#x+%d: endpoint failed", opName(&ops[i]), descs[i].base, ops[i].Offset)
			}
		}
	}
	flushes := map[*endpoint][]int{}
	var flushOrder []*endpoint
	for i := range ops {
		if errs[i] != nil {
			continue
		}
		op, d, ep := &ops[i], descs[i], eps[i]
		raddr := d.base + op.Offset
		for j := range op.Parts {
			r, st := w.post(ep, rks[i].data, op, &op.Parts[j], raddr, &t.pin)
			if st != C.UCS_OK && st != C.UCS_INPROGRESS {
				errs[i] = w.opError(op, d, st)
				w.fail(ep) // as collect does: no key is trusted past an error
				break
			}
			if r.req != nil {
				r.ops = []int{i}
				t.reqs = append(t.reqs, r)
			}
			raddr += op.Parts[j].size()
		}
		if op.Write && errs[i] == nil {
			if _, ok := flushes[ep]; !ok {
				flushOrder = append(flushOrder, ep)
			}
			flushes[ep] = append(flushes[ep], i)
		}
	}
	// After the gets it vouches for (see verify): read once they read.
	for _, c := range later {
		if r, ok := w.readCanary(c, ops, descs, errs); ok {
			t.reqs = append(t.reqs, r)
		}
	}
	t.later = later
	// A put completes locally; the flush completes once every put before
	// it on that endpoint is in the peer's memory.
	for _, ep := range flushOrder {
		var req unsafe.Pointer
		st := C.gs_ucx_flush(ep.gs.ep, &req)
		if req != nil {
			t.reqs = append(t.reqs, request{req: req, ep: ep, ops: flushes[ep], posted: time.Now()})
		} else if st != C.UCS_OK {
			for _, i := range flushes[ep] {
				setErr(errs, i, w.opError(&ops[i], descs[i], st))
			}
			w.fail(ep)
		}
	}
	return t
}

// finish waits until every request of the try ended and returns one
// error per op.
func (t *try) finish() []error {
	defer t.pin.Unpin()
	if !t.active {
		return t.errs
	}
	w := t.w
	w.wait(t.ctx, t.reqs, t.ops, t.descs, t.errs)
	w.mu.Lock()
	for _, c := range t.later {
		w.judge(c, t.ops, t.descs, t.errs)
	}
	for _, ep := range t.held {
		w.release(ep)
	}
	w.active--
	w.mu.Unlock()
	return t.errs
}

// verify reads the canary of every desc not yet verified on its endpoint
// and compares it with the desc's nonce: a worker address that now leads
// to another worker (the exposure closed, its tcp port reused) fails here,
// before any op reaches memory the desc never named. On an endpoint whose
// RMA bypasses the peer's worker (recheck: cma in UCX >= 1.16) it reads
// the canary on every Do: there nothing else stops an endpoint connected
// before the exposure closed (a revoked desc would read and write whatever
// the memory holds now). Before any put is posted; for gets only, the
// read is returned as later, for begin to post after the gets and finish
// to judge (judge): one round trip instead of two, and a get that read
// after Close began fails rather than returning the bytes (they may be in
// the caller's memory, the op an error). It reports whether it waited
// (letting go of w.mu, which it holds again on return).
func (w *Worker) verify(ctx context.Context, ops []Op, descs []*desc, errs []error, eps []*endpoint, rks []*remoteKey) (waited bool, later []*canaryCheck) {
	var checks []*canaryCheck
	byKey := map[*remoteKey]*canaryCheck{}
	for i, rk := range rks {
		if errs[i] != nil || rk.verified && !eps[i].recheck {
			continue
		}
		if c := byKey[rk]; c != nil {
			c.ops = append(c.ops, i)
			continue
		}
		c := &canaryCheck{rk: rk, ep: eps[i], d: descs[i], got: make([]byte, nonceLen), ops: []int{i}}
		byKey[rk] = c
		checks = append(checks, c)
	}
	now := checks[:0]
	for _, c := range checks {
		if c.rk.verified && c.getsOnly(ops) {
			later = append(later, c)
		} else {
			now = append(now, c)
		}
	}
	if len(now) == 0 {
		return false, later
	}
	var reqs []request
	for _, c := range now {
		if r, ok := w.readCanary(c, ops, descs, errs); ok {
			reqs = append(reqs, r)
		}
	}
	w.mu.Unlock()
	w.wait(ctx, reqs, ops, descs, errs)
	w.mu.Lock()
	for _, c := range now {
		if !w.judge(c, ops, descs, errs) {
			continue
		}
		c.rk.verified = true
		if !c.ep.laned {
			// Its first RMA came through: the lanes are set (see bypass.go).
			c.ep.laned, c.ep.recheck = true, bypasses(epInfo(c.ep))
		}
	}
	return true, later
}

// post starts one part's put or get. With peer-failure detection, UCX
// moves the caller's memory itself (pinned until Do returns): a dead peer
// or a force close ends every request. Without it (UCX 1.13's shared
// memory) a request to a dead peer never ends, so the part moves through
// a C bounce buffer that an abandoned request keeps (see orphan), and Do
// can still return without UCX holding the caller's memory. w.mu held.
func (w *Worker) post(ep *endpoint, rkey C.ucp_rkey_h, op *Op, p *Part, raddr uint64, pin *runtime.Pinner) (request, C.ucs_status_t) {
	r := request{ep: ep}
	n := p.size()
	if n == 0 {
		return r, C.UCS_OK
	}
	var local C.uintptr_t
	mt := MemHost
	switch {
	case p.Host == nil:
		local, mt = C.uintptr_t(p.Dev), MemCUDA
	case ep.peerErrors:
		pin.Pin(&p.Host[0])
		local = C.uintptr_t(uintptr(unsafe.Pointer(&p.Host[0])))
	default:
		r.bounce = C.malloc(C.size_t(n))
		if r.bounce == nil {
			return r, C.UCS_ERR_NO_MEMORY
		}
		if op.Write {
			copy(unsafe.Slice((*byte)(r.bounce), n), p.Host)
		} else {
			r.into = p.Host
		}
		local = C.uintptr_t(uintptr(r.bounce))
	}
	st := C.gs_ucx_rma(ep.gs.ep, b2i(op.Write), local, C.size_t(n), C.uint64_t(raddr), rkey, mt.ucs(), &r.req)
	if r.req == nil {
		r.end(st)
	}
	r.posted = time.Now()
	return r, st
}

// wait progresses the worker until every request ended.
func (w *Worker) wait(ctx context.Context, reqs []request, ops []Op, descs []*desc, errs []error) {
	cutDone := false
	var cutAt time.Time // CloseDrainBound after the ctx end was seen; zero before
	for idle := 0; len(reqs) > 0; {
		w.mu.Lock()
		progressed := w.progressAll()
		var ended bool
		reqs, ended = w.collect(reqs, ops, descs, errs)
		progressed = progressed || ended
		for _, r := range reqs {
			if r.ep.gs.failed != 0 {
				w.fail(r.ep)
			}
		}
		if len(reqs) > 0 {
			reqs = w.stalled(reqs, ops, descs, errs)
		}
		if cutAt.IsZero() && len(reqs) > 0 && ctx.Err() != nil {
			cutAt = time.Now().Add(CloseDrainBound)
			reqs = w.cancel(ctx, reqs, ops, descs, errs)
		}
		if !cutAt.IsZero() && !cutDone && len(reqs) > 0 && !time.Now().Before(cutAt) {
			// The peer is slower than the bound, or hung.
			cutDone = true
			for _, r := range reqs {
				w.cut(r.ep)
			}
		}
		armed, unarmable := false, false
		if len(reqs) > 0 && !progressed {
			idle++
			if idle > spinRounds {
				st := C.gs_ucx_worker_arm(w.cur.h)
				armed, unarmable = st == C.UCS_OK, st != C.UCS_OK && st != C.UCS_ERR_BUSY
			}
		} else {
			idle = 0
		}
		efd := w.cur.efd // renew may replace it once w.mu is let go
		w.mu.Unlock()
		if armed {
			// Sleep until the worker has an event; the timeout bounds
			// the wait when another goroutine took the event, and how
			// late a ctx end is seen.
			C.gs_ucx_wait(efd, -1, 2)
		} else if unarmable {
			// Arming failed (not BUSY, which means events are waiting):
			// poll every millisecond rather than spin a core.
			C.gs_ucx_wait(efd, -1, 1)
		}
		// No runtime.Gosched between rounds: Do usually runs on a cgo
		// callback (the Python caller's thread), to which Go locks the
		// goroutine, and yielding a locked goroutine hands its P to another
		// thread and back, two context switches per round (bench/ucx.py
		// counted 19-24 per 4 KiB put with it, 6-8 without; our TCP route
		// 9). Other goroutines still run: w.mu is let go each round.
	}
}

// progressAll progresses the current UCP worker and those renewed away,
// then reaps closed endpoints and ends stalled orphans; it reports whether
// UCX did anything. w.mu held.
func (w *Worker) progressAll() bool {
	progressed := C.gs_ucx_progress(w.cur.h) != 0
	for _, o := range w.old {
		// A renewal leaves requests on tcp/verbs endpoints of the old
		// worker in flight (the noPeerErrors choice can flip mid-life,
		// so a worker may hold both kinds): only progress ends them.
		if C.gs_ucx_progress(o.h) != 0 {
			progressed = true
		}
	}
	w.reap()
	if len(w.orphans) > 0 {
		w.stalledOrphans(time.Now())
	}
	return progressed
}

// collect ends the requests UCX has finished, setting their ops' errors
// and dropping the endpoint of one that ended in error,
// and returns those still in flight and whether any ended. w.mu held.
func (w *Worker) collect(reqs []request, ops []Op, descs []*desc, errs []error) ([]request, bool) {
	ended := false
	live := reqs[:0]
	for _, r := range reqs {
		st := C.gs_ucx_request_test(r.req)
		if st == C.UCS_INPROGRESS {
			live = append(live, r)
			continue
		}
		ended = true
		r.end(st)
		if st == C.UCS_OK {
			r.ep.ready, r.ep.moved = true, time.Now()
			if r.ep.suspect {
				r.ep.suspect = false
				delete(w.gone, r.ep.key)
			}
		} else {
			for _, i := range r.ops {
				setErr(errs, i, w.opError(&ops[i], descs[i], st))
			}
			// UCX ended it with an error without (yet) failing its
			// endpoint: drop the endpoint all the same, so the next op
			// with its desc connects anew and reads the canary again
			// rather than trusting a key verified before the error.
			w.fail(r.ep)
		}
	}
	return live, ended
}

// cancel fails the ops of reqs, whose call's ctx ended, and returns the
// requests still to wait for. Requests on endpoints with peer-failure
// detection use the caller's memory: they are waited for, their endpoint
// left as it is (other Do calls' ops on it go on), and only if they are
// still in flight CloseDrainBound later is it force-closed (wait's cut),
// which cancels them (and the others', which UCX cannot spare). Requests
// on the others may never end: they are left to the worker with their
// bounce buffers, and their endpoint dropped. w.mu held.
func (w *Worker) cancel(ctx context.Context, reqs []request, ops []Op, descs []*desc, errs []error) []request {
	live := reqs[:0]
	for _, r := range reqs {
		for _, i := range r.ops {
			setErr(errs, i, wire.Errorf(wire.ErrTransferFail, "ucx %s %#x+%d: %v", opName(&ops[i]), descs[i].base, ops[i].Offset, ctx.Err()))
		}
		if r.ep.peerErrors && r.bounce == nil {
			// The endpoint is ready (only canary reads, through C
			// memory, run before), so a cut force-closes it.
			live = append(live, r)
		} else {
			w.fail(r.ep)
			// No renewal: the peer may be live and only slow.
			w.orphan(r, false)
		}
	}
	return live
}

// spinRounds is how many rounds without progress wait polls before it
// arms the worker and sleeps on its event fd: a reply that comes within a
// few microseconds is taken without a sleep and wake, and a later one does
// not cost a core that, on a small machine, the peer needs.
const spinRounds = 16

// stalled fails the requests on endpoints without peer-failure detection
// that saw no request of their endpoint complete for PeerStallBound: the
// peer is taken as gone (UCX would wait for it forever), the endpoint is
// dropped and the requests, which only ever use bounce buffers there, are
// left to the worker, which is renewed (see orphan). Requests on such
// endpoints of a worker renewed away are left to it at once: nothing
// progresses it any more. Both kinds of op are posted again by Do (see
// renewed). It returns the requests still live. w.mu held.
func (w *Worker) stalled(reqs []request, ops []Op, descs []*desc, errs []error) []request {
	now := time.Now()
	live := reqs[:0]
	for _, r := range reqs {
		if r.ep.uw != w.cur && !r.ep.peerErrors {
			for _, i := range r.ops {
				setErr(errs, i, renewed{wire.Errorf(wire.ErrTransferFail, "ucx %s %#x+%d: the worker was renewed after a peer was taken as gone", opName(&ops[i]), descs[i].base, ops[i].Offset)})
			}
			w.orphan(r, false)
			continue
		}
		since := r.posted
		if r.ep.moved.After(since) {
			since = r.ep.moved
		}
		if r.ep.peerErrors || now.Sub(since) < PeerStallBound {
			live = append(live, r)
			continue
		}
		again := !r.ep.suspect
		for _, i := range r.ops {
			err := wire.Errorf(wire.ErrTransferFail, "ucx %s %#x+%d: no progress from the peer for %v (this transport cannot detect a dead peer): taken as gone", opName(&ops[i]), descs[i].base, ops[i].Offset, PeerStallBound)
			if again {
				err = renewed{err}
			}
			setErr(errs, i, err)
		}
		w.giveUp(r.ep, since, now)
		w.fail(r.ep)
		r.stale = true
		w.orphan(r, again)
	}
	return live
}

// orphan hands an abandoned request (only ever one using a bounce buffer,
// or a flush, neither touching the caller's memory) to the worker, which
// frees it when it ends, when its UCP worker is destroyed, or at Close.
// With renew (the stall path's first give-up on a peer), abandoning one on
// an endpoint without peer-failure detection of the current UCP worker
// renews that worker: the peer may be dead and may have died mid-send,
// which blocks the worker's receive queue (see renew). A ctx end does not
// renew: the peer may be live and slow, and a renewal cuts short every
// other Do; if the queue is blocked, the next stall renews. w.mu held.
func (w *Worker) orphan(r request, renew bool) {
	r.into = nil
	r.ep.users++
	r.ep.orph++
	w.orphans = append(w.orphans, r)
	if renew && !r.ep.peerErrors && r.ep.uw == w.cur {
		w.renew("a peer without failure detection was taken as gone (a peer that died mid-send blocks the receive queue)")
	}
}

// stalledOrphans gives up on the peers of requests a ctx end abandoned on
// the current UCP worker (endpoints without peer-failure detection) that
// then saw no progress for PeerStallBound, as the stall path does: with
// deadlines shorter than the bound the stall path is never reached, and a
// peer that died mid-send would block the worker's receive queue for
// good. w.mu held.
func (w *Worker) stalledOrphans(now time.Time) {
	renew := false
	for i := range w.orphans {
		r := &w.orphans[i]
		if r.stale || r.ep.peerErrors || r.ep.uw != w.cur {
			continue
		}
		since := r.posted
		if r.ep.moved.After(since) {
			since = r.ep.moved
		}
		if now.Sub(since) < PeerStallBound {
			continue
		}
		r.stale = true
		renew = renew || !r.ep.suspect
		w.giveUp(r.ep, since, now)
	}
	if renew {
		w.renew("a peer without failure detection was taken as gone after an abandoned request to it saw no progress (a peer that died mid-send blocks the receive queue)")
	}
}

// giveUp records that the stall path gave up on ep's peer, which saw no
// progress from since: once as suspect, confirmed when ep was already a
// suspect's (see gonePeer). A first give-up (a renewal follows) means the
// receive queue may be blocked since then, which explains the stalls that
// confirmed other peers since as well as a dead peer would: those go back
// to suspects, connected once more. Else a double fault, a second peer
// dying while a live one's replies wait behind the first in the queue,
// had the live one refused for GoneFor. It prunes the records GoneFor
// old. w.mu held.
func (w *Worker) giveUp(ep *endpoint, since, now time.Time) {
	for k, g := range w.gone {
		switch {
		case now.Sub(g.at) >= GoneFor:
			delete(w.gone, k)
		case g.confirmed && !ep.suspect && !g.at.Before(since):
			w.gone[k] = gonePeer{at: g.at}
		}
	}
	w.gone[ep.key] = gonePeer{at: now, confirmed: ep.suspect}
}

// check validates op against its desc before anything is posted.
func (w *Worker) check(op *Op) (*desc, error) {
	d, err := decodeDesc(op.Desc)
	if err != nil {
		return nil, err
	}
	var total uint64
	for j := range op.Parts {
		p := &op.Parts[j]
		if p.Host == nil && p.Len > 0 {
			if p.Dev == 0 {
				return nil, wire.Errorf(wire.ErrInvalidParams, "ucx: part %d has neither host nor device memory", j)
			}
			if !w.c.info.CUDA {
				return nil, wire.Errorf(wire.ErrInvalidParams, "ucx: part %d is device memory and this UCX has no CUDA support", j)
			}
		}
		n := p.size()
		if total+n < total {
			return nil, wire.Errorf(wire.ErrInvalidParams, "ucx: parts overflow")
		}
		total += n
	}
	if op.Offset > d.size || total > d.size-op.Offset {
		return nil, wire.Errorf(wire.ErrInvalidParams, "ucx: %d bytes at offset %d outside the exposed %d", total, op.Offset, d.size)
	}
	return d, nil
}

// connect returns the cached endpoint to d's worker (holding it for the
// caller) and d's rkey unpacked on it. w.mu held.
func (w *Worker) connect(d *desc) (*endpoint, *remoteKey, error) {
	key := string(d.addr)
	ep := w.eps[key]
	if ep != nil && ep.gs.failed != 0 {
		w.fail(ep)
		ep = nil
	}
	if g, ok := w.gone[key]; ok && ep == nil {
		if since := time.Since(g.at); since >= GoneFor {
			delete(w.gone, key)
		} else if g.confirmed {
			return nil, nil, wire.Errorf(wire.ErrTransferFail, "ucx connect: the peer was taken as gone %v ago (no progress for %v, twice; this transport cannot detect a dead peer): not connected again for %v", since.Round(time.Millisecond), PeerStallBound, GoneFor)
		}
	}
	if ep == nil {
		gs := (*C.struct_gs_ep)(C.calloc(1, C.size_t(unsafe.Sizeof(C.struct_gs_ep{}))))
		abuf := C.CBytes(d.addr)
		var st C.ucs_status_t = C.UCS_ERR_UNREACHABLE
		if !w.noPeerErrors {
			st = C.gs_ucx_ep_create(w.cur.h, abuf, 1, gs)
		}
		if st == C.UCS_ERR_UNREACHABLE {
			// No transport of this context detects a dead peer (UCX 1.13's
			// shared memory; peerFailureAM missed it): connect without,
			// once logged; a dead peer is then seen at the caller's
			// deadline or after PeerStallBound without progress.
			if st = C.gs_ucx_ep_create(w.cur.h, abuf, 0, gs); st == C.UCS_OK && !w.noPeerErrors {
				w.noPeerErrors = true
				slog.Warn("ucx: no transport detects peer failure; endpoints connect without it (a dead peer is seen at the op's deadline or after ucx.PeerStallBound without progress)", "resources", w.c.info.Resources)
			}
		}
		C.free(abuf)
		if st != C.UCS_OK {
			C.free(unsafe.Pointer(gs))
			return nil, nil, wire.Errorf(wire.ErrTransferFail, "ucx connect: %s", statusString(st))
		}
		_, suspect := w.gone[key]
		ep = &endpoint{gs: gs, uw: w.cur, key: key, rkeys: map[string]*remoteKey{}, peerErrors: !w.noPeerErrors, suspect: suspect, recheck: true}
		w.eps[key] = ep
		w.cur.eps[ep] = struct{}{}
	}
	rk := ep.rkeys[string(d.rkey)]
	if rk == nil {
		rk = &remoteKey{}
		if err := unpack(ep, d.rkey, &rk.data); err != nil {
			return nil, nil, err
		}
		if err := unpack(ep, d.ckey, &rk.canary); err != nil {
			C.gs_ucx_rkey_destroy(rk.data)
			return nil, nil, err
		}
		ep.rkeys[string(d.rkey)] = rk
	}
	ep.users++
	ep.uw.holds++
	return ep, rk, nil
}

func unpack(ep *endpoint, packed []byte, out *C.ucp_rkey_h) error {
	buf := C.CBytes(packed)
	defer C.free(buf)
	if st := C.gs_ucx_rkey_unpack(ep.gs.ep, buf, out); st != C.UCS_OK {
		return wire.Errorf(wire.ErrTransferFail, "ucx rkey_unpack: %s", statusString(st))
	}
	return nil
}

// fail takes ep out of the cache and closes it: at once when nothing
// holds it or its peer failed, else once no Do holds it and its orphaned
// requests ended or CloseDrainBound passed (see closeEP). An endpoint
// without peer-failure detection cannot be closed, only kept until its UCP worker goes (see closingEP): past
// maxKept of those on the current worker, the worker is renewed, so peer
// churn does not grow them without bound. w.mu held.
func (w *Worker) fail(ep *endpoint) {
	if w.eps[ep.key] == ep {
		delete(w.eps, ep.key)
	}
	ep.dead = true
	w.closeEP(ep)
	w.retire(ep)
	if !ep.peerErrors && ep.uw == w.cur && !w.closed && w.kept() > maxKept {
		w.renew(fmt.Sprintf("more than %d endpoints without failure detection are closed but kept open (UCX cannot close them)", maxKept))
	}
}

// maxKept bounds the endpoints kept open on the current UCP worker (see
// fail); a renewal, which closes them, cuts short the Do calls then in
// flight on endpoints without peer-failure detection (they post again).
const maxKept = 32

// kept counts the kept endpoints of the current UCP worker. w.mu held.
func (w *Worker) kept() int {
	n := 0
	for _, c := range w.closing {
		if c.keep && c.uw == w.cur {
			n++
		}
	}
	return n
}

// closeEP starts the close of ep once. A tcp/verbs endpoint (peer-failure
// detection) whose peer has not failed and that is not cut is closed only
// once no Do holds it and no orphaned request of it is in flight, or, the
// Do calls gone, CloseDrainBound after it was first asked to (orphans use
// C memory, and a hung peer would keep them for good): until then it
// stays open, out of the cache, and its requests end as they would (see
// drain). Each Do bounds its own wait (see cut in wait): one Do's ctx end
// or a Forget does not cancel another Do's ops. UCX 1.13 aborts the OWNER's
// process when a reader's endpoint goes while the owner still answers it:
// UCX's software RMA (tcp, shared memory) has the owner's worker send each
// get's bytes back (and each put's completion) from its active-message
// handler (rma_sw.c ucp_get_req_handler -> ucp_request_send), looping
// over the fragments. A force close only cancels the reader's requests:
// the owner still answers the gets it was sent, over the connection to
// the reader's worker (which outlives the endpoint). Once that worker is
// destroyed (Close, a renewal) or the reader dies, the owner's send meets
// a reset socket; the tcp transport fails the endpoint and returns
// "Endpoint timeout", and ucp_request_try_send (ucp_request.inl:346)
// calls ucs_fatal for any status but OK, INPROGRESS and NO_RESOURCE
// (TestCloseWithGetsInFlight: the abort in the owner's thread, from
// ucp_get_req_handler; the same code through UCX 1.22.0). A reader that
// waits for its requests to end before it closes leaves the owner
// nothing to answer.
//
// Once it closes: a force close, which ends whatever is in flight
// (the bound passed, or the peer failed), unless the endpoint's wireup is
// not over and its peer has not failed. That one is closed in flush mode,
// which lets the handshake finish first: UCX 1.13 aborts the process
// (ucp_request.c:684 "got REP message") when the peer's worker is
// destroyed while its wireup reply to a force-closed endpoint is still
// queued. Such an endpoint has only canary reads in flight (through C
// memory, see verify), which the flush close lets end. w.mu held.
func (w *Worker) closeEP(ep *endpoint) {
	if ep.closed {
		return
	}
	if !ep.peerErrors {
		// UCX 1.13 refuses a force close in UCP_ERR_HANDLING_MODE_NONE
		// (and a flush close to a dead peer would never end), yet may
		// still call the error callback: gs lives as long as the worker.
		ep.closed = true
		w.closing = append(w.closing, closingEP{gs: ep.gs, uw: ep.uw, keep: true})
		return
	}
	if ep.users > 0 && ep.gs.failed == 0 && !ep.cut {
		now := time.Now()
		if ep.drainBy.IsZero() {
			ep.drainBy = now.Add(CloseDrainBound)
			w.draining = append(w.draining, ep)
		}
		if ep.users > ep.orph || now.Before(ep.drainBy) {
			return
		}
	}
	ep.closed = true
	force := C.int(1)
	if !ep.ready && ep.gs.failed == 0 {
		force = 0
	}
	var req unsafe.Pointer
	C.gs_ucx_ep_close(ep.gs, force, &req)
	w.closing = append(w.closing, closingEP{req: req, gs: ep.gs, uw: ep.uw})
}

// drain closes the draining endpoints whose peer failed, and those only
// orphans hold past their CloseDrainBound (the others close when their
// last user lets go, see retire, or when cut). w.mu held.
func (w *Worker) drain() {
	live := w.draining[:0]
	for _, ep := range w.draining {
		if !ep.closed {
			w.closeEP(ep) // closes it only when its rule says so
		}
		if !ep.closed {
			live = append(live, ep)
		}
	}
	clear(w.draining[len(live):])
	w.draining = live
}

// cut takes ep out of the cache and force-closes it now, which cancels
// every request in flight on it (see closeEP). w.mu held.
func (w *Worker) cut(ep *endpoint) {
	ep.cut = true
	w.fail(ep)
}

// retire releases a dead endpoint's rkeys once no Do holds it. w.mu held.
func (w *Worker) retire(ep *endpoint) {
	if !ep.dead || ep.users > 0 {
		return
	}
	w.closeEP(ep)
	dropKeys(ep)
	delete(ep.uw.eps, ep)
}

func dropKeys(ep *endpoint) {
	for k, r := range ep.rkeys {
		C.gs_ucx_rkey_destroy(r.data)
		C.gs_ucx_rkey_destroy(r.canary)
		delete(ep.rkeys, k)
	}
}

// reap frees the abandoned requests and the endpoints whose close ended,
// and closes the draining endpoints that are due. w.mu held.
func (w *Worker) reap() {
	if len(w.draining) > 0 {
		w.drain()
	}
	orphans := w.orphans[:0]
	for _, r := range w.orphans {
		if st := C.gs_ucx_request_test(r.req); st == C.UCS_INPROGRESS {
			orphans = append(orphans, r)
		} else {
			r.end(st)
			if st == C.UCS_OK {
				r.ep.ready, r.ep.moved = true, time.Now()
			}
			r.ep.users--
			r.ep.orph--
			w.retire(r.ep)
		}
	}
	w.orphans = orphans
	live := w.closing[:0]
	for _, c := range w.closing {
		if c.keep || c.req != nil && C.gs_ucx_request_test(c.req) == C.UCS_INPROGRESS {
			live = append(live, c)
			continue
		}
		C.free(unsafe.Pointer(c.gs))
	}
	w.closing = live
}

// Forget drops the endpoint and rkeys of desc's peer, and the record of
// it taken as gone, for when the peer's exposure is known to be gone (its
// segment dropped by the master). Not after an op failed: Do already
// dropped the endpoint that failed, and forgetting the record would have
// the next op to a hung peer stall again.
func (w *Worker) Forget(descBytes []byte) {
	d, err := decodeDesc(descBytes)
	if err != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.gone, string(d.addr))
	if ep := w.eps[string(d.addr)]; ep != nil {
		w.fail(ep)
	}
}

// Close closes every endpoint, waits for Do calls in flight to end (their
// requests are cancelled), and destroys the worker.
func (w *Worker) Close() {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	w.closed = true
	for _, ep := range w.eps {
		w.fail(ep)
	}
	// Abandoned requests on endpoints without peer-failure detection may
	// never end: give them a moment, then destroying the worker ends them
	// (and closes those endpoints, see closingEP.keep). Do calls in flight
	// get CloseDrainBound for their requests to end, then their
	// endpoints are cut.
	var deadline time.Time
	cutBy := time.Now().Add(CloseDrainBound)
	for {
		if !time.Now().Before(cutBy) {
			for _, ep := range w.draining {
				if !ep.closed {
					w.cut(ep)
				}
			}
		}
		if w.active == 0 {
			if w.closesInFlight()+len(w.orphans) == 0 {
				break
			}
			if deadline.IsZero() {
				deadline = time.Now().Add(time.Second)
			} else if time.Now().After(deadline) {
				break
			}
		}
		progressed := C.gs_ucx_progress(w.cur.h) != 0
		w.reap()
		// Sleep on the event fd when nothing moved (1 ms at most, as
		// the deadlines above are checked each round), rather than spin
		// a core the peer, or this process's own exposure, may need.
		armed := !progressed && C.gs_ucx_worker_arm(w.cur.h) == C.UCS_OK
		efd := w.cur.efd
		w.mu.Unlock()
		if armed {
			C.gs_ucx_wait(efd, -1, 1)
		} else {
			runtime.Gosched()
		}
		w.mu.Lock()
	}
	for len(w.old) > 0 { // none left once no Do is active; see release
		w.destroy(w.old[0])
	}
	for _, r := range w.orphans {
		r.ep.users, r.ep.orph = 0, 0
		w.retire(r.ep) // rkeys go before their worker
	}
	C.gs_ucx_worker_destroy(w.cur.h)
	for _, r := range w.orphans {
		r.end(C.UCS_ERR_CANCELED)
	}
	for _, c := range w.closing {
		C.free(unsafe.Pointer(c.gs))
	}
	w.orphans, w.closing, w.draining = nil, nil, nil
	w.mu.Unlock()
	w.c.release()
}

// peerFailureAM reports whether resources hold a transport that carries
// active messages (which UCX needs to connect) and detects a dead peer:
// tcp and the verbs ones. Without one, asking for peer-failure handling
// fails (after UCX logs an error per lane), so the worker does not ask.
func peerFailureAM(resources []string) bool {
	for _, r := range resources {
		if tl, _, _ := strings.Cut(r, "/"); tcpOrVerbs(tl) {
			return true
		}
	}
	return false
}

func (w *Worker) opError(op *Op, d *desc, st C.ucs_status_t) error {
	return wire.Errorf(wire.ErrTransferFail, "ucx %s %#x+%d: %s", opName(op), d.base, op.Offset, statusString(st))
}

func opName(op *Op) string {
	if op.Write {
		return "put to"
	}
	return "get from"
}

func setErr(errs []error, i int, err error) {
	if errs[i] == nil {
		errs[i] = err
	}
}

func b2i(b bool) C.int {
	if b {
		return 1
	}
	return 0
}
