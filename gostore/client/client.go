// client.go defines Client: configuration, setup, heartbeat and close.

package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gostore/gostore/gostore/auth"
	"github.com/gostore/gostore/gostore/clientmetrics"
	"github.com/gostore/gostore/gostore/gpu"
	"github.com/gostore/gostore/gostore/internal/burstlog"
	"github.com/gostore/gostore/gostore/master/ha"
	"github.com/gostore/gostore/gostore/memlimit"
	"github.com/gostore/gostore/gostore/planclient"
	"github.com/gostore/gostore/gostore/rpc"
	"github.com/gostore/gostore/gostore/ssdtier"
	"github.com/gostore/gostore/gostore/storage"
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
type Client struct {
	cfg      Config
	log      *slog.Logger
	id       string
	hostname string // host:port, the segment name
	// bindHost is where this client's servers listen when that is not
	// local_hostname's host ("": it is): loopback for a one-host pool
	// without authentication (listen.go).
	bindHost  string
	master    *rpc.Client
	engine    *transfer.Engine
	peers     peerCache
	buffers   registry
	staging   *staging
	readsDone keyBatch // ReadDone of ended reads
	// laterReads: keys whose ReadDone waits for the next call (get.go);
	// readDoneAlone counts the gets that sent a waiting one first, on
	// its own (for tests)
	laterReads    laterReads
	readDoneAlone atomic.Int64
	spots         spots // where single-key gets last found their objects (spots.go)
	// specReads counts reads from a spot, specHits those the master's
	// answer confirmed (for tests and metrics).
	specReads, specHits atomic.Uint64
	planEnds            keyBatch     // PutEnd of committed plans
	noSpace             burstlog.Log // puts refused for space
	sess                sessions     // open put and get sessions
	diskReads           atomic.Int64 // batches read from SSD tiers (DiskReads)
	// spaceStalledAt is 1 + the master's progress count at which a write
	// last gave up waiting for room that did not come (0: none): later
	// writes seeing the same count do not wait again.
	spaceStalledAt atomic.Uint64

	extra  extraSegs              // segments mounted at run time (segments.go)
	seg    *transfer.LocalSegment // nil for a pure consumer or a GPU segment
	devSeg *gpu.Segment           // the segment when it lives on a GPU
	server *transfer.Server
	auth   *auth.Auth         // nil: off; every server above and every dial uses it
	ssd    *ssdtier.Tier      // nil without enable_ssd_offload
	disk   *ssdtier.Reader    // reads disk copies, ours or other clients'
	plans  *planclient.Client // the plan API (Plans)

	transport TransportInfo
	ucx       *ucxRoute   // nil: the UCX route is off
	exposure  segExposure // the setup segment's UCX exposure (ucx.go)

	metrics *clientmetrics.Metrics // nil with HTTPPort 0
	http    *clientmetrics.Server  // nil when not serving

	healthy   atomic.Bool
	closed    atomic.Bool
	scopes    scopes     // the parents of the calls' contexts (calls.go)
	unsure    unsureKeys // writes ended before their revoke (put.go)
	masterLog masterLog  // calls the master did not answer
	// life ends when the client is released: the heartbeat's pings.
	life    context.Context
	endLife context.CancelFunc
	// inFlight is read-held by every call that may touch segment or caller
	// memory; Close takes it to wait for them before unmapping anything, so
	// a close from one Python thread never pulls memory from under another.
	inFlight sync.RWMutex
	stop     chan struct{}
	wg       sync.WaitGroup
}

