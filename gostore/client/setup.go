// setup.go defines New: the steps that set a client up, in order, each a
// method of setup (what New holds while it works), and the checks of the
// configuration that come before any of them.

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
	"sync/atomic"

	"github.com/gostore/gostore/gostore/auth"
	"github.com/gostore/gostore/gostore/clientmetrics"
	"github.com/gostore/gostore/gostore/master/ha"
	"github.com/gostore/gostore/gostore/memlimit"
	"github.com/gostore/gostore/gostore/planclient"
	"github.com/gostore/gostore/gostore/rpc"
	"github.com/gostore/gostore/gostore/ssdtier"
	"github.com/gostore/gostore/gostore/storage"
	"github.com/gostore/gostore/gostore/transfer"
	"github.com/gostore/gostore/gostore/wire"
)

// New connects a client as described by cfg: it mounts a segment of
// GlobalSegmentSize bytes (none when 0) and starts the heartbeat. A step
// that fails after the master first answered undoes what the steps before
// it set up (undo); the master hears that the client left.
func New(cfg Config, log *slog.Logger) (*Client, error) {
	if log == nil {
		log = slog.Default()
	}
	metrics, err := settle(&cfg, log)
	if err != nil {
		return nil, err
	}
	s := &setup{c: assemble(cfg, log, metrics), cfg: cfg, log: log}
	if err := s.planTransport(); err != nil {
		return nil, err
	}
	if err := s.authenticate(); err != nil {
		return nil, err
	}
	s.dialMaster()
	s.buildEngine()
	ctx, cancel := s.context()
	defer cancel()
	ready := false
	defer func() {
		if !ready {
			s.undo(ctx)
		}
	}()
	for _, step := range []func(context.Context) error{s.hello, s.localBuffer, s.listen, s.openTier, s.mountSegment} {
		if err := step(ctx); err != nil {
			return nil, err
		}
	}
	s.start()
	ready = true
	return s.c, nil
}

// setup is what New holds while it sets a client up. It takes no lock:
// New runs its steps alone, before the client is handed to anyone.
type setup struct {
	c *Client
	// cfg is New's copy: its RPC options gain the handshake and an HA
	// cluster's leader resolution on the way (the master's connection and
	// the disk reader's use them; c.cfg keeps them as given).
	cfg   Config
	log   *slog.Logger // New's logger, without the client's attributes
	guard *auth.Auth
	known bool         // the master answered: it counts this client until told it left
	host  string       // local_hostname's host, the segment name's
	ln    net.Listener // where the segment's transfer server will listen
}

