// ucx.go runs this client's side of the UCX route: the UCX context and the
// engine's worker (set up when the transport plan turned the route on),
// and each segment's exposure (segExposure), made afresh at each mount of
// the segment and revoked before its memory goes.

package client

import (
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"github.com/gostore/gostore/gostore/ucx"
	"github.com/gostore/gostore/gostore/wire"
)

// ucxRoute is the client's UCX state; nil when the route is off.
type ucxRoute struct {
	ctx    *ucx.Context
	worker *ucx.Worker
	info   ucx.Info // as the context opened its resources
}

// newUCXRoute makes the context on the plan's devices (striping large
// transfers over them) and the engine's worker.
func newUCXRoute(devices []string) (*ucxRoute, error) {
	opt := ucx.ContextOptions{Devices: devices}
	if len(devices) > 1 {
		opt.Rails = len(devices)
	}
	ctx, err := ucx.NewContext(opt)
	if err != nil {
		return nil, err
	}
	w, err := ctx.NewWorker()
	if err != nil {
		ctx.Close()
		return nil, err
	}
	return &ucxRoute{ctx: ctx, worker: w, info: ctx.Info()}, nil
}

// setupUCX turns the route on when the plan asks for it; a context that
// cannot be made turns it off, with the reason, and bytes between hosts
// move over TCP. It logs the one line that says which UCX moves the
// bytes, or why none does.
func (c *Client) setupUCX(log *slog.Logger) {
	t := &c.transport
	if t.Protocol == "ucx" {
		r, err := newUCXRoute(t.UCXDevices)
		if err != nil {
			t.Protocol = "tcp"
			t.Reason = fmt.Sprintf("the UCX context cannot be made (%v): between hosts, bytes move over TCP", err)
		} else {
			c.ucx, t.UCX = r, r.info
		}
	}
	if !ucxAsked(c.cfg) {
		return
	}
	u := t.UCX
	args := []any{"requested", t.Requested, "protocol", t.Protocol, "ucx_library", u.Library, "ucx_version", u.Version,
		"ucx_transports", strings.Join(u.Resources, ","), "ucx_devices", t.UCXDevices, "verbs", u.Verbs, "cuda", u.CUDA,
		"rdma_devices", t.RDMADevices, "unknown_devices", t.Unknown}
	if len(u.Limits) > 0 { // known UCX defects this process is exposed to (ucx.Info.Limits)
		args = append(args, "ucx_limits", u.Limits)
	}
	if t.Protocol != "ucx" {
		log.Warn("transport: UCX route off", append(args, "reason", t.Reason)...)
		return
	}
	if t.Reason != "" { // GOSTORE_TRANSPORT=ucx
		args = append(args, "note", t.Reason)
	}
	log.Info("transport: UCX route on", args...)
}

// ucxAsked reports whether setup asked for the UCX route: then setupUCX
// logs the transport line.
func ucxAsked(cfg Config) bool {
	p := strings.ToLower(cfg.Protocol)
	return p == "ucx" || p == "rdma" || cfg.ForceUCX
}

// expose registers the segment's memory with UCX for a mount: its desc
// goes into the mount's SegmentDesc. A GPU segment is exposed only where
// UCX has CUDA; nil where there is nothing to expose, or on failure
// (logged: peers then reach the segment over TCP).
func (r *ucxRoute) expose(base uintptr, size uint64, gpu bool, log *slog.Logger) *ucx.Exposure {
	mt := ucx.MemHost
	if gpu {
		if !r.info.CUDA {
			return nil
		}
		mt = ucx.MemCUDA
	}
	x, err := r.ctx.Expose(base, size, mt)
	if err != nil {
		log.Warn("segment not exposed with UCX: peers reach it over TCP", "err", err)
		return nil
	}
	return x
}

// close ends the worker (the engine is closed first), then the context;
// every segment's exposure was revoked before.
func (r *ucxRoute) close() {
	r.worker.Close()
	r.ctx.Close()
}

// errRevoked is a mount's answer once its segment was revoked: its memory
// is being or has been freed, so it is neither exposed nor mounted.
var errRevoked = wire.Errorf(wire.ErrInternal, "the segment was unmounted")

// segExposure is one segment's UCX exposure, owned by what owns the
// segment's memory: the Client for setup's segment, the extraSeg for a
// segment mounted at run time. Its lock orders every mount of the segment
// (the first, and the heartbeat's after a master restart or failover)
// against revoke, which the owner calls before it frees the memory: a
// mount holds the lock from exposing the memory until the master answered,
// and one that starts after revoke exposes nothing and mounts nothing, so
// no mount re-exposes memory that is being or has been freed. With the
// route off it still orders the mounts' reads of the memory's address
// against its release.
type segExposure struct {
	mu      sync.Mutex
	cur     *ucx.Exposure // what the master's desc of the segment names; nil: none
	revoked bool          // the memory is going: no mount any more
}

// mount runs one mount of the segment: describe gives its desc (the
// memory is alive while it runs), whose UCX field then names a fresh
// exposure of [Base, +Size) on r (nil: the route is off; gpu: the memory
// is a device's), and call mounts that desc at the master. After a
// success the new exposure replaces the old, which is closed (a peer
// holding the old desc gets an error, never bytes); after a failure the
// new one is closed. errRevoked, with nothing called, after revoke.
func (e *segExposure) mount(r *ucxRoute, gpu bool, log *slog.Logger,
	describe func() (wire.SegmentDesc, error), call func(wire.SegmentDesc) error) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.revoked {
		return errRevoked
	}
	desc, err := describe()
	if err != nil {
		return err
	}
	var x *ucx.Exposure
	if r != nil {
		if x = r.expose(uintptr(desc.Base), desc.Size, gpu, log); x != nil {
			desc.UCX = x.Desc()
		}
	}
	if err := call(desc); err != nil {
		if x != nil {
			x.Close()
		}
		return err
	}
	if e.cur != nil {
		e.cur.Close()
		// Only from here is the old desc refused: until now it still
		// reached this memory (tests wait for this line).
		log.Info("ucx: the segment's previous exposure is closed (remounted); its old descriptor is refused from now on",
			"base", desc.Base)
	}
	e.cur = x
	return nil
}

// revoke closes the exposure, waiting for a mount in progress, and ends
// the segment's mounts; the owner calls it before freeing the memory.
// Idempotent.
func (e *segExposure) revoke() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.revoked = true
	if e.cur != nil {
		e.cur.Close()
		e.cur = nil
	}
}