// New connects a client as described by cfg: it mounts a segment of
// GlobalSegmentSize bytes (none when 0) and starts the heartbeat.
func New(cfg Config, log *slog.Logger) (*Client, error) {
	if log == nil {
		log = slog.Default()
	}
	if err := validate(&cfg); err != nil {
		log.Error("setup rejected", "err", err)
		return nil, err
	}
	if err := checkMemory(cfg); err != nil {
		log.Error("setup rejected", "err", err)
		return nil, err
	}
	if cfg.PutSpaceWait == 0 {
		cfg.PutSpaceWait = DefaultPutSpaceWait
	}
	if cfg.PingInterval <= 0 {
		cfg.PingInterval = DefaultPingInterval
	}
	if cfg.PingTimeout <= 0 {
		cfg.PingTimeout = DefaultPingTimeout
	}
	if cfg.RPCTimeout == 0 {
		cfg.RPCTimeout = DefaultRPCTimeout
	}
	if cfg.CloseTimeout <= 0 {
		cfg.CloseTimeout = DefaultCloseTimeout
	}
	if cfg.OnMainThread == nil {
		cfg.OnMainThread = OnMainThread
	}
	if cfg.TenantID == "" {
		cfg.TenantID = "default"
	}
	var metrics *clientmetrics.Metrics
	if cfg.HTTPPort != 0 {
		metrics = clientmetrics.New(clientmetrics.Options{Tenant: cfg.TenantID})
		cfg.RPC.Observe = chainObservers(cfg.RPC.Observe, metrics.RPC)
	}
	log.Debug("setting up", "local_hostname", cfg.LocalHostname, "master", cfg.MasterServerAddr,
		"segment", cfg.GlobalSegmentSize, "location", cfg.SegmentLocation, "buffer", cfg.LocalBufferSize,
		"protocol", cfg.Protocol, "ssd", cfg.EnableSSDOffload, "ssd_path", cfg.SSDOffloadPath,
		"force_tcp", cfg.ForceTCP, "put_space_wait", cfg.PutSpaceWait, "tenant_id", cfg.TenantID, "http_port", cfg.HTTPPort)
	c := &Client{cfg: cfg, log: log.With("component", "client"), stop: make(chan struct{}), metrics: metrics}
	c.scopes.init()
	c.life, c.endLife = context.WithCancel(context.Background())
	c.masterLog = masterLog{log: c.log, bound: cfg.RPCTimeout}
	var err error
	if c.transport, err = discoverTransport(cfg); err != nil {
		log.Error("setup rejected: the host's topology cannot be read", "root", cfg.SysfsRoot, "err", err)
		return nil, wire.Errorf(wire.ErrInvalidParams, "topology under %q: %v", cfg.SysfsRoot, err)
	}
	if t := c.transport; (t.Reason != "" || len(t.Unknown) > 0) && !ucxAsked(cfg) {
		log.Warn("transport", "requested", t.Requested, "protocol", t.Protocol, "rdma_devices", t.RDMADevices,
			"unknown_devices", t.Unknown, "reason", t.Reason)
	}
	guard, err := auth.New(cfg.Auth)
	if err != nil {
		log.Error("setup rejected", "err", err)
		return nil, err
	}
	c.auth, cfg.RPC.Auth = guard, guard
	c.id = newClientID()
	if rest, ok := strings.CutPrefix(cfg.MasterServerAddr, "etcd://"); ok {
		// An HA cluster: every new connection goes to the current leader,
		// as etcd names it (a failover moves it).
		hopts := ha.Options{Endpoints: etcdEndpoints(rest), Prefix: "/gostore/" + cfg.ClusterID + "/master/"}
		var known atomic.Value // the last leader found: used while etcd cannot answer at all
		cfg.RPC.Resolve = func(ctx context.Context) (string, error) {
			addr, err := ha.CurrentLeader(ctx, hopts)
			if err == nil && addr != "" {
				known.Store(addr)
				return addr, nil
			}
			if last, ok := known.Load().(string); ok {
				return last, nil
			}
			if err == nil {
				// Said in full: a cluster id that differs from the masters'
				// --cluster_id looks exactly like a cluster with no master.
				err = fmt.Errorf("no master leads cluster_id %q (etcd prefix %s): if the masters run with another "+
					"--cluster_id, give the client theirs (setup's cluster_id or MC_STORE_CLUSTER_ID)",
					cfg.ClusterID, hopts.Prefix)
			}
			return addr, err
		}
	}
	if cfg.RPC.Spin == 0 {
		cfg.RPC.Spin = cfg.SpinWait
	}
	mopt := cfg.RPC // the master's calls only: disk holders are not the master
	mopt.Observe = chainObservers(mopt.Observe, c.masterLog.observe)
	c.master = rpc.NewClientWith(cfg.MasterServerAddr, mopt)
	c.setupUCX(log)
	topt := transfer.Options{Log: c.log, ForceTCP: cfg.ForceTCP, Driver: gpuDriver{}, Auth: guard,
		BounceBytes: cfg.GPUBounceBytes, BeforeDeviceCopy: c.pinRegistered, Wrap: cfg.WrapTransport,
		LaneSpin: cfg.SpinWait}
	if c.ucx != nil {
		topt.UCX, topt.UCXCUDA, topt.ForceUCX = c.ucx.worker, c.ucx.info.CUDA, cfg.ForceUCX
	}
	c.engine = transfer.NewEngine(topt)
	c.peers.init(c.engine)
	c.plans = planclient.New(clientHost{c}, c.log)
	// ReadDone of a small read rides on the client's next call to the
	// master (rpc.Client.NotifyLater: no write of its own, no answer
	// awaited), or goes on its own after Config.ReadDoneWait; readsDone sends
	// what that could not take. A GetReplicas of a key whose ReadDone
	// waits sends it first, on its own: carried with it, a continuously
	// read object stayed busy for good, starving upserts (its reader
	// count never reached 0 between two gets). Measured alternatives: a
	// goroutine woken per get cost a 4 KiB get over TCP ~20 us; a sender
	// polling for ended reads (every 200 us or 2 ms) cost 16 MiB copies
	// over shared memory 15-20 %.
	c.readsDone.init(wire.OpReadDone, 0, nil)
	c.planEnds.init(wire.OpPutEnd, planclient.CommitEndDelay, c.plans.CommitsEnded)
	ok, known := false, false
	setupCtx := cfg.Setup
	if setupCtx == nil {
		setupCtx = context.Background()
	}
	ctx, cancel := context.WithTimeout(setupCtx, SetupTimeout)
	defer cancel()
	defer func() {
		if ok {
			return
		}
		if known { // the master counts us from the first ping: say we are gone
			c.master.Call(ctx, wire.OpClientLeave, &wire.LeaveReq{ClientID: c.id}, nil)
		}
		c.release()
	}()
	var hello wire.PingResp
	if err := c.master.Call(ctx, wire.OpPing, &wire.PingReq{ClientID: c.id}, &hello); err != nil {
		c.log.Error("master unreachable", "master", cfg.MasterServerAddr, "err", err)
		return nil, err
	}
	known = true
	c.healthy.Store(true) // it answered: calls may go to it (Client.ctx)
	if cfg.EnableSSDOffload && !hello.OffloadEnabled {
		// The tier would run and never be asked to store anything.
		err := wire.Errorf(wire.ErrUnableOffload, "enable_ssd_offload: the master at %s does not accept SSD offload; "+
			"start it with --enable_offload, or set up without the SSD tier", cfg.MasterServerAddr)
		c.log.Error("setup rejected", "err", err)
		return nil, err
	}
	if c.staging, err = newStaging(cfg.LocalBufferSize, cfg.LentRetainBytes); err != nil {
		err = wire.Errorf(wire.ErrInternal, "local buffer of %d bytes: %v", cfg.LocalBufferSize, err)
		c.log.Error("setup failed", "err", err)
		return nil, err
	}
	if h, _ := splitLocal(cfg.LocalHostname); cfg.GlobalSegmentSize > 0 || cfg.EnableSSDOffload {
		if c.bindHost, err = listenHost(cfg, guard, h, c.log); err != nil {
			c.log.Error("setup rejected", "err", err)
			return nil, err
		}
	}
	host, ln, err := listenTransfer(cfg.LocalHostname, c.bindHost, c.log)
	if err != nil {
		c.log.Error("setup rejected", "err", err)
		return nil, err
	}
	c.hostname = net.JoinHostPort(host, strconv.Itoa(ln.Addr().(*net.TCPAddr).Port))
	if cfg.EnableSSDOffload {
		bind := c.bindHost
		if bind == "" {
			bind = host
		}
		tcfg := ssdtier.Config{Path: cfg.SSDOffloadPath, Getenv: cfg.Getenv, Segment: c.hostname, ListenHost: bind, Auth: guard}
		if c.ssd, err = ssdtier.Open(clientHost{c}, tcfg, c.log); err != nil {
			ln.Close()
			c.log.Error("SSD tier rejected", "err", err)
			return nil, err
		}
	}
	c.disk = ssdtier.NewReader(clientHost{c}, c.log, c.ssd, cfg.RPC)
	if cfg.GlobalSegmentSize == 0 {
		ln.Close() // a pure consumer only needs its name
	} else {
		if err := c.newSegment(ln); err != nil {
			ln.Close()
			c.log.Error("segment rejected", "location", cfg.SegmentLocation, "size", cfg.GlobalSegmentSize, "err", err)
			return nil, err
		}
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			c.server.Serve()
		}()
		if err := c.mountTakingOver(ctx); err != nil {
			return nil, err
		}
	}
	if c.ssd != nil {
		c.ssd.Start()
	}
	c.serveHTTP() // before the background goroutines start: it may set c.metrics to nil
	c.wg.Add(3)
	go c.heartbeat()
	go func() {
		defer c.wg.Done()
		c.readsDone.run(c.life, c.master, c.id, c.log, c.stop)
	}()
	go func() {
		defer c.wg.Done()
		c.planEnds.run(c.life, c.master, c.id, c.log, c.stop)
	}()
	ok = true
	c.log.Info("client ready", "hostname", c.hostname, "segment", cfg.GlobalSegmentSize, "master", cfg.MasterServerAddr,
		"tenant_id", cfg.TenantID)
	return c, nil
}

