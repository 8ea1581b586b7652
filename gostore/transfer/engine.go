// engine.go defines Engine, the one place that decides how bytes move, with
// Peer, Op and Options, and Do, which routes a batch of ops to the
// transports.

package transfer

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gostore/gostore/gostore/auth"
	"github.com/gostore/gostore/gostore/grant"
	"github.com/gostore/gostore/gostore/ucx"
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
	// same-host peer opens from its IPC handle (Driver.OpenPeer).
	Location string
	IPC      []byte
	GPUPCI   string // the PCI bus id of a GPU segment's device
	// UCX is the owner's UCX exposure of the segment (ucx.Exposure.Desc),
	// empty when it runs none: reached over RouteUCX when set (Route).
	UCX []byte
}

// PeerFromDesc builds a Peer from the master's description of a segment.
func PeerFromDesc(d wire.SegmentDesc) Peer {
	return Peer{SegID: d.ID, HostID: d.HostID, ShmPath: d.ShmPath, TransferAddr: d.TransferAddr, Size: d.Size,
		Location: d.Location, IPC: d.IPC, GPUPCI: d.GPUPCI, UCX: d.UCX}
}

// Op moves one object stored contiguously at Offset in the peer's segment
// to (Write) or from the caller's scatter list. Where each part of the
// caller's memory lives is part of the op: Bufs holds the host parts, and
// each DevicePart in Device names a part on a GPU whose place in Bufs is
// a nil placeholder (no slice is ever formed over device memory). The op
// moves every part, len(Bufs[i]) or DevicePart.Size bytes each, in order.
// The caller owns the memory; it must stay valid until Do returns and is
// not touched after.
//
// Grant is the capability (gostore/grant, grant.Size bytes) the peer's
// transfer server asks for: from the master (the replicas of a put, a get
// or a task) or the segment's owner (an invitation into its memory). It
// must cover [Offset, Offset+len) for the op's direction (a write grant
// covers reads too); the TCP route
// sends it with every request, the local routes need none (the own
// segment is this process's; a same-host mapping cannot be policed).
type Op struct {
	Peer   Peer
	Offset uint64
	Bufs   [][]byte
	Device []DevicePart
	Write  bool
	Grant  []byte
}

// Options tune an Engine. Zero values mean the defaults.
type Options struct {
	// ForceTCP disables shared memory and CUDA IPC between processes (the
	// bindings set it from GOSTORE_TRANSPORT=tcp).
	ForceTCP bool
	// UCX, when set, is the initiator that reaches peers' segments their
	// owners exposed with UCX (RouteUCX). The caller owns it: it closes it
	// after the Engine.
	UCX *ucx.Worker
	// UCXCUDA: UCX's context has CUDA (ucx.Info.CUDA): device parts go to
	// it as GPU pointers instead of being staged.
	UCXCUDA bool
	// ForceUCX routes same-host peers with a UCX exposure over UCX too,
	// instead of shared memory or IPC (the bindings set it from
	// GOSTORE_TRANSPORT=ucx).
	ForceUCX bool
	// StreamsPerPeer is the number of TCP connections kept per peer address.
	StreamsPerPeer int
	// SliceSize is the largest request one op is cut into on TCP; slices of
	// one op are spread over the streams and pipelined.
	SliceSize int
	// LaneBytes: a TCP call to one peer of at most this many bytes takes
	// the lane (tcp_lane.go), on the calling thread; 0 means
	// DefaultLaneBytes, a negative value turns the lane off.
	LaneBytes int
	// LaneSpin is how long a lane read polls before it sleeps (0:
	// blockconn.DefaultSpin; negative: never polls).
	LaneSpin time.Duration
	// DialTimeout bounds connecting to a peer (on top of the ctx).
	DialTimeout time.Duration
	// Auth, when set, runs its handshake on every TCP connection to a
	// peer's Server (which must have the same Auth: SetAuth).
	Auth *auth.Auth
	Log  *slog.Logger
	// Driver reaches GPUs: device parts of ops, same-host GPU segments over
	// IPC, page-locking. nil: no GPU (ops with device parts fail, GPU
	// segments go over TCP).
	Driver Driver
	// BounceBytes sizes the pinned arena device parts are staged through
	// when no direct copy reaches their segment (0: DefaultBounceBytes).
	BounceBytes uint64
	// BeforeDeviceCopy runs on each host part about to be copied to or
	// from GPU memory (the client page-locks its registered buffers).
	BeforeDeviceCopy func(buf []byte)
	// Wrap, when set, wraps the transport of each route as the Engine is
	// built: tests put a fake in front that drops, delays or fails ops.
	Wrap func(Route, Transport) Transport
}

