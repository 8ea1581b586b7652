// engine.go defines Engine, the client side of the data plane, with Peer, Op
// and Options: it picks shared memory or TCP per peer and runs batches.

package transfer

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gostore/gostore/gostore/wire"
)

// Peer is what the Engine needs to know about a segment it moves bytes
// into or out of.
type Peer struct {
	SegID        uint64
	HostID       string
	ShmPath      string
	TransferAddr string
	// Size of the segment. Do refuses ops outside it up front. 0 means
	// unknown: ranges are then checked by the shared mapping or the peer's
	// server, slice by slice, so a large op that crosses the end may be
	// partly written before it fails.
	Size uint64
	// Location is "" for host memory, "cuda:N" for a GPU segment, which a
	// same-host peer opens from its IPC handle (Options.OpenDevice).
	Location string
	IPC      []byte
	GPUPCI   string // the PCI bus id of a GPU segment's device
}

// PeerFromDesc builds a Peer from the master's description of a segment.
func PeerFromDesc(d wire.SegmentDesc) Peer {
	return Peer{SegID: d.ID, HostID: d.HostID, ShmPath: d.ShmPath, TransferAddr: d.TransferAddr, Size: d.Size,
		Location: d.Location, IPC: d.IPC, GPUPCI: d.GPUPCI}
}

// Op moves one object stored contiguously at Offset in the peer's segment to
// (Write) or from the caller's scatter list Bufs, len(Bufs) bytes in all. The
// caller owns Bufs; they must stay valid until Do returns and are not
// touched after it returns.
type Op struct {
	Peer   Peer
	Offset uint64
	Bufs   [][]byte
	Write  bool
}

// Options tune an Engine. Zero values mean the defaults.
type Options struct {
	// ForceTCP disables shared memory (the bindings set it from
	// GOSTORE_TRANSPORT=tcp; this package reads no environment).
	ForceTCP bool
	// StreamsPerPeer is the number of TCP connections kept per peer address.
	StreamsPerPeer int
	// SliceSize is the largest request one op is cut into on TCP; slices of
	// one op are spread over the streams and pipelined.
	SliceSize int
	// DialTimeout bounds connecting to a peer (on top of the ctx).
	DialTimeout time.Duration
	Log         *slog.Logger
	// OpenDevice maps same-host GPU segments; nil sends them over TCP.
	OpenDevice DeviceOpener
	// BeforeUnmap runs on a peer's shared mapping before it is unmapped,
	// once no copy uses it (the client unpins what it pinned there).
	BeforeUnmap func(mem []byte)
	// BeforeDeviceCopy runs on each caller buffer about to be copied to or
	// from a GPU segment (the client page-locks registered buffers).
	BeforeDeviceCopy func(buf []byte)
}

const (
	DefaultStreamsPerPeer = 4
	DefaultSliceSize      = 1 << 20
	DefaultDialTimeout    = 5 * time.Second
)

// Engine moves bytes between caller buffers and peer segments. It is safe
// for concurrent use.
type Engine struct {
	forceTCP bool
	streams  int
	slice    uint64
	dialTO   time.Duration
	log      *slog.Logger
	host     string
	shm      *peerMaps[[]byte]       // same-host segments, mapped
	ipc      *peerMaps[DeviceMemory] // same-host GPU segments, opened over IPC
	canIPC   bool                    // Options.OpenDevice was given
	// beforeDeviceCopy: Options.BeforeDeviceCopy, never nil.
	beforeDeviceCopy func([]byte)

	mu      sync.Mutex
	pools   map[string]*peerPool // by TransferAddr
	segAddr map[uint64]string    // SegID → TransferAddr, for Forget
	closed  bool
}

// NewEngine returns an Engine with opt's settings.
func NewEngine(opt Options) *Engine {
	e := &Engine{
		forceTCP: opt.ForceTCP,
		streams:  opt.StreamsPerPeer,
		slice:    uint64(opt.SliceSize),
		dialTO:   opt.DialTimeout,
		log:      opt.Log,
		host:     HostID(),
		pools:    map[string]*peerPool{},
		segAddr:  map[uint64]string{},
	}
	if e.streams <= 0 {
		e.streams = DefaultStreamsPerPeer
	}
	if opt.SliceSize <= 0 {
		e.slice = DefaultSliceSize
	}
	if e.dialTO <= 0 {
		e.dialTO = DefaultDialTimeout
	}
	if e.log == nil {
		e.log = slog.Default()
	}
	e.shm = newShmMaps(e.log, opt.BeforeUnmap)
	e.ipc = newIPCMaps(opt.OpenDevice, e.log)
	e.canIPC = opt.OpenDevice != nil
	e.beforeDeviceCopy = opt.BeforeDeviceCopy
	if e.beforeDeviceCopy == nil {
		e.beforeDeviceCopy = func([]byte) {}
	}
	return e
}

