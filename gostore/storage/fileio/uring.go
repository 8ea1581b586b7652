package fileio

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/pawelgaczynski/giouring"
	"golang.org/x/sys/unix"
)

// uringPool is the io_uring backend: a pool of rings, each QueueDepth SQ
// entries with default flags. Every Engine call checks out one ring for its
// whole duration, so calls on different goroutines run in parallel on their
// own rings and no lock is held while I/O is in flight; the mutex only guards
// the pool bookkeeping. Rings are created lazily, up to max; beyond that a call
// waits for a ring to be returned. Idle rings are reused LIFO so a lightly
// loaded engine keeps touching the same few rings.
type uringPool struct {
	st  *stats
	max int

	mu     sync.Mutex
	cond   sync.Cond // a ring was returned or dropped, or the pool closed
	idle   []*uringRing
	live   int // rings checked out, idle, or being created
	closed bool
	fixed  *fixedRegion // set once by setFixed; rings register it lazily

	created        atomic.Int64 // rings ever created (tests)
	fallbackLogged atomic.Bool  // "no extra ring, using pread" logged
	registerLogged atomic.Bool  // "fixed-buffer registration failed" logged
}

// newURingPool creates the first ring and proves it works with a NOP, so New
// can fall back to pread before anyone relies on io_uring.
func newURingPool(st *stats) (*uringPool, error) {
	u, err := newRing(st)
	if err != nil {
		return nil, err
	}
	if err := u.probe(); err != nil {
		u.close()
		return nil, err
	}
	p := &uringPool{st: st, max: max(4, 2*runtime.GOMAXPROCS(0)), idle: []*uringRing{u}, live: 1}
	p.cond.L = &p.mu
	p.created.Add(1)
	return p, nil
}

func (p *uringPool) name() string { return "io_uring" }

// get checks out an idle ring, or creates one while under the cap, or waits.
// If creating a ring fails the call runs on pread instead of failing: io_uring
// worked at New, so this is resource exhaustion that the next call may not see.
func (p *uringPool) get() (runner, error) {
	p.mu.Lock()
	for {
		if p.closed {
			p.mu.Unlock()
			return nil, os.ErrClosed
		}
		if n := len(p.idle); n > 0 {
			u := p.idle[n-1]
			p.idle[n-1] = nil
			p.idle = p.idle[:n-1]
			reg := p.fixed
			p.mu.Unlock()
			p.useFixed(u, reg)
			return u, nil
		}
		if p.live < p.max {
			break
		}
		p.cond.Wait()
	}
	p.live++ // reserve the slot; create the ring without holding the lock
	reg := p.fixed
	p.mu.Unlock()
	u, err := newRing(p.st)
	if err != nil {
		p.mu.Lock()
		p.live--
		p.cond.Broadcast()
		p.mu.Unlock()
		logOnce(&p.fallbackLogged, "fileio: cannot create another io_uring ring, using pread/pwrite for this call", err)
		return preadRunner{st: p.st}, nil
	}
	p.created.Add(1)
	p.useFixed(u, reg)
	return u, nil
}

