// client.go defines Client and its configuration: the heartbeat, the
// rejoin after the master forgot the client, and close (New is setup.go).

package client

import (
	"context"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/gostore/gostore/gostore/auth"
	"github.com/gostore/gostore/gostore/clientmetrics"
	"github.com/gostore/gostore/gostore/gpu"
	"github.com/gostore/gostore/gostore/planclient"
	"github.com/gostore/gostore/gostore/rpc"
	"github.com/gostore/gostore/gostore/transfer"
	"github.com/gostore/gostore/gostore/wire"
)

// Config is what Python's setup() passes.
type Config struct {
	LocalHostname     string `json:"local_hostname"`
	MetadataServer    string `json:"metadata_server"`
	GlobalSegmentSize uint64 `json:"global_segment_size"`
	LocalBufferSize   uint64 `json:"local_buffer_size"`
	Protocol          string `json:"protocol"`
	RDMADevices       string `json:"rdma_devices"`
	MasterServerAddr  string `json:"master_server_addr"`
	// ClusterID names an HA cluster's keys on etcd (master_server_addr
	// "etcd://h1:2379;h2:2379"); the masters' --cluster_id.
	ClusterID        string `json:"cluster_id"`
	EnableSSDOffload bool   `json:"enable_ssd_offload"`
	SSDOffloadPath   string `json:"ssd_offload_path"`
	// SegmentLocation is where the contributed memory lives: "" or "cpu"
	// for host memory, "cuda:N" for device memory of GPU N.
	SegmentLocation string `json:"segment_location"`
	// TenantID is setup's tenant_id ("": "default"). Mooncake 0.3.13
	// isolates nothing by it (clients of different tenants see each
	// other's keys) and neither does gostore: it is logged and shown in
	// the client HTTP server's summary, nothing else.
	TenantID string `json:"tenant_id"`
	// HTTPPort is where the client HTTP server listens (0.0.0.0:HTTPPort;
	// /metrics, /health, /metrics/summary: gostore/clientmetrics); 0
	// turns it and the metrics off. A port that cannot be bound is
	// logged and setup goes on without the server, as Mooncake's does.
	HTTPPort int `json:"-"`
	// ForceTCP disables the shared-memory path (GOSTORE_TRANSPORT=tcp).
	ForceTCP bool `json:"-"`
	// ForceUCX turns the UCX route on whatever the protocol, and takes it
	// to same-host peers too instead of shared memory
	// (GOSTORE_TRANSPORT=ucx).
	ForceUCX bool `json:"-"`
	// SysfsRoot is where the topology is read ("": /sys and NVML;
	// GOSTORE_SYSFS_ROOT, for tests on fake trees).
	SysfsRoot string `json:"-"`
	// Getenv reads the MOONCAKE_OFFLOAD_* settings (nil: none is set; the
	// bindings pass one that sees what Python set after loading them).
	Getenv func(string) (string, bool) `json:"-"`
	// PutSpaceWait bounds how long a put refused for space waits for room
	// the master says is being freed (0: DefaultPutSpaceWait; negative:
	// never wait).
	PutSpaceWait time.Duration `json:"-"`
	// PingInterval is how often the client tells the master it is alive
	// (0: DefaultPingInterval; GOSTORE_PING_INTERVAL_MS).
	PingInterval time.Duration `json:"-"`
	// PingTimeout bounds one ping: a ping unanswered that long makes
	// Health 2, and every call fails at once (ErrMasterGone) until a
	// ping is answered again (0: DefaultPingTimeout;
	// GOSTORE_PING_TIMEOUT_MS).
	PingTimeout time.Duration `json:"-"`
	// RPCTimeout bounds one API call end to end: every RPC and transfer
	// it waits on (0: DefaultRPCTimeout; negative: no bound; Mooncake's
	// MC_RPC_TIMEOUT_MS, setup's rpc_timeout_ms).
	RPCTimeout time.Duration `json:"-"`
	// CloseTimeout bounds Close: half of it waiting for the calls in
	// flight (then they are ended), the rest telling the master this
	// client left (0: DefaultCloseTimeout; GOSTORE_CLOSE_TIMEOUT_MS).
	CloseTimeout time.Duration `json:"-"`
	// InterruptMain makes the calls of the process's main thread end at
	// InterruptMain (the bindings call it on SIGINT). It costs each call
	// an OnMainThread.
	InterruptMain bool `json:"-"`
	// OnMainThread tells whether the caller runs on the process's main
	// thread, for InterruptMain (nil: the package's OnMainThread, one
	// system call).
	OnMainThread func() bool `json:"-"`
	// Setup, when set, ends New's waits early when it ends (the bindings
	// end it on SIGINT for a setup on the main thread); they are bounded
	// by SetupTimeout in any case.
	Setup context.Context `json:"-"`
	// GPUBounceBytes sizes the pinned arena device parts are staged
	// through when no direct copy reaches their replica (0:
	// transfer.DefaultBounceBytes; GOSTORE_GPU_BOUNCE_BYTES).
	GPUBounceBytes uint64 `json:"-"`
	// LentRetainBytes bounds the memory GetBuffers lent beyond the local
	// buffer that stays mapped once handed back, for the next loan of the
	// same size class (0: unmapped at once; GOSTORE_HEAP_RETAIN_BYTES).
	LentRetainBytes uint64 `json:"-"`
	// SpinWait is how long a blocking read of a master RPC or a small TCP
	// transfer polls before it sleeps (0: blockconn.DefaultSpin; negative:
	// never; GOSTORE_SPIN_US).
	SpinWait time.Duration `json:"-"`
	// ServeSpin is how long this client's transfer servers poll a hot
	// connection for its next request after an answer (0:
	// blockconn.DefaultServerSpin; negative: never; GOSTORE_SERVE_SPIN_US).
	ServeSpin time.Duration `json:"-"`
	// ReadDoneWait is how long the ReadDone of a read of at most 1 MiB
	// waits for this client's next call to the master to carry it, before
	// it goes on its own (0: 500 µs; negative: it is written at once, as
	// the read ends). Another client's upsert in place of the object may
	// see it busy (-714) that much longer.
	ReadDoneWait time.Duration `json:"-"`
	// WrapTransport, when set, wraps each route of the transfer engine
	// (transfer.Options.Wrap): how tests put a failing or slow transport
	// under a real client.
	WrapTransport func(transfer.Route, transfer.Transport) transfer.Transport `json:"-"`
	// RPC tunes the connections to the master and to disk holders (the
	// bindings set Netpoll once the process runs a master itself).
	RPC rpc.ClientOptions `json:"-"`
	// Auth names the files the client authenticates with, to the master
	// and to peers, and that peers must authenticate to it with (the
	// same secret, or certificates of the same CA); none: off, which
	// New allows only for a transfer server on loopback unless
	// AllowInsecure.
	Auth          auth.Options `json:"-"`
	AllowInsecure bool         `json:"-"`
}