// PathFor returns "shm", "ipc" (a same-host GPU segment) or "tcp": the path
// Do takes for p now.
func (e *Engine) PathFor(p Peer) string {
	switch {
	case e.forceTCP || p.HostID != e.host:
		return "tcp"
	case p.Location != "":
		if len(p.IPC) > 0 && e.canIPC && !e.ipc.failed(p.SegID) {
			return "ipc"
		}
		return "tcp"
	case p.ShmPath == "" || e.shm.failed(p.SegID):
		return "tcp"
	}
	return "shm"
}

// Forget drops what is cached for a segment that is gone: its shared
// mapping (once no copy uses it) and, if no other known segment lives
// there, the connections to its transfer server.
func (e *Engine) Forget(segID uint64) {
	e.shm.forget(segID)
	e.ipc.forget(segID)
	e.mu.Lock()
	var pool *peerPool
	if addr, ok := e.segAddr[segID]; ok {
		delete(e.segAddr, segID)
		shared := false
		for _, a := range e.segAddr {
			if a == addr {
				shared = true
				break
			}
		}
		if !shared {
			pool = e.pools[addr]
			delete(e.pools, addr)
		}
	}
	e.mu.Unlock()
	if pool != nil {
		pool.close()
	}
}

// Mapping returns p's segment mapped into this process (a same-host peer
// whose memfd can be mapped), or ok false when p is reachable over TCP
// only. The memory stays mapped until the segment is forgotten (a transfer
// to it failed, or Forget) or the engine closes: callers that keep it
// longer than one operation accept that a dead peer takes it away.
func (e *Engine) Mapping(p Peer) (mem []byte, ok bool) {
	mem, release, ok := e.HostMapping(p)
	if ok {
		release()
	}
	return mem, ok
}

// HostMapping returns p's segment mapped into this process (a same-host
// peer's shared memory), held mapped until release is called; ok false
// when p is reached otherwise.
func (e *Engine) HostMapping(p Peer) (mem []byte, release func(), ok bool) {
	return lend(e, e.shm, p, "shm")
}

// DeviceMapping returns p's GPU segment opened in this process (a
// same-host peer's, through its IPC handle), held open until release is
// called; ok false when p is reached otherwise.
func (e *Engine) DeviceMapping(p Peer) (mem DeviceMemory, release func(), ok bool) {
	return lend(e, e.ipc, p, "ipc")
}

// lend acquires p's segment from maps when path is how the engine reaches
// p; the caller releases it.
func lend[M any](e *Engine, maps *peerMaps[M], p Peer, path string) (mem M, release func(), ok bool) {
	if e.PathFor(p) != path {
		return mem, nil, false
	}
	m, useTCP, err := maps.acquire(p)
	if useTCP || err != nil {
		return mem, nil, false
	}
	return m.mem, m.release, true
}

// Close fails transfers in flight with ErrTransferFail, closes every
// connection and unmaps every peer segment. Do after Close fails.
func (e *Engine) Close() {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return
	}
	e.closed = true
	pools := e.pools
	e.pools = map[string]*peerPool{}
	e.mu.Unlock()
	for _, p := range pools {
		p.close()
	}
	e.shm.forgetAll()
	e.ipc.forgetAll()
}

func (e *Engine) isClosed() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.closed
}

// pool returns the connection pool for addr, recording which segments live
// there.
func (e *Engine) pool(addr string, segIDs []uint64) (*peerPool, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, wire.Errorf(wire.ErrTransferFail, "transfer engine closed")
	}
	for _, id := range segIDs {
		e.segAddr[id] = addr
	}
	p := e.pools[addr]
	if p == nil {
		p = newPeerPool(e, addr)
		e.pools[addr] = p
	}
	return p, nil
}

// opLen returns the total length of op's buffers; false on overflow.
func opLen(op *Op) (uint64, bool) {
	var total uint64
	for _, b := range op.Bufs {
		n := uint64(len(b))
		if total > math.MaxUint64-n {
			return 0, false
		}
		total += n
	}
	return total, true
}

func transferErr(format string, args ...any) error {
	return wire.Errorf(wire.ErrTransferFail, format, args...)
}

// ctxErr is the error of an op abandoned because ctx ended: ErrTransferFail
// that also matches context.Canceled / DeadlineExceeded with errors.Is.
func ctxErr(ctx context.Context) error {
	return fmt.Errorf("%w: %w", wire.Errorf(wire.ErrTransferFail, "transfer abandoned"), context.Cause(ctx))
}