// put returns a ring to the pool, or closes it if it broke or the pool closed
// while it was out. The slot is released only after the ring is closed, so
// close, which waits for all slots, never returns while a ring still exists.
func (p *uringPool) put(r runner) {
	u, ok := r.(*uringRing)
	if !ok {
		return // pread fallback: holds no slot
	}
	p.mu.Lock()
	if u.broken == nil && !p.closed {
		p.idle = append(p.idle, u)
		p.cond.Signal()
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	u.close()
	p.mu.Lock()
	p.live--
	p.cond.Broadcast()
	p.mu.Unlock()
}

// setFixed records the region; each ring registers it on its next checkout.
func (p *uringPool) setFixed(mem []byte) {
	// Advise before any ring pins the pages: the SSD design keeps the staging
	// region on small pages, so THP never has to collapse or split memory the
	// kernel holds pinned. Best effort: shmem or heap memory may refuse it.
	_ = unix.Madvise(mem, unix.MADV_NOHUGEPAGE)
	reg := newFixedRegion(mem, fixedChunk)
	p.mu.Lock()
	p.fixed = reg
	p.mu.Unlock()
}

// useFixed registers reg on u the first time u is used after RegisterFixed.
// Failure (RLIMIT_MEMLOCK, memory the kernel will not pin, ...) is logged and
// leaves u on plain reads; it is never an I/O error.
func (p *uringPool) useFixed(u *uringRing, reg *fixedRegion) {
	if reg == nil || u.fixedTried {
		return
	}
	u.fixedTried = true
	if err := reg.register(u.ring); err != nil {
		logOnce(&p.registerLogged, "fileio: io_uring fixed-buffer registration failed, using plain reads", err)
		return
	}
	u.fixed = reg
}

// close closes the idle rings, fails waiting and later get calls, and waits
// until every checked-out ring has come back through put and been closed.
func (p *uringPool) close() error {
	p.mu.Lock()
	p.closed = true
	idle := p.idle
	p.idle = nil
	p.cond.Broadcast()
	p.mu.Unlock()
	for _, u := range idle {
		u.close()
	}
	p.mu.Lock()
	p.live -= len(idle)
	if len(idle) > 0 {
		p.cond.Broadcast() // a concurrent close may be waiting on these
	}
	for p.live > 0 {
		p.cond.Wait()
	}
	p.mu.Unlock()
	return nil
}

// uringRing is one ring, used by one Engine call at a time. Features used:
// IORING_OP_READ / READ_FIXED / WRITE / FSYNC (DATASYNC), and NOP for the
// probe. Not used: fixed files, SQPOLL, IOPOLL, WRITE_FIXED.
type uringRing struct {
	ring       *giouring.Ring
	st         *stats
	broken     error        // set after an unrecoverable ring error; the pool drops the ring
	fixed      *fixedRegion // registered on this ring; nil: plain reads only
	fixedTried bool
}

func newRing(st *stats) (*uringRing, error) {
	if probeHook != nil {
		if err := probeHook(); err != nil {
			return nil, err
		}
	}
	ring, err := giouring.CreateRing(QueueDepth)
	if err != nil {
		return nil, fmt.Errorf("io_uring_setup: %w", err)
	}
	return &uringRing{ring: ring, st: st}, nil
}

// probe runs one NOP through the ring.
func (u *uringRing) probe() error {
	sqe := u.ring.GetSQE()
	if sqe == nil {
		return errors.New("io_uring probe: no SQE")
	}
	sqe.PrepareNop()
	sqe.SetData64(0xfeed)
	if err := u.submit(); err != nil {
		return fmt.Errorf("io_uring probe submit: %w", err)
	}
	cqe, err := u.wait()
	if err != nil {
		return fmt.Errorf("io_uring probe wait: %w", err)
	}
	res, data := cqe.Res, cqe.UserData
	u.ring.CQESeen(cqe)
	if res != 0 || data != 0xfeed {
		return fmt.Errorf("io_uring probe: NOP completed with res=%d data=%#x", res, data)
	}
	return nil
}

func (u *uringRing) close() {
	if u.fixed != nil && u.broken == nil {
		// Unpin now rather than in the kernel's deferred ring teardown, so the
		// pages (and any locked-memory accounting) are released by the time
		// Engine.Close returns. Skipped on a broken ring: requests may still be
		// in flight and unregistering would wait for them.
		_, _ = u.ring.UnregisterBuffers()
	}
	u.ring.QueueExit()
	u.ring = nil
}

func transient(err error) bool {
	return err == syscall.EINTR || err == syscall.EAGAIN || err == syscall.EBUSY
}

func (u *uringRing) submit() error {
	for {
		_, err := u.ring.Submit()
		if err == nil || !transient(err) {
			return err
		}
	}
}

func (u *uringRing) wait() (*giouring.CompletionQueueEvent, error) {
	for {
		cqe, err := u.ring.WaitCQE()
		if err == nil && cqe != nil {
			return cqe, nil
		}
		if err != nil && !transient(err) {
			return nil, err
		}
	}
}

// submitHook, when set (tests), runs before each submit in run; a non-nil error
// is taken as a failed io_uring_enter (nothing submitted) and breaks the ring.
var submitHook func() error

// maxSubmit caps the bytes of one SQE. A variable so tests can force the
// resubmission path that short reads take.
var maxSubmit = maxChunk

// run keeps up to QueueDepth ops in flight, resubmitting the remainder of short
// transfers, until every op is complete or failed. Each round fills the
// submission queue, submits it, and reaps one completion.
func (u *uringRing) run(ops []*op) {
	if u.broken != nil {
		for _, o := range ops {
			o.err = u.broken
		}
		return
	}
	// Pin the buffers: the kernel holds raw addresses until completion, and
	// pinning also forces them off any goroutine stack (which could move).
	var pin runtime.Pinner
	defer pin.Unpin()
	r := &uringRun{u: u, ops: ops, queue: pinned(&pin, ops)}
	defer r.count()
	for len(r.queue) > 0 || r.inflight > 0 {
		queued := r.fill()
		if queued > 0 {
			if err := u.submitRound(); err != nil {
				// A failed io_uring_enter consumed none of this round's
				// SQEs: only the earlier rounds' requests are in flight.
				u.fail(fmt.Errorf("fileio: io_uring submit: %w", err), ops, r.inflight-queued)
				return
			}
		}
		if r.inflight == 0 {
			u.fail(errors.New("fileio: io_uring: no SQE available"), ops, 0)
			return
		}
		cqe, err := u.wait()
		if err != nil {
			u.fail(fmt.Errorf("fileio: io_uring wait: %w", err), ops, r.inflight)
			return
		}
		r.complete(cqe)
	}
}

// uringRun is one run's progress: the ops' indexes still to submit, how
// many are in flight, and the reads submitted fixed or plain. Only run's
// goroutine touches it.
type uringRun struct {
	u              *uringRing
	ops            []*op
	queue          []int
	inflight       int
	nfixed, nplain uint64
}

// pinned pins the buffers of the ops with something left to do and
// returns their indexes.
func pinned(pin *runtime.Pinner, ops []*op) []int {
	queue := make([]int, 0, len(ops))
	for i, o := range ops {
		if o.sync || o.done < len(o.buf) {
			if len(o.buf) > 0 {
				pin.Pin(unsafe.SliceData(o.buf))
			}
			queue = append(queue, i)
		}
	}
	return queue
}

// count adds the run's reads to the ring's stats.
func (r *uringRun) count() {
	if r.nfixed > 0 {
		r.u.st.fixedReads.Add(r.nfixed)
	}
	if r.nplain > 0 {
		r.u.st.plainReads.Add(r.nplain)
	}
}

// fill takes queued ops into free SQEs, up to QueueDepth in flight, and
// returns how many it took.
func (r *uringRun) fill() int {
	queued := 0
	for r.inflight < QueueDepth && len(r.queue) > 0 {
		sqe := r.u.ring.GetSQE()
		if sqe == nil {
			break
		}
		i := r.queue[0]
		r.queue = r.queue[1:]
		r.prepare(sqe, r.ops[i])
		sqe.SetData64(uint64(i))
		r.inflight++
		queued++
	}
	return queued
}

// prepare makes sqe o's next request: its datasync, or the next chunk of
// its transfer (at most maxSubmit bytes).
func (r *uringRun) prepare(sqe *giouring.SubmissionQueueEntry, o *op) {
	if o.sync {
		sqe.PrepareFsync(o.fd, giouring.FsyncDatasync)
		return
	}
	n := uint32(min(len(o.buf)-o.done, maxSubmit))
	addr := uintptr(unsafe.Pointer(&o.buf[o.done]))
	off := uint64(o.off + int64(o.done))
	switch {
	case o.write:
		sqe.PrepareWrite(o.fd, addr, n, off)
	default:
		// READ_FIXED takes the absolute address inside the
		// registered buffer; the index is re-derived for each
		// (re)submission, and the remainder of a read that fit
		// one chunk still does.
		if idx := r.u.fixed.index(addr, n); idx >= 0 {
			sqe.PrepareReadFixed(o.fd, addr, n, off, idx)
			r.nfixed++
		} else {
			sqe.PrepareRead(o.fd, addr, n, off)
			r.nplain++
		}
	}
	// giouring's prepare leaves the per-op flags of the slot's
	// previous user: after a datasync (flag 1) the kernel would
	// read RWF_HIPRI and refuse the read or write with EINVAL.
	sqe.OpcodeFlags = 0
}

// submitRound submits the SQEs filled (through submitHook first, in tests).
func (u *uringRing) submitRound() error {
	var err error
	if submitHook != nil {
		err = submitHook()
	}
	if err == nil {
		err = u.submit()
	}
	return err
}

// complete takes in cqe's result: its op is done, failed, or queued again
// for its remainder (a short transfer) or after a transient error.
func (r *uringRun) complete(cqe *giouring.CompletionQueueEvent) {
	i, res := int(cqe.UserData), cqe.Res
	r.u.ring.CQESeen(cqe)
	r.inflight--
	o := r.ops[i]
	switch {
	case res < 0:
		if e := syscall.Errno(-res); transient(e) {
			r.queue = append(r.queue, i)
		} else {
			o.err = e
		}
	case o.sync:
	case res == 0 && o.write:
		o.err = io.ErrShortWrite
	case res == 0:
		o.err = errEOF(o)
	default:
		o.done += int(res)
		if o.done < len(o.buf) {
			r.queue = append(r.queue, i)
		}
	}
}

// fail marks the ring broken after an unrecoverable error, tries to reap the
// requests still in flight (so the kernel is done with the buffers), and fails
// every unfinished op. The pool closes a broken ring when the call returns it.
func (u *uringRing) fail(err error, ops []*op, inflight int) {
	u.broken = err
	for ; inflight > 0; inflight-- {
		cqe, werr := u.wait()
		if werr != nil {
			break
		}
		u.ring.CQESeen(cqe)
	}
	for _, o := range ops {
		if o.err == nil && (o.sync || o.done < len(o.buf)) {
			o.err = err
		}
	}
}