// settle checks cfg, weighs the memory it takes against what the host can
// give, and fills in the defaults; with an HTTP port it makes the metrics
// that observe every RPC.
func settle(cfg *Config, log *slog.Logger) (*clientmetrics.Metrics, error) {
	if err := validate(cfg); err != nil {
		log.Error("setup rejected", "err", err)
		return nil, err
	}
	if err := checkMemory(*cfg); err != nil {
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
	var metrics *clientmetrics.Metrics
	if cfg.HTTPPort != 0 {
		metrics = clientmetrics.New(clientmetrics.Options{Tenant: cfg.TenantID})
		cfg.RPC.Observe = chainObservers(cfg.RPC.Observe, metrics.RPC)
	}
	log.Debug("setting up", "local_hostname", cfg.LocalHostname, "master", cfg.MasterServerAddr,
		"segment", cfg.GlobalSegmentSize, "location", cfg.SegmentLocation, "buffer", cfg.LocalBufferSize,
		"protocol", cfg.Protocol, "ssd", cfg.EnableSSDOffload, "ssd_path", cfg.SSDOffloadPath,
		"force_tcp", cfg.ForceTCP, "put_space_wait", cfg.PutSpaceWait, "tenant_id", cfg.TenantID, "http_port", cfg.HTTPPort)
	return metrics, nil
}

// assemble makes the Client and the objects its calls are made of, each
// over core and wired to the others it uses; nothing is connected yet.
func assemble(cfg Config, log *slog.Logger, metrics *clientmetrics.Metrics) *Client {
	c := &Client{core: core{cfg: cfg, log: log.With("component", "client"), stop: make(chan struct{}), metrics: metrics}}
	k := &c.core
	c.ends = &readEnds{core: k}
	c.reads = &Reads{core: k, ends: c.ends}
	c.writes = &Writes{core: k, reads: c.reads, ends: c.ends}
	c.sessions = &Sessions{core: k, reads: c.reads, ends: c.ends}
	c.tasks = newTasks(k, c.reads)
	c.keys = &Keys{core: k, reads: c.reads}
	c.bufs = &Buffers{core: k}
	c.own = &ownSegment{core: k}
	c.segs = &Segments{core: k}
	c.scopes.init()
	c.life, c.endLife = context.WithCancel(context.Background())
	c.masterLog = masterLog{log: c.log, bound: cfg.RPCTimeout}
	return c
}

// planTransport reads the host's topology and decides the transport.
func (s *setup) planTransport() error {
	c, cfg, log := s.c, s.cfg, s.log
	var err error
	if c.transport, err = discoverTransport(cfg); err != nil {
		log.Error("setup rejected: the host's topology cannot be read", "root", cfg.SysfsRoot, "err", err)
		return wire.Errorf(wire.ErrInvalidParams, "topology under %q: %v", cfg.SysfsRoot, err)
	}
	if t := c.transport; (t.Reason != "" || len(t.Unknown) > 0) && !ucxAsked(cfg) {
		log.Warn("transport", "requested", t.Requested, "protocol", t.Protocol, "rdma_devices", t.RDMADevices,
			"unknown_devices", t.Unknown, "reason", t.Reason)
	}
	return nil
}

// authenticate loads the handshake every server and dial of this client
// uses, and names the client.
func (s *setup) authenticate() error {
	guard, err := auth.New(s.cfg.Auth)
	if err != nil {
		s.log.Error("setup rejected", "err", err)
		return err
	}
	s.guard = guard
	s.c.auth, s.cfg.RPC.Auth = guard, guard
	s.c.id = newClientID()
	return nil
}

// dialMaster makes the master's connection: to the address given, or to
// an HA cluster's current leader.
func (s *setup) dialMaster() {
	c, cfg := s.c, &s.cfg
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
	if cfg.TenantID != wire.DefaultTenant {
		// Every request that names keys names the tenant too, once the
		// master said it separates tenants (c.tenanted); the default
		// tenant's go as they always did.
		tenant := cfg.TenantID
		mopt.Stamp = func(req any) {
			if k, ok := req.(*wire.KeysReq); ok && k.Stored {
				return // stored keys: the master scopes nothing
			}
			if t, ok := req.(wire.Tenanted); ok && c.tenanted.Load() {
				t.SetTenant(tenant)
			}
		}
	}
	c.master = rpc.NewClientWith(cfg.MasterServerAddr, mopt)
}

// buildEngine loads UCX where the transport asks for it, makes the
// transfer engine, the plan API and the batches of ReadDone and PutEnd.
func (s *setup) buildEngine() {
	c, cfg := s.c, s.cfg
	c.setupUCX(s.log)
	topt := transfer.Options{Log: c.log, ForceTCP: cfg.ForceTCP, Driver: gpuDriver{}, Auth: s.guard,
		BounceBytes: cfg.GPUBounceBytes, BeforeDeviceCopy: c.bufs.pinRegistered, Wrap: cfg.WrapTransport,
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
	c.ends.readsDone.init(wire.OpReadDone, 0, nil)
	c.planEnds.init(wire.OpPutEnd, planclient.CommitEndDelay, c.plans.CommitsEnded)
}

// context bounds the steps that wait on the master by SetupTimeout, and
// ends them early with Config.Setup.
func (s *setup) context() (context.Context, context.CancelFunc) {
	setupCtx := s.cfg.Setup
	if setupCtx == nil {
		setupCtx = context.Background()
	}
	return context.WithTimeout(setupCtx, SetupTimeout)
}

// undo releases what the steps so far set up, after telling a master
// that answered that this client is gone.
func (s *setup) undo(ctx context.Context) {
	c := s.c
	if s.known { // the master counts us from the first ping: say we are gone
		c.master.Call(ctx, wire.OpClientLeave, &wire.LeaveReq{ClientID: c.id}, nil)
	}
	c.release()
}

// hello pings the master once: it must answer, and accept SSD offload
// when this client brings a tier.
func (s *setup) hello(ctx context.Context) error {
	c, cfg := s.c, s.cfg
	var hello wire.PingResp
	if err := c.master.Call(ctx, wire.OpPing, &wire.PingReq{ClientID: c.id}, &hello); err != nil {
		c.log.Error("master unreachable", "master", cfg.MasterServerAddr, "err", err)
		return err
	}
	s.known = true
	c.healthy.Store(true) // it answered: calls may go to it (core.ctx)
	c.tenanted.Store(hello.MultiTenants)
	if cfg.EnableSSDOffload && !hello.OffloadEnabled {
		// The tier would run and never be asked to store anything.
		err := wire.Errorf(wire.ErrUnableOffload, "enable_ssd_offload: the master at %s does not accept SSD offload; "+
			"start it with --enable_offload, or set up without the SSD tier", cfg.MasterServerAddr)
		c.log.Error("setup rejected", "err", err)
		return err
	}
	return nil
}

// localBuffer takes the local buffer the copying calls stage through.
func (s *setup) localBuffer(context.Context) error {
	c, cfg := s.c, s.cfg
	var err error
	if c.staging, err = newStaging(cfg.LocalBufferSize, cfg.LentRetainBytes); err != nil {
		err = wire.Errorf(wire.ErrInternal, "local buffer of %d bytes: %v", cfg.LocalBufferSize, err)
		c.log.Error("setup failed", "err", err)
		return err
	}
	return nil
}

// listen decides where this client's servers listen (listen.go) and binds
// the segment's port, which names the segment.
func (s *setup) listen(context.Context) error {
	c, cfg := s.c, s.cfg
	var err error
	if h, _ := splitLocal(cfg.LocalHostname); cfg.GlobalSegmentSize > 0 || cfg.EnableSSDOffload {
		if c.bindHost, err = listenHost(cfg, s.guard, h, c.log); err != nil {
			c.log.Error("setup rejected", "err", err)
			return err
		}
	}
	if s.host, s.ln, err = listenTransfer(cfg.LocalHostname, c.bindHost, c.log); err != nil {
		c.log.Error("setup rejected", "err", err)
		return err
	}
	c.hostname = net.JoinHostPort(s.host, strconv.Itoa(s.ln.Addr().(*net.TCPAddr).Port))
	return nil
}

// openTier opens the SSD tier, when asked for, and the reader of disk
// copies (this client's and other clients').
func (s *setup) openTier(context.Context) error {
	c, cfg := s.c, s.cfg
	if cfg.EnableSSDOffload {
		bind := c.bindHost
		if bind == "" {
			bind = s.host
		}
		tcfg := ssdtier.Config{Path: cfg.SSDOffloadPath, Getenv: cfg.Getenv, Segment: c.hostname, ListenHost: bind, Auth: s.guard}
		var err error
		if c.ssd, err = ssdtier.Open(tierHost{clientHost{c}}, tcfg, c.log); err != nil {
			s.ln.Close()
			c.log.Error("SSD tier rejected", "err", err)
			return err
		}
	}
	c.reads.disk = ssdtier.NewReader(tierHost{clientHost{c}}, c.log, c.ssd, cfg.RPC)
	return nil
}

// mountSegment creates the segment, serves it and mounts it at the
// master (a pure consumer only keeps its name).
func (s *setup) mountSegment(ctx context.Context) error {
	c, cfg, ln := s.c, s.cfg, s.ln
	if cfg.GlobalSegmentSize == 0 {
		ln.Close() // a pure consumer only needs its name
		return nil
	}
	if err := c.own.newSegment(ln); err != nil {
		ln.Close()
		c.log.Error("segment rejected", "location", cfg.SegmentLocation, "size", cfg.GlobalSegmentSize, "err", err)
		return err
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.own.server.Serve()
	}()
	return c.own.mountTakingOver(ctx)
}

// start starts the SSD tier, the HTTP server and the background work: the
// heartbeat and the senders of ReadDone and PutEnd batches.
func (s *setup) start() {
	c, cfg := s.c, s.cfg
	if c.ssd != nil {
		c.ssd.Start()
	}
	c.serveHTTP() // before the background goroutines start: it may set c.metrics to nil
	c.wg.Add(3)
	go c.heartbeat()
	go func() {
		defer c.wg.Done()
		c.ends.readsDone.run(c.life, c.master, c.id, c.log, c.stop)
	}()
	go func() {
		defer c.wg.Done()
		c.planEnds.run(c.life, c.master, c.id, c.log, c.stop)
	}()
	c.log.Info("client ready", "hostname", c.hostname, "segment", cfg.GlobalSegmentSize, "master", cfg.MasterServerAddr,
		"tenant_id", cfg.TenantID)
}

func validate(cfg *Config) error {
	if cfg.LocalHostname == "" {
		return wire.Errorf(wire.ErrInvalidParams, "local_hostname is empty")
	}
	cfg.TenantID = wire.TenantOrDefault(cfg.TenantID)
	if !wire.ValidTenant(cfg.TenantID) {
		return wire.Errorf(wire.ErrInvalidParams, "tenant_id %q starts with '_', holds a control character or is over 256 bytes", cfg.TenantID)
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

func newClientID() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