// Do runs ops concurrently and returns one entry per op: nil, or an error
// carrying a wire.Code (ErrInvalidParams for a range outside the peer
// segment, ErrTransferFail for I/O failures, cancellation included). Do
// returns when every op is done or ctx ends; either way the caller's buffers
// are no longer used.
func (e *Engine) Do(ctx context.Context, ops []Op) []error {
	errs := make([]error, len(ops))
	if len(ops) == 0 {
		return errs
	}
	if e.isClosed() {
		for i := range errs {
			errs[i] = transferErr("transfer engine closed")
		}
		return errs
	}
	if ctx.Err() != nil {
		for i := range errs {
			errs[i] = ctxErr(ctx)
		}
		return errs
	}
	var tcpIdx, shmIdx, ipcIdx []int
	for i := range ops {
		op := &ops[i]
		total, ok := opLen(op)
		if !ok {
			errs[i] = wire.Errorf(wire.ErrInvalidParams, "op %d: buffer lengths overflow", i)
			continue
		}
		if op.Peer.Size != 0 && !inRange(op.Offset, total, op.Peer.Size) {
			errs[i] = wire.Errorf(wire.ErrInvalidParams, "range [%d,+%d) outside segment %d of %d bytes",
				op.Offset, total, op.Peer.SegID, op.Peer.Size)
			continue
		}
		if total == 0 {
			continue
		}
		switch e.PathFor(op.Peer) {
		case "shm":
			shmIdx = append(shmIdx, i)
		case "ipc":
			ipcIdx = append(ipcIdx, i)
		default:
			tcpIdx = append(tcpIdx, i)
		}
	}

	// TCP first so the network works while this goroutine copies.
	calls := make([]*call, 0, 2)
	if c := e.startTCP(ctx, ops, tcpIdx); c != nil {
		calls = append(calls, c)
	}
	late := copyThrough(e.shm, ops, shmIdx, errs, nil, copyShm)
	late = copyThrough(e.ipc, ops, ipcIdx, errs, late, func(mem DeviceMemory, op *Op) error {
		for _, b := range op.Bufs {
			e.beforeDeviceCopy(b)
		}
		return CopyDevice(mem, op.Offset, op.Bufs, op.Write)
	})
	if c := e.startTCP(ctx, ops, late); c != nil {
		calls = append(calls, c)
	}

	// A broken pooled connection (peer restarted, stale stream) fails the
	// ops on it; they are retried once on fresh connections. Transfers are
	// idempotent, so a retry is safe.
	var retry []int
	for _, c := range calls {
		retry = c.wait(ctx, errs, retry)
	}
	if len(retry) > 0 && ctx.Err() == nil && !e.isClosed() {
		if c := e.startTCP(ctx, ops, retry); c != nil {
			c.wait(ctx, errs, nil)
		}
	}
	if ctx.Err() != nil {
		for i, err := range errs {
			if err != nil && wire.CodeOf(err) == wire.ErrTransferFail {
				errs[i] = ctxErr(ctx)
			}
		}
	}
	return errs
}

// copyThrough runs ops[idx...] with copy against their segments opened in
// maps, setting errs; it appends to late the ops whose segment cannot be
// opened (they go over TCP).
func copyThrough[M any](maps *peerMaps[M], ops []Op, idx []int, errs []error, late []int, copy func(M, *Op) error) []int {
	for _, i := range idx {
		m, useTCP, err := maps.acquire(ops[i].Peer)
		switch {
		case useTCP:
			late = append(late, i)
		case err != nil:
			errs[i] = err
		default:
			errs[i] = copy(m.mem, &ops[i])
			m.release()
		}
	}
	return late
}

// call tracks the TCP requests of one startTCP.
type call struct {
	left    atomic.Int64 // requests not finished, +1 while sending
	done    chan struct{}
	mu      sync.Mutex
	idx     []int
	errs    map[int]error
	noRetry map[int]bool
	conns   []*tconn // connections carrying requests of this call
}

// finish records the end of one request of op i. retry marks a failure of
// the connection rather than an answer of the peer.
func (c *call) finish(i int, err error, retry bool) {
	if err != nil {
		c.mu.Lock()
		if c.errs[i] == nil {
			c.errs[i] = err
		}
		if !retry {
			c.noRetry[i] = true
		}
		c.mu.Unlock()
	}
	if c.left.Add(-1) == 0 {
		close(c.done)
	}
}