const (
	DefaultStreamsPerPeer = 4
	DefaultSliceSize      = 1 << 20
	DefaultDialTimeout    = 5 * time.Second
	DefaultBounceBytes    = 256 << 20
)

// Engine moves bytes between caller memory and segments: the own segment
// of this process, same-host peers' shared memory and GPU segments, and
// any peer over TCP. It is safe for concurrent use.
type Engine struct {
	forceTCP bool
	forceUCX bool
	ucx      *ucx.Worker // nil: no UCX route
	ucxCUDA  bool
	streams  int
	slice    uint64
	dialTO   time.Duration
	// laneBytes: Options.LaneBytes resolved; <= 0 turns the lane off.
	laneBytes int
	laneSpin  time.Duration // Options.LaneSpin as given
	auth      *auth.Auth
	log       *slog.Logger
	host      string
	driver    Driver
	pins      *Pins
	bounces   *bouncePool
	shm       *peerMaps[[]byte]       // same-host segments, mapped
	ipc       *peerMaps[DeviceMemory] // same-host GPU segments, opened over IPC
	// beforeDeviceCopy: Options.BeforeDeviceCopy, never nil.
	beforeDeviceCopy func([]byte)
	transports       [numRoutes]Transport
	stagedParts      atomic.Uint64 // device parts staged through the bounces
	routeOps         [numRoutes]atomic.Uint64

	ownMu sync.RWMutex
	own   ownSegment

	mu      sync.Mutex
	pools   map[string]*peerPool // by TransferAddr
	segAddr map[uint64]string    // SegID → TransferAddr, for Forget
	segUCX  map[uint64][]byte    // SegID → its UCX desc, for Forget
	closed  bool
}

// ownSegment is the segment this process contributes, copied to directly.
type ownSegment struct {
	id   uint64 // 0: none
	host []byte
	dev  DeviceMemory
}

// NewEngine returns an Engine with opt's settings.
func NewEngine(opt Options) *Engine {
	e := &Engine{
		forceTCP:  opt.ForceTCP,
		forceUCX:  opt.ForceUCX,
		ucx:       opt.UCX,
		ucxCUDA:   opt.UCXCUDA,
		streams:   opt.StreamsPerPeer,
		slice:     uint64(opt.SliceSize),
		dialTO:    opt.DialTimeout,
		laneBytes: opt.LaneBytes,
		laneSpin:  opt.LaneSpin,
		auth:      opt.Auth,
		log:       opt.Log,
		host:      HostID(),
		driver:    opt.Driver,
		pools:     map[string]*peerPool{},
		segAddr:   map[uint64]string{},
		segUCX:    map[uint64][]byte{},
	}
	if e.streams <= 0 {
		e.streams = DefaultStreamsPerPeer
	}
	if opt.SliceSize <= 0 {
		e.slice = DefaultSliceSize
	}
	if e.laneBytes == 0 {
		e.laneBytes = DefaultLaneBytes
	}
	if e.dialTO <= 0 {
		e.dialTO = DefaultDialTimeout
	}
	if e.log == nil {
		e.log = slog.Default()
	}
	if opt.BounceBytes == 0 {
		opt.BounceBytes = DefaultBounceBytes
	}
	e.pins = &Pins{driver: opt.Driver, log: e.log}
	e.bounces = &bouncePool{driver: opt.Driver, size: opt.BounceBytes}
	e.shm = newShmMaps(e.log, e.pins.drop)
	var open DeviceOpener
	if opt.Driver != nil {
		open = opt.Driver.OpenPeer
	}
	e.ipc = newIPCMaps(open, e.log)
	e.beforeDeviceCopy = opt.BeforeDeviceCopy
	if e.beforeDeviceCopy == nil {
		e.beforeDeviceCopy = func([]byte) {}
	}
	e.transports = [numRoutes]Transport{
		RouteOwn: ownTransport{e},
		RouteShm: mappedTransport[[]byte]{e, e.shm, e.copyShm},
		RouteIPC: mappedTransport[DeviceMemory]{e, e.ipc, e.copyIPC},
		RouteTCP: tcpTransport{e},
		RouteUCX: ucxTransport{e},
	}
	if opt.Wrap != nil {
		for r := range e.transports {
			e.transports[r] = opt.Wrap(Route(r), e.transports[r])
		}
	}
	return e
}