// DefaultPutSpaceWait is Config.PutSpaceWait's default.
const DefaultPutSpaceWait = 5 * time.Second

// Port range for local_hostname without a port, as in Mooncake.
const (
	portLow  = 12300
	portHigh = 14300
)

// DefaultPingInterval is Config.PingInterval's default: well below the
// smallest client_ttl (1 s) a deployment may set.
const DefaultPingInterval = 300 * time.Millisecond

// Client is one store client. Its methods are safe for concurrent use.
//
// Client orchestrates: it is set up by New (setup.go), keeps itself known
// to the master (heartbeat; rejoin remounts what the master forgot: the
// own segment, own.go, and those mounted at run time) and closes it all;
// the work of the API calls is done by objects of their own, which it
// builds and hands out: Reads (gets), Writes (puts), Sessions (ranged
// puts and gets), Tasks (replica copies and moves), Keys (calls about
// objects that move no bytes), Buffers (the caller's memory) and Segments
// (segments mounted at run time). What they
// all share is core, embedded here. Client takes no lock of its own but
// core's inFlight, which Close takes to wait for the calls in flight.
type Client struct {
	core

	reads    *Reads
	ends     *readEnds // ReadDone of ended reads (readdone.go)
	writes   *Writes
	sessions *Sessions
	tasks    *Tasks
	keys     *Keys
	bufs     *Buffers
	planEnds keyBatch // PutEnd of committed plans

	segs  *Segments          // segments mounted at run time (segments.go)
	own   *ownSegment        // the segment setup contributes (own.go)
	plans *planclient.Client // the plan API (Plans)

	transport TransportInfo

	http *clientmetrics.Server // nil when not serving
}