func validate(cfg *Config) error {
	if cfg.LocalHostname == "" {
		return wire.Errorf(wire.ErrInvalidParams, "local_hostname is empty")
	}
	switch strings.ToLower(cfg.Protocol) {
	case "", "tcp", "ucx", "rdma":
	default:
		return wire.Errorf(wire.ErrInvalidParams, "protocol %q: want \"tcp\", \"ucx\" or \"rdma\"", cfg.Protocol)
	}
	if cfg.MasterServerAddr == "" {
		cfg.MasterServerAddr = "127.0.0.1:50051"
	}
	if cfg.ClusterID == "" {
		cfg.ClusterID = "mooncake_cluster"
	}
	if rest, ok := strings.CutPrefix(cfg.MasterServerAddr, "etcd://"); ok {
		if len(etcdEndpoints(rest)) == 0 {
			return wire.Errorf(wire.ErrInvalidParams, "master_server_addr %q names no etcd endpoint", cfg.MasterServerAddr)
		}
	} else if _, _, err := net.SplitHostPort(cfg.MasterServerAddr); err != nil {
		return wire.Errorf(wire.ErrInvalidParams, "master_server_addr %q: %v", cfg.MasterServerAddr, err)
	}
	if cfg.HTTPPort < 0 || cfg.HTTPPort > 65535 {
		return wire.Errorf(wire.ErrInvalidParams, "client HTTP port %d: want 1-65535 (0: off)", cfg.HTTPPort)
	}
	dev, err := parseLocation(cfg.SegmentLocation)
	if err != nil {
		return err
	}
	if dev >= 0 && cfg.EnableSSDOffload {
		return wire.Errorf(wire.ErrInvalidParams, "the SSD tier offloads host segments only, not one on %s", cfg.SegmentLocation)
	}
	return nil
}