// SetOwn names the segment this process contributes: ops on segID copy
// straight to host (its memory) or dev (a GPU segment). Call it once the
// segment is mounted; a second call replaces the first.
func (e *Engine) SetOwn(segID uint64, host []byte, dev DeviceMemory) {
	e.ownMu.Lock()
	e.own = ownSegment{id: segID, host: host, dev: dev}
	e.ownMu.Unlock()
}

// IsOwn reports whether segID names the segment given to SetOwn.
func (e *Engine) IsOwn(segID uint64) bool {
	e.ownMu.RLock()
	defer e.ownMu.RUnlock()
	return segID != 0 && segID == e.own.id
}

// StagedParts counts the device parts staged through pinned host memory
// so far: parts no direct GPU copy could reach.
func (e *Engine) StagedParts() uint64 { return e.stagedParts.Load() }

// RouteOps counts the ops Do sent over route r so far.
func (e *Engine) RouteOps(r Route) uint64 {
	if r >= numRoutes {
		return 0
	}
	return e.routeOps[r].Load()
}

// Pins is the registry of host memory page-locked for GPU copies.
func (e *Engine) Pins() *Pins { return e.pins }

// Route returns how Do reaches p now.
func (e *Engine) Route(p Peer) Route {
	switch {
	case e.IsOwn(p.SegID):
		return RouteOwn
	case e.ucx != nil && len(p.UCX) > 0 && (e.forceUCX || p.HostID != e.host):
		return RouteUCX
	case e.forceTCP || p.HostID != e.host:
		return RouteTCP
	case p.Location != "":
		if len(p.IPC) > 0 && e.driver != nil && !e.ipc.failed(p.SegID) {
			return RouteIPC
		}
		return RouteTCP
	case p.ShmPath == "" || e.shm.failed(p.SegID):
		return RouteTCP
	}
	return RouteShm
}