// parseLocation reads a segment location: -1 for host memory ("" or
// "cpu"), N for "cuda:N".
func parseLocation(loc string) (int, error) {
	switch l := strings.ToLower(strings.TrimSpace(loc)); {
	case l == "" || l == "cpu":
		return -1, nil
	case strings.HasPrefix(l, "cuda:"):
		if n, err := strconv.Atoi(l[len("cuda:"):]); err == nil && n >= 0 {
			return n, nil
		}
	}
	return 0, wire.Errorf(wire.ErrInvalidParams, "segment_location %q: want \"cpu\" or \"cuda:N\"", loc)
}

// openPeerDevice maps a same-host peer's GPU segment from its IPC handle,
// on the device this process numbers as the peer's GPU (found by PCI bus
// id: the two may see different CUDA_VISIBLE_DEVICES).
func openPeerDevice(p transfer.Peer) (transfer.DeviceMemory, error) {
	dev, err := parseLocation(p.Location)
	if err != nil || dev < 0 || len(p.IPC) != len(gpu.IPCHandle{}) {
		return nil, wire.Errorf(wire.ErrTransferFail, "segment %d: location %q with a %d-byte IPC handle", p.SegID, p.Location, len(p.IPC))
	}
	if p.GPUPCI != "" {
		dev = -1
		for _, d := range gpu.Probe().Devices {
			if strings.EqualFold(d.PCI, p.GPUPCI) {
				dev = d.Index
			}
		}
		if dev < 0 {
			return nil, wire.Errorf(wire.ErrTransferFail, "segment %d: its GPU %s is not visible here", p.SegID, p.GPUPCI)
		}
	}
	var h gpu.IPCHandle
	copy(h[:], p.IPC)
	return gpu.OpenSegment(dev, h, p.Size)
}

// Reads is the client's read side (gets).
func (c *Client) Reads() *Reads { return c.reads }

// Writes is the client's write side (puts and upserts).
func (c *Client) Writes() *Writes { return c.writes }

// Sessions is the client's ranged writes and reads.
func (c *Client) Sessions() *Sessions { return c.sessions }

// Tasks is the client's replica tasks.
func (c *Client) Tasks() *Tasks { return c.tasks }

// Keys is the client's calls about objects that move no bytes.
func (c *Client) Keys() *Keys { return c.keys }

// Buffers is the caller's memory as the zero-copy calls see it.
func (c *Client) Buffers() *Buffers { return c.bufs }

// Segments is the segments the client mounts at run time.
func (c *Client) Segments() *Segments { return c.segs }

// heartbeat pings the master; an unknown answer (the master restarted or
// expired us) remounts the segment so the pool gets the memory back.
func (c *Client) heartbeat() {
	defer c.wg.Done()
	t := time.NewTicker(c.cfg.PingInterval)
	defer t.Stop()
	lastPrune := time.Now()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(c.life, c.cfg.PingTimeout)
		var resp wire.PingResp
		err := c.master.Call(ctx, wire.OpPing, &wire.PingReq{ClientID: c.id}, &resp)
		if err == nil {
			c.tenanted.Store(resp.MultiTenants) // a failover may bring a master with or without tenants
		}
		if err == nil && !resp.Known && !c.closed.Load() {
			err = c.rejoin(ctx)
		}
		if err == nil && time.Since(lastPrune) >= peerPruneInterval {
			lastPrune = time.Now()
			c.prunePeers(ctx)
		}
		cancel()
		if err == nil && resp.OffloadWork && c.ssd != nil {
			c.ssd.Kick()
		}
		if err == nil && len(resp.Tasks) > 0 {
			c.tasks.runAssigned(resp.Tasks)
		}
		if was := c.healthy.Swap(err == nil); was != (err == nil) {
			c.log.Warn("master reachability changed", "reachable", err == nil, "err", err)
		}
	}
}