// wait blocks until every request finished, abandoning them when ctx ends;
// it stores the ops' errors and appends the retryable ops to retry.
func (c *call) wait(ctx context.Context, errs []error, retry []int) []int {
	select {
	case <-c.done:
	case <-ctx.Done():
		cause := ctxErr(ctx)
		for _, tc := range c.conns {
			tc.abandon(c, cause)
		}
		<-c.done // abandon ends every request promptly
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, i := range c.idx {
		err := c.errs[i]
		errs[i] = err
		if err != nil && !c.noRetry[i] {
			retry = append(retry, i)
		}
	}
	return retry
}

// slices returns how op of total bytes is cut: n slices of size each, the
// last one shorter. Sizes are multiples of 4 KiB so copies stay aligned.
func (e *Engine) slices(total uint64) (n, each uint64) {
	if total <= e.slice {
		return 1, total
	}
	k := (total + e.slice - 1) / e.slice
	each = ((total+k-1)/k + 4095) &^ 4095
	return (total + each - 1) / each, each
}

// startTCP sends the TCP requests of ops[idx...] and returns the call that
// tracks them, nil if idx is empty.
func (e *Engine) startTCP(ctx context.Context, ops []Op, idx []int) *call {
	if len(idx) == 0 {
		return nil
	}
	c := &call{done: make(chan struct{}), idx: idx, errs: map[int]error{}, noRetry: map[int]bool{}}
	c.left.Store(1)
	defer c.finish(-1, nil, false) // the +1: done cannot close while sending

	// Group by peer address, keeping the batch order within each group.
	var addrs []string
	groups := map[string][]int{}
	nreq := 0
	for _, i := range idx {
		a := ops[i].Peer.TransferAddr
		if _, ok := groups[a]; !ok {
			addrs = append(addrs, a)
		}
		groups[a] = append(groups[a], i)
		total, _ := opLen(&ops[i])
		n, _ := e.slices(total)
		nreq += int(n)
	}
	slab := make([]tcpReq, 0, nreq)
	perSlot := make([][]*tcpReq, e.streams)
	for _, addr := range addrs {
		group := groups[addr]
		if addr == "" {
			for _, i := range group {
				c.left.Add(1)
				c.finish(i, transferErr("segment %d has no transfer address", ops[i].Peer.SegID), false)
			}
			continue
		}
		segIDs := make([]uint64, len(group))
		for k, i := range group {
			segIDs[k] = ops[i].Peer.SegID
		}
		pool, err := e.pool(addr, segIDs)
		if err != nil {
			for _, i := range group {
				c.left.Add(1)
				c.finish(i, err, false)
			}
			continue
		}
		// Consecutive SliceSize bytes share a stream: a large op spreads
		// over all streams, a batch of small ops rides one; concurrent
		// calls start on different streams.
		for s := range perSlot {
			perSlot[s] = perSlot[s][:0]
		}
		base := pool.rr.Add(1)
		var cum uint64
		for _, i := range group {
			op := &ops[i]
			total, _ := opLen(op)
			n, each := e.slices(total)
			pieces := make([][]byte, 0, int(n)+len(op.Bufs))
			bi, bo := 0, 0 // current buffer and offset in it
			for off := uint64(0); off < total; off += each {
				ln := min(each, total-off)
				start := len(pieces)
				for need := ln; need > 0; {
					b := op.Bufs[bi][bo:]
					if len(b) == 0 {
						bi, bo = bi+1, 0
						continue
					}
					if uint64(len(b)) > need {
						b = b[:need]
					}
					pieces = append(pieces, b)
					need -= uint64(len(b))
					bo += len(b)
				}
				slab = append(slab, tcpReq{call: c, opIdx: i, off: op.Offset + off, n: ln,
					bufs: pieces[start:len(pieces):len(pieces)]})
				r := &slab[len(slab)-1]
				if op.Write {
					r.op = opWrite
				} else {
					r.op = opRead
				}
				slot := (base + cum/e.slice) % uint64(e.streams)
				perSlot[slot] = append(perSlot[slot], r)
				cum += ln
			}
		}
		var dialErr error
		for slot, rs := range perSlot {
			if len(rs) == 0 {
				continue
			}
			c.left.Add(int64(len(rs)))
			if dialErr == nil {
				var tc *tconn
				if tc, dialErr = pool.get(ctx, slot); dialErr == nil {
					if err := tc.send(rs); err != nil {
						for _, r := range rs {
							c.finish(r.opIdx, err, true)
						}
					} else {
						c.conns = append(c.conns, tc)
					}
					continue
				}
			}
			for _, r := range rs {
				c.finish(r.opIdx, dialErr, false)
			}
		}
	}
	return c
}
