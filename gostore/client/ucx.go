// ucx.go runs this client's side of the UCX route: the UCX context and the
// engine's worker (set up when the transport plan turned the route on),
// and the exposure of the segment, made afresh at each mount.

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

	mu  sync.Mutex    // one mount at a time (setup, then the heartbeat)
	cur *ucx.Exposure // what the master's desc of the segment names
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

// mounted makes x the exposure peers reach (the mount that carried its
// desc succeeded) and closes the one before: a peer holding the old desc
// gets an error, never bytes.
func (r *ucxRoute) mounted(x *ucx.Exposure) {
	old := r.cur
	r.cur = x
	if old != nil && old != x {
		old.Close()
	}
}

// close ends the exposure, then the worker (the engine is closed first),
// then the context.
func (r *ucxRoute) close() {
	r.mu.Lock()
	r.mounted(nil)
	r.mu.Unlock()
	r.worker.Close()
	r.ctx.Close()
}

// ucxDescOf fills desc.UCX for a mount of the segment at base, size bytes;
// done (nil error or not) reports the mount's outcome: the new exposure
// replaces the old one after a success, and is closed after a failure.
func (c *Client) ucxDescOf(desc *wire.SegmentDesc, base uintptr, size uint64, gpu bool) (done func(error)) {
	r := c.ucx
	if r == nil {
		return func(error) {}
	}
	r.mu.Lock()
	x := r.expose(base, size, gpu, c.log)
	if x != nil {
		desc.UCX = x.Desc()
	}
	return func(err error) {
		defer r.mu.Unlock()
		if err == nil {
			r.mounted(x)
		} else if x != nil {
			x.Close()
		}
	}
}