// rejoin brings back what a master that forgot us (it restarted, or we
// were silent past client_ttl) lost: our segment and our SSD copies.
func (c *Client) rejoin(ctx context.Context) error {
	if c.own.server != nil {
		c.log.Warn("master does not know this client any more; remounting the segment", "hostname", c.hostname)
		if err := c.own.mount(ctx); err != nil {
			return err
		}
	}
	if err := c.segs.remountExtra(ctx); err != nil {
		return err
	}
	if c.ssd != nil && !c.ssd.Unmounted() {
		c.ssd.RecoverSoon()
	}
	return nil
}

// Hostname is this client's segment name, "host:port".
func (c *Client) Hostname() string { return c.hostname }

// ID is the client's identity at the master.
func (c *Client) ID() string { return c.id }

// Health is 0 when the last heartbeat reached the master, 2 otherwise, and 1
// after Close.
func (c *Client) Health() int {
	switch {
	case c.closed.Load():
		return 1
	case c.healthy.Load():
		return 0
	default:
		return 2
	}
}

// Close unmounts the segments (objects living only there disappear), stops
// the heartbeat and the transfer server, and releases memory. Idempotent.
// It returns within about Config.CloseTimeout: calls in flight get half of
// it to end (then they are ended, with RPC_FAIL), the master the rest to
// hear that this client left; a master known gone (Health 2) is not told.
func (c *Client) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	bound := c.cfg.CloseTimeout
	deadline := time.Now().Add(bound)
	gone := !c.healthy.Load()
	if gone {
		c.scopes.end(errClosing)
	}
	ending := time.AfterFunc(bound/2, func() { c.scopes.end(errClosing) })
	c.inFlight.Lock() // wait for the calls in flight; new ones see closed
	defer c.inFlight.Unlock()
	ending.Stop()
	c.scopes.end(errClosing)
	if gone {
		c.log.Warn("closing while the master does not answer; it drops this client's segment after client_ttl")
	} else {
		// Leaving unmounts the segment at once and keeps the master from
		// counting this client as expired a client_ttl later. Committed
		// plans and ended reads are told first, while their objects
		// still exist.
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		c.planEnds.flush(ctx, c.master, c.id, c.log)
		if err := c.master.NotifyFlush(ctx); err != nil {
			c.log.Debug("ReadDone answers not read", "err", err)
		}
		c.ends.readsDone.flush(ctx, c.master, c.id, c.log)
		err := c.master.Call(ctx, wire.OpClientLeave, &wire.LeaveReq{ClientID: c.id}, nil)
		cancel()
		if err != nil {
			c.log.Warn("could not tell the master this client left; it drops the segment after client_ttl", "err", err)
		}
	}
	c.release()
	c.log.Info("client closed", "hostname", c.hostname)
	return nil
}

func (c *Client) release() {
	c.closed.Store(true)
	c.scopes.end(errClosing)
	c.endLife()
	select {
	case <-c.stop:
	default:
		close(c.stop)
	}
	if c.http != nil {
		c.http.Close()
		c.log.Info("client HTTP server stopped", "port", c.cfg.HTTPPort)
	}
	if c.reads.disk != nil {
		c.reads.disk.Close()
	}
	if c.own.server != nil {
		c.own.server.Close()
	}
	c.segs.closeExtra()
	c.wg.Wait()
	if c.ssd != nil {
		c.ssd.Close() // before the segment its offloads read goes away
	}
	c.engine.Close()        // unpins the own segment and registered buffers too
	c.own.exposure.revoke() // before the segment's memory goes
	if c.ucx != nil {
		c.ucx.close() // after every segment's exposure (closeExtra revoked theirs)
	}
	c.master.Close()
	if c.own.seg != nil {
		c.own.seg.Close()
	}
	if c.own.devSeg != nil {
		c.own.devSeg.Close()
	}
	if c.staging != nil {
		c.staging.close()
	}
}

func addrOf(b []byte) uintptr {
	if len(b) == 0 {
		return 0
	}
	return uintptr(unsafe.Pointer(&b[0]))
}