// checkMemory refuses, before anything is taken, a segment (host memory),
// local buffer and SSD staging buffer that together exceed what the host
// and its cgroup can give: all are populated at setup, and taking more
// would block in reclaim or end in the OOM killer.
func checkMemory(cfg Config) error {
	var asks []memlimit.Ask
	if dev, _ := parseLocation(cfg.SegmentLocation); dev < 0 {
		asks = append(asks, memlimit.Ask{Name: "global_segment_size", Bytes: cfg.GlobalSegmentSize})
	}
	asks = append(asks, memlimit.Ask{Name: "local_buffer_size", Bytes: cfg.LocalBufferSize})
	if cfg.EnableSSDOffload {
		asks = append(asks, memlimit.Ask{Name: "the SSD tier's staging buffer (" + storage.EnvBufferSize + ")",
			Bytes: storage.StagingBytes(cfg.Getenv)})
	}
	return memlimit.Check(asks...)
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

// newSegment creates the contributed memory, host or GPU, and the
// transfer server that serves it on ln.
func (c *Client) newSegment(ln net.Listener) error {
	size := c.cfg.GlobalSegmentSize
	dev, _ := parseLocation(c.cfg.SegmentLocation)
	if dev < 0 {
		var err error
		if c.seg, err = transfer.NewLocalSegment(c.hostname, size); err != nil {
			return wire.Errorf(wire.ErrInternal, "segment of %d bytes: %v", size, err)
		}
		c.server = c.serving(transfer.NewServer(ln, c.seg.Bytes(), c.log))
		return nil
	}
	if info := gpu.Probe(); !info.Available {
		return wire.Errorf(wire.ErrInvalidParams, "segment_location cuda:%d: %s", dev, info.Reason)
	}
	var err error
	if c.devSeg, err = gpu.NewSegment(dev, size); err != nil {
		return wire.Errorf(wire.ErrInvalidParams, "a segment of %d bytes on cuda:%d: %v", size, dev, err)
	}
	c.server = c.serving(transfer.NewDeviceServer(ln, c.devSeg, c.log))
	return nil
}

// serving readies a new transfer server of this client's: its handshake,
// and how long it polls for a hot connection's next request.
func (c *Client) serving(s *transfer.Server) *transfer.Server {
	s.SetAuth(c.auth)
	if c.cfg.ServeSpin != 0 { // 0 keeps the server's default; negative never polls
		s.SetSpin(c.cfg.ServeSpin)
	}
	return s
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

func newClientID() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// takeoverWait bounds how long setup asks again for a segment name that
// the master says another client holds: a predecessor of the same name
// that died (SIGKILL, a pod restart) was heard from at most a ping
// interval before; the master hands its segment over once it has been
// silent for its takeover silence (1 s by default). A live holder keeps
// the name and setup fails with -102.
const takeoverWait = 3 * time.Second

// mountTakingOver is setup's mount: a name the master says is held is
// asked for again until takeoverWait passes. This client has bound the
// name's host:port, so a holder on this host is dead; the master judges
// by the holder's silence.
func (c *Client) mountTakingOver(ctx context.Context) error {
	deadline := time.Now().Add(takeoverWait)
	for {
		err := c.mountQuiet(ctx)
		if err == nil || wire.CodeOf(err) != wire.ErrSegmentAlreadyExists || time.Now().After(deadline) {
			if err != nil {
				c.log.Error("mount segment failed", "name", c.hostname, "err", err)
			}
			return err
		}
		select {
		case <-ctx.Done():
			c.log.Error("mount segment failed", "name", c.hostname, "err", err)
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (c *Client) mount(ctx context.Context) error {
	err := c.mountQuiet(ctx)
	if err != nil {
		c.log.Error("mount segment failed", "name", c.hostname, "err", err)
	}
	return err
}

// mountQuiet mounts the segment; the caller logs a failure.
func (c *Client) mountQuiet(ctx context.Context) error {
	var mem []byte
	var dev transfer.DeviceMemory
	describe := func() (wire.SegmentDesc, error) {
		desc := wire.SegmentDesc{
			Name: c.hostname, ClientID: c.id, HostID: transfer.HostID(),
			TransferAddr: c.server.Addr().String(), Offload: c.ssd != nil && !c.ssd.Unmounted(),
		}
		if c.devSeg != nil {
			h, err := c.devSeg.Handle()
			if err != nil {
				return desc, wire.Errorf(wire.ErrInternal, "IPC handle of the GPU segment: %v", err)
			}
			desc.Size, desc.Location, desc.IPC = c.devSeg.Size(), location(c.devSeg.Device()), h[:]
			if d := c.devSeg.Device(); d < len(gpu.Probe().Devices) {
				desc.GPUPCI = gpu.Probe().Devices[d].PCI
			}
			dev = c.devSeg
			desc.Base = c.devSeg.Base()
		} else {
			desc.Size, desc.ShmPath = c.seg.Size(), c.seg.ShmPath()
			mem = c.seg.Bytes()
			desc.Base = uint64(addrOf(mem))
		}
		return desc, nil
	}
	return c.exposure.mount(c.ucx, c.devSeg != nil, c.log, describe, func(desc wire.SegmentDesc) error {
		// A remount may bring a new id, which the master's grants name
		// before the answer arrives here: the server takes grants for
		// any id of this segment (its key is this segment's alone) until
		// it knows.
		c.server.SetSegID(0)
		var resp wire.MountResp
		if err := c.master.Call(ctx, wire.OpMountSegment, &wire.MountReq{Seg: desc, GrantKey: c.server.GrantKey()}, &resp); err != nil {
			return err
		}
		desc.ID = resp.SegID
		c.server.SetSegID(desc.ID)
		c.peers.setOwn(desc, mem, dev)
		return nil
	})
}

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
		if was := c.healthy.Swap(err == nil); was != (err == nil) {
			c.log.Warn("master reachability changed", "reachable", err == nil, "err", err)
		}
	}
}

// rejoin brings back what a master that forgot us (it restarted, or we
// were silent past client_ttl) lost: our segment and our SSD copies.
func (c *Client) rejoin(ctx context.Context) error {
	if c.server != nil {
		c.log.Warn("master does not know this client any more; remounting the segment", "hostname", c.hostname)
		if err := c.mount(ctx); err != nil {
			return err
		}
	}
	if err := c.remountExtra(ctx); err != nil {
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
		c.readsDone.flush(ctx, c.master, c.id, c.log)
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
	if c.disk != nil {
		c.disk.Close()
	}
	if c.server != nil {
		c.server.Close()
	}
	c.closeExtra()
	c.wg.Wait()
	if c.ssd != nil {
		c.ssd.Close() // before the segment its offloads read goes away
	}
	c.engine.Close()    // unpins the own segment and registered buffers too
	c.exposure.revoke() // before the segment's memory goes
	if c.ucx != nil {
		c.ucx.close() // after every segment's exposure (closeExtra revoked theirs)
	}
	c.master.Close()
	if c.seg != nil {
		c.seg.Close()
	}
	if c.devSeg != nil {
		c.devSeg.Close()
	}
	if c.staging != nil {
		c.staging.close()
	}
}

// RegisterBuffer declares [ptr, ptr+size) usable by the zero-copy calls.
func (c *Client) RegisterBuffer(ptr, size uint64) error { return c.buffers.register(ptr, size) }

// UnregisterBuffer forgets a buffer registered at ptr.
// A buffer page-locked for device copies is unlocked first.
func (c *Client) UnregisterBuffer(ptr uint64) error {
	if err := c.buffers.unregister(ptr); err != nil {
		return err
	}
	c.engine.Pins().DropRange(ptr)
	return nil
}

// CopyingAllowed says whether the copying calls (put, get, get_buffer: the
// caller's memory is not its zero-copy memory) may run. As in Mooncake,
// whose copying calls stage through the local buffer, a client set up with
// local_buffer_size 0 refuses them with ErrInvalidParams; the zero-copy
// calls work without one.
func (c *Client) CopyingAllowed() error {
	if c.cfg.LocalBufferSize == 0 {
		return wire.Errorf(wire.ErrInvalidParams, "copying calls need a local buffer: this client was set up with local_buffer_size=0 (use the zero-copy calls, or a local buffer)")
	}
	return nil
}

// Registered reports whether [ptr, ptr+size) lies inside a registered buffer.
func (c *Client) Registered(ptr, size uint64) bool {
	_, ok := c.buffers.lookup(ptr, size)
	return ok
}

// BufferDevice reports whether [ptr, ptr+size) lies inside a registered
// buffer, and the GPU holding it (-1: host memory).
func (c *Client) BufferDevice(ptr, size uint64) (dev int, ok bool) {
	return c.buffers.lookup(ptr, size)
}

// MemoryOf says where the caller's [ptr, ptr+size) lives for a zero-copy
// call, as Mooncake's client takes it: inside a registered buffer, that
// buffer's device; memory never registered, the caller's own (its GPU
// when the driver knows the address, else host memory, which must be
// mapped in this process). Refused (ok false): a null or wrapping range,
// one that straddles a registered buffer's edge (a mistake rather than
// memory of the caller's own), and host memory that is not mapped (a
// device pointer with no driver to reach it, or a stale one): touching it
// would kill the process.
func (c *Client) MemoryOf(ptr, size uint64) (dev int, ok bool) {
	if dev, ok := c.buffers.lookup(ptr, size); ok {
		return dev, true
	}
	if ptr == 0 || ptr+size < ptr || ptr+size > userSpaceEnd || c.buffers.straddles(ptr, size) {
		return -1, false
	}
	if dev := DeviceOf(ptr); dev >= 0 {
		return dev, true
	}
	return -1, mapped(ptr, size)
}

// mapped reports whether every page of [ptr, ptr+size) is mapped in this
// process: msync answers ENOMEM for a range with unmapped pages, without
// touching the memory (one system call).
func mapped(ptr, size uint64) bool {
	const page = 4096
	start := ptr &^ (page - 1)
	end := (ptr + size + page - 1) &^ (page - 1)
	_, _, errno := unix.Syscall(unix.SYS_MSYNC, uintptr(start), uintptr(end-start), unix.MS_ASYNC)
	return errno == 0
}

// userSpaceEnd bounds the addresses a process can own (48-bit virtual
// addresses): a range past it cannot be the caller's memory.
const userSpaceEnd = 1 << 48

// enter admits a call that may touch memory; the caller runs the returned
// func when it is done. Calls must not nest enter (see inFlight).
func (c *Client) enter() (func(), error) {
	c.inFlight.RLock()
	if err := c.checkOpen(); err != nil {
		c.inFlight.RUnlock()
		return nil, err
	}
	return c.inFlight.RUnlock, nil
}

func (c *Client) checkOpen() error {
	if c.closed.Load() {
		return wire.Errorf(wire.ErrInternal, "store is closed")
	}
	return nil
}

func addrOf(b []byte) uintptr {
	if len(b) == 0 {
		return 0
	}
	return uintptr(unsafe.Pointer(&b[0]))
}

// etcdEndpoints reads the host:port list of an "etcd://" master address
// (separated by ';' as Mooncake writes it, or ',').
func etcdEndpoints(s string) []string {
	var out []string
	for _, e := range strings.FieldsFunc(s, func(r rune) bool { return r == ';' || r == ',' }) {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}