// Forget drops what is cached for a segment that is gone: its shared
// mapping (once no copy uses it), its UCX endpoint and remote key (the
// ops in flight on that endpoint end with an error) and, if no other
// known segment lives there, the connections to its transfer server.
func (e *Engine) Forget(segID uint64) {
	e.shm.forget(segID)
	e.ipc.forget(segID)
	e.mu.Lock()
	desc, exposed := e.segUCX[segID]
	delete(e.segUCX, segID)
	e.mu.Unlock()
	if exposed && e.ucx != nil {
		e.ucx.Forget(desc)
	}
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
// whose memfd can be mapped, or the own host segment), or ok false when p
// is reached otherwise. The memory stays mapped until the segment is
// forgotten (a transfer to it failed, or Forget) or the engine closes:
// callers that keep it longer than one operation accept that a dead peer
// takes it away.
func (e *Engine) Mapping(p Peer) (mem []byte, ok bool) {
	switch e.Route(p) {
	case RouteOwn:
		e.ownMu.RLock()
		defer e.ownMu.RUnlock()
		return e.own.host, e.own.host != nil
	case RouteShm:
		m, useTCP, err := e.shm.acquire(p)
		if useTCP || err != nil {
			return nil, false
		}
		m.release()
		return m.mem, true
	}
	return nil, false
}

// Close fails transfers in flight with ErrTransferFail, closes every
// connection, unmaps every peer segment, unpins what it pinned and frees
// the staging arena. Do after Close fails.
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
	e.pins.dropAll()
	e.bounces.close()
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

// checkGrant refuses, before anything moves, an op whose grant cannot
// cover it: the TCP route frames a grant by its size (another length
// would put the stream out of step), and the server checks each slice of
// an op on its own, so an op only partly inside its grant would land in
// part. (Whether the grant is authentic, current and for the segment is
// the server's to say.)
func checkGrant(op *Op, total uint64) error {
	if len(op.Grant) == 0 {
		return nil
	}
	if op.Offset+total < op.Offset {
		return wire.Errorf(wire.ErrInvalidParams, "range [%d,+%d) wraps", op.Offset, total) // a bad range, grant or not
	}
	f, err := grant.Decode(op.Grant)
	if err != nil {
		return wire.Errorf(wire.ErrInvalidParams, "a grant of %d bytes: %v", len(op.Grant), err)
	}
	f.Expiry = math.MaxInt64
	if err := grant.Allows(f, grant.Request{Offset: op.Offset, N: total, Write: op.Write}, 0); err != nil {
		return wire.Errorf(wire.CodeOf(err), "range [%d,+%d) of segment %d: %v", op.Offset, total, op.Peer.SegID, err)
	}
	return nil
}

// opLen returns the total length of op's parts, host and device; false on
// overflow.
func opLen(op *Op) (uint64, bool) {
	var total uint64
	for _, b := range op.Bufs {
		n := uint64(len(b))
		if total > math.MaxUint64-n {
			return 0, false
		}
		total += n
	}
	for _, d := range op.Device {
		if total > math.MaxUint64-d.Size {
			return 0, false
		}
		total += d.Size
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
// segment or a bad device part, ErrTransferFail for I/O failures,
// cancellation included). Do returns when every op is done or ctx ends;
// either way the caller's memory is no longer used.
//
// Each op takes the route of its peer (see Route). TCP starts first so
// the network works while this goroutine copies the local routes; an op a
// local route cannot serve after all (a mapping that fails to open) goes
// over TCP. Device parts of an op on a route that cannot reach the GPU
// (TCP) are staged through pinned host memory around the transfer.
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
	var routes [numRoutes][]int
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
		if err := e.checkDevice(op); err != nil {
			errs[i] = err
			continue
		}
		if err := checkGrant(op, total); err != nil {
			errs[i] = err
			continue
		}
		if total == 0 {
			continue
		}
		r := e.Route(op.Peer)
		routes[r] = append(routes[r], i)
	}
	for r, idx := range routes {
		if len(idx) > 0 {
			e.routeOps[r].Add(uint64(len(idx)))
		}
	}

	var st staging // device parts staged for TCP and UCX; released on return
	defer st.release(e)
	tcpOps, tcpIdx := st.stage(e, ops, routes[RouteTCP], errs, nil)
	var waits []func() []int
	if len(tcpIdx) > 0 {
		waits = append(waits, e.transports[RouteTCP].Start(ctx, tcpOps, tcpIdx, errs))
	}
	if ucxOps, ucxIdx := st.stage(e, ops, routes[RouteUCX], errs, e.ucxDirect); len(ucxIdx) > 0 {
		// UCX's Do returns when its ops are done: beside local copies it
		// runs on a goroutine of its own, so both proceed at once.
		t := e.transports[RouteUCX]
		if len(routes[RouteOwn])+len(routes[RouteShm])+len(routes[RouteIPC]) == 0 {
			waits = append(waits, t.Start(ctx, ucxOps, ucxIdx, errs))
		} else {
			done := make(chan func() []int, 1)
			go func() { done <- t.Start(ctx, ucxOps, ucxIdx, errs) }()
			waits = append(waits, func() []int { return (<-done)() })
		}
	}
	var late []int
	for _, r := range [...]Route{RouteOwn, RouteShm, RouteIPC} {
		if len(routes[r]) > 0 {
			late = append(late, e.transports[r].Start(ctx, ops, routes[r], errs)()...)
		}
	}
	if len(late) > 0 {
		e.routeOps[RouteTCP].Add(uint64(len(late)))
		if tcpOps, tcpIdx = st.stage(e, ops, late, errs, nil); len(tcpIdx) > 0 {
			waits = append(waits, e.transports[RouteTCP].Start(ctx, tcpOps, tcpIdx, errs))
		}
	}
	for _, wait := range waits {
		wait()
	}
	if ctx.Err() != nil {
		for i, err := range errs {
			if err != nil && wire.CodeOf(err) == wire.ErrTransferFail {
				errs[i] = ctxErr(ctx)
			}
		}
	}
	st.finishReads(e, errs)
	return errs
}

// Staged runs fn over ops with their device parts staged in pinned host
// memory (copied off the GPU first for writes, onto it after fn for the
// reads fn reports done): for callers that move bytes another way (the SSD
// tier reading a disk copy). fn sees host-only ops and returns one error
// per op; Staged returns them, with staging failures in place.
func (e *Engine) Staged(ops []Op, fn func(host []Op) []error) []error {
	errs := make([]error, len(ops))
	idx := make([]int, 0, len(ops))
	for i := range ops {
		if err := e.checkDevice(&ops[i]); err != nil {
			errs[i] = err
			continue
		}
		idx = append(idx, i)
	}
	var st staging
	defer st.release(e)
	host, idx := st.stage(e, ops, idx, errs, nil)
	run := make([]Op, 0, len(idx))
	for _, i := range idx {
		run = append(run, host[i])
	}
	runIdx := idx
	if len(run) > 0 {
		res := fn(run)
		for k, i := range runIdx {
			if k < len(res) {
				errs[i] = res[k]
			} else {
				errs[i] = wire.Errorf(wire.ErrInternal, "staged op %d got no result", k)
			}
		}
	}
	st.finishReads(e, errs)
	return errs
}
