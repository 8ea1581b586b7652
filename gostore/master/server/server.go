// server.go defines Server: listeners, RPC handlers and the tick loop.

package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gostore/gostore/gostore/auth"
	"github.com/gostore/gostore/gostore/master"
	"github.com/gostore/gostore/gostore/master/ha"
	"github.com/gostore/gostore/gostore/rpc"
	"github.com/gostore/gostore/gostore/wire"
)

// Server is a running master.
type Server struct {
	opts    Options
	log     *slog.Logger
	core    *master.Core
	rpc     *rpc.Server
	rpcLn   net.Listener
	http    *http.Server
	httpLn  net.Listener
	metrics *metrics
	state   *durability // nil without a state directory or HA
	leader  *ha.Leader  // nil without HA
	done    chan struct{}

	// evictNow asks the tick loop for a pass before its next tick: a put
	// was refused for space that eviction may free.
	evictNow chan struct{}

	stop chan struct{}
	wg   sync.WaitGroup
	once sync.Once
}

// Start listens on the configured ports and serves until Close.
func Start(opts Options) (*Server, error) {
	log := opts.Log
	if log == nil {
		lvl, err := parseLevel(opts.LogLevel)
		if err != nil {
			lvl = slog.LevelInfo
		}
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl})).With("component", "master")
	}
	if opts.TickInterval <= 0 {
		opts.TickInterval = 100 * time.Millisecond
	}
	warnIgnored(log, opts)
	guard, err := auth.New(opts.Auth)
	if err != nil {
		return nil, err
	}
	if err := auth.Check(guard, "the master's RPC port", opts.RPCAddress, opts.AllowInsecure); err != nil {
		return nil, fmt.Errorf("%w (--auth_secret_file, --tls_ca_file/--tls_cert_file/--tls_key_file, --rpc_address, --allow_insecure)", err)
	}
	if opts.MetricsPort >= 0 && opts.MetricsHost != "" {
		if err := auth.Check(guard, "the master's HTTP port", opts.MetricsHost, opts.AllowInsecure); err != nil {
			return nil, fmt.Errorf("%w (--auth_secret_file, --tls_ca_file/--tls_cert_file/--tls_key_file, --metrics_host, --allow_insecure)", err)
		}
	}
	if guard == nil && !auth.Loopback(opts.RPCAddress) {
		log.Warn("serving without authentication on an address other hosts reach (--allow_insecure)",
			"rpc_address", opts.RPCAddress)
	}
	// The RPC port is bound first: a master under HA advertises it while
	// it campaigns.
	network := listenNetwork(opts.RPCAddress)
	rpcLn, err := net.Listen(network, net.JoinHostPort(opts.RPCAddress, strconv.Itoa(opts.RPCPort)))
	if err != nil {
		return nil, listenErr("--rpc_port", opts.RPCPort, "--rpc_address", opts.RPCAddress, err)
	}
	var state *durability
	var saved *savedState
	var leader *ha.Leader
	switch {
	case opts.EnableHA:
		var st *master.State
		if state, st, leader, err = campaign(opts, dialable(rpcLn.Addr()), guard, log); err == nil {
			saved = &savedState{st: st}
		}
	case opts.StateDir != "":
		state, saved, err = openState(&opts, log)
	}
	if err != nil {
		rpcLn.Close()
		return nil, err
	}
	cfg := master.Config{
		DefaultKVLeaseTTL:      opts.DefaultKVLeaseTTL,
		ClientTTL:              opts.ClientTTL,
		SoftPinTTL:             opts.DefaultKVSoftPinTTL,
		AllowEvictSoftPinned:   opts.AllowEvictSoftPinned,
		EvictionRatio:          opts.EvictionRatio,
		HighWatermark:          opts.EvictionHighWatermark,
		PutStartDiscardTimeout: opts.PutStartDiscardTimeout,
		PutStartReleaseTimeout: opts.PutStartReleaseTimeout,
		EnableOffload:          opts.EnableOffload,
		OffloadOnEvict:         opts.OffloadOnEvict,
		RestoreQuarantine:      opts.RestoreQuarantine,
		MaxKeyBytes:            opts.MaxKeyBytes,
		MaxBatchKeys:           opts.MaxBatchKeys,
		MaxObjectBytes:         opts.MaxObjectBytes,
	}
	if state != nil {
		cfg.OnChange = state.record
	}
	core := master.New(cfg)
	if saved != nil {
		// The collector stays on: turned off for the restore, it saved
		// under 5 % of a restart at 10^6 objects and raised the process's
		// peak by a quarter (bench/scale's "master peak RSS").
		rep, err := saved.restore(core)
		if err != nil { // a snapshot changed since Open found it whole
			rpcLn.Close()
			state.j.Close()
			return nil, fmt.Errorf("--snapshot_backup_dir=%s: %w", opts.StateDir, err)
		}
		log.Info("state restored", "segments", rep.Segments, "objects", rep.Objects, "dropped", rep.Dropped,
			"held_ranges", rep.HeldRanges)
		if rep.BadSegments > 0 {
			log.Warn("restored state held segments no mount could have made: dropped, with their replicas",
				"bad_segments", rep.BadSegments)
		}
	}
	s := &Server{opts: opts, log: log, core: core, state: state, stop: make(chan struct{}),
		evictNow: make(chan struct{}, 1), rpcLn: rpcLn, leader: leader, done: make(chan struct{})}
	s.metrics = newMetrics(core)
	if state != nil {
		state.registerMetrics(s.metrics.reg)
	}
	s.rpc = s.newRPCServer()
	s.rpc.SetAuth(guard)
	s.register()
	if state != nil {
		state.waitForDisk(s.rpc)
	}

	if opts.MetricsPort >= 0 {
		host, network := opts.RPCAddress, network
		if opts.MetricsHost != "" {
			host, network = opts.MetricsHost, metricsNetwork(opts.MetricsHost)
		}
		s.httpLn, err = net.Listen(network, net.JoinHostPort(host, strconv.Itoa(opts.MetricsPort)))
		if err != nil {
			s.rpcLn.Close()
			if state != nil {
				state.j.Close()
			}
			hostFlag := "--metrics_host (else --rpc_address)"
			if opts.MetricsHost != "" {
				hostFlag = "--metrics_host"
			}
			return nil, listenErr("--metrics_port", opts.MetricsPort, hostFlag, host, err)
		}
		s.httpLn = guard.HTTPListener(s.httpLn)
		s.http = &http.Server{Handler: guard.Guard(s.httpHandler(), openHTTP, log), ReadHeaderTimeout: 5 * time.Second}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if err := s.http.Serve(s.httpLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("http server stopped", "err", err)
			}
		}()
		if leader != nil {
			// Standbys whose state the log on etcd no longer reaches fetch
			// this leader's snapshot there.
			url := guard.HTTPScheme() + "://" + s.HTTPAddr() + snapshotPath
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := leader.Advertise(ctx, url)
			cancel()
			if err != nil {
				log.Error("ha: cannot name this leader's snapshot source on etcd: standbys behind the log's tail cannot catch up", "err", err)
			}
		}
	}
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		if err := s.rpc.Serve(s.rpcLn); err != nil {
			log.Error("rpc server stopped", "err", err)
		}
	}()
	go func() {
		defer s.wg.Done()
		s.tickLoop()
	}()
	if leader != nil {
		// A leader whose lease lapsed steps down: it answers nothing more
		// (another master may lead already) and Done closes.
		go func() {
			select {
			case <-leader.Lost():
				log.Error("leadership lost: stepping down")
				s.stepDown()
			case <-s.stop:
			}
		}()
	}
	if state != nil {
		interval := opts.SnapshotInterval
		if interval <= 0 {
			interval = 10 * time.Minute
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if saved != nil {
				// The restore itself is no change in the journal: a
				// snapshot makes it the new starting point. It runs while
				// the master serves (a fuzzy snapshot stops no call), not
				// before: until it is whole, the directory restores the
				// same core again (see master.Core.Restore), and the
				// records written meanwhile apply on top. A new HA leader
				// likewise: the log on etcd and the snapshot it started
				// from keep everything meanwhile, so a failover does not
				// wait for a whole snapshot.
				if err := s.state.snapshot(s.core); err != nil {
					s.log.Error("snapshot after the restore failed", "err", err)
				}
			}
			s.snapshotLoop(interval)
		}()
	}
	// The addresses the sockets are bound to, as the kernel reports them
	// (a wildcard stays a wildcard), then where a local client dials.
	log.Info("master serving", "rpc_listen", s.rpcLn.Addr().String(), "http_listen", s.httpListen(),
		"rpc", s.Addr(), "http", s.HTTPAddr(), "auth", guard.Mode(), "offload", opts.EnableOffload,
		"lease_ttl", opts.DefaultKVLeaseTTL, "client_ttl", opts.ClientTTL)
	return s, nil
}

// listenErr is the error of a listener that could not be opened: it names
// the flags that chose the port and the address, so that a port another
// process holds says which setting to change.
func listenErr(portFlag string, port int, hostFlag, host string, err error) error {
	why := ""
	if errors.Is(err, syscall.EADDRINUSE) {
		why = ": another process holds that port (choose another, or 0 for a free one)"
	}
	return fmt.Errorf("%s=%d on %s=%s: %w%s", portFlag, port, hostFlag, host, err, why)
}

// listenNetwork keeps a listener on the address family --rpc_address
// names: Go's "tcp" turns 0.0.0.0 into a dual-stack [::] that also takes
// IPv6 connections the operator did not ask for.
func listenNetwork(addr string) string {
	switch ip := net.ParseIP(addr); {
	case ip == nil:
		return "tcp" // a host name: whatever it resolves to
	case ip.To4() != nil:
		return "tcp4"
	}
	return "tcp6"
}

// metricsNetwork is listenNetwork for --metrics_host, but for "::", which
// takes IPv4 as well, as Mooncake's master documents for that flag.
func metricsNetwork(host string) string {
	if ip := net.ParseIP(host); ip != nil && ip.Equal(net.IPv6unspecified) {
		return "tcp"
	}
	return listenNetwork(host)
}

// warnIgnored logs, in one line, the Mooncake flags given that this master
// accepts without acting on them, and the config file's keys no flag of
// gostore or Mooncake reads (a typo, most likely: each with the nearest
// key when one is close).
func warnIgnored(log *slog.Logger, opts Options) {
	var attrs []any
	var what []string
	if len(opts.Unimplemented) > 0 {
		attrs = append(attrs, "flags", strings.Join(opts.Unimplemented, ","))
		what = append(what, "Mooncake master settings this master does not implement")
	}
	if len(opts.IgnoredKeys) > 0 {
		keys := make([]string, len(opts.IgnoredKeys))
		for i, k := range opts.IgnoredKeys {
			keys[i] = k
			if near := nearestKey(k); near != "" {
				keys[i] += " (did you mean " + near + "?)"
			}
		}
		attrs = append(attrs, "unknown_config_keys", strings.Join(keys, ","))
		what = append(what, "config file keys that are no setting of gostore's master nor of Mooncake 0.3.13's")
	}
	if len(attrs) > 0 {
		log.Warn("ignoring "+strings.Join(what, ", and "), attrs...)
	}
}

// newRPCServer is the RPC server with the master's limits: its own on
// each peer, and Admit checking every request that names keys against the
// core's before its handler runs.
func (s *Server) newRPCServer() *rpc.Server {
	o := s.opts
	return rpc.NewServerWith(s.log, rpc.ServerOptions{
		Observe:       s.metrics.observe,
		MaxBody:       rpc.Limit{N: o.RPCMaxRequestBytes, Flag: "rpc_max_request_bytes"},
		ConnsPerIP:    rpc.Limit{N: o.RPCMaxConnectionsPerIP, Flag: "rpc_max_connections_per_ip"},
		InflightPerIP: rpc.Limit{N: o.RPCMaxInflightPerIP, Flag: "rpc_max_inflight_per_ip"},
		Spin:          time.Duration(o.RPCSpinMicros) * time.Microsecond,
		Admit:         s.admit,
	})
}

// admit refuses a request whose keys (wire.Keyed), or whose objects (a
// write's sizes), break the core's limits; the RPC server answers and logs
// the refusal.
func (s *Server) admit(req any) error {
	k, ok := req.(wire.Keyed)
	if !ok {
		return nil
	}
	var sizes []uint64
	if w, ok := req.(*wire.PutStartReq); ok {
		sizes = w.Sizes
	}
	return s.core.CheckRequest(k.KeyList(), sizes)
}

// Core exposes the metadata core (tests and introspection).
func (s *Server) Core() *master.Core { return s.core }

// Addr is the RPC listener's address, dialable from this host (a wildcard
// listener reports 127.0.0.1).
func (s *Server) Addr() string { return dialable(s.rpcLn.Addr()) }

// httpListen is the HTTP listener's bound address, or "disabled".
func (s *Server) httpListen() string {
	if s.httpLn == nil {
		return "disabled"
	}
	return s.httpLn.Addr().String()
}

// HTTPAddr is the HTTP listener's address, or "" when disabled.
func (s *Server) HTTPAddr() string {
	if s.httpLn == nil {
		return ""
	}
	return dialable(s.httpLn.Addr())
}

func dialable(a net.Addr) string {
	ta, ok := a.(*net.TCPAddr)
	if !ok || !ta.IP.IsUnspecified() {
		return a.String()
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(ta.Port))
}

// Close stops serving and waits for the goroutines.
func (s *Server) Close() { s.shutdown(true) }

// Done is closed when the server stopped: by Close, or by stepping down
// from a leadership it lost (the process should then exit).
func (s *Server) Done() <-chan struct{} { return s.done }

// stepDown stops serving without a last snapshot: another master may
// lead already, and the log refuses this one's writes.
func (s *Server) stepDown() { s.shutdown(false) }

func (s *Server) shutdown(clean bool) {
	s.once.Do(func() {
		close(s.stop)
		s.rpc.Close()
		if s.http != nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			s.http.Shutdown(ctx)
			cancel()
		}
		s.wg.Wait()
		if s.state != nil {
			if clean {
				// A last snapshot makes the next start quick; the log
				// alone would do as well.
				if err := s.state.snapshot(s.core); err != nil {
					s.log.Error("snapshot at stop failed", "err", err)
				}
			}
			s.state.j.Close()
		}
		if s.leader != nil {
			if clean {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				s.leader.Resign(ctx) // a standby takes over at once
				cancel()
			} else {
				s.leader.Abandon()
			}
		}
		s.log.Info("master stopped")
		close(s.done)
	})
}

// minEarlyTick spaces the ticks that refused puts ask for, so a storm of
// refusals cannot turn eviction passes into a busy loop.
const minEarlyTick = 5 * time.Millisecond

// maxGraceMs caps a graceful unmount's grace period (a century) so that
// it cannot overflow a time.Duration.
const maxGraceMs = 100 * 365 * 24 * 3600 * 1000

func (s *Server) tickLoop() {
	t := time.NewTicker(s.opts.TickInterval)
	defer t.Stop()
	var last time.Time
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		case <-s.evictNow:
			if time.Since(last) < minEarlyTick {
				continue // the next tick runs it
			}
		}
		for _, id := range s.core.Tick() {
			s.log.Warn("client expired: no ping within client_ttl; its segments are unmounted", "client", id)
		}
		// Refusals during that pass asked for the room it just made: no
		// second pass for them.
		select {
		case <-s.evictNow:
		default:
		}
		last = time.Now()
	}
}

// startWrites answers PutStart and UpsertStart, and asks for an eviction
// pass at once when the core wants one (a key was refused for room that
// eviction may free) instead of at the next tick.
func (s *Server) startWrites(res []wire.PutStartResult, err error) (*wire.PutStartResp, error) {
	if s.core.EvictionDue() {
		select {
		case s.evictNow <- struct{}{}:
		default:
		}
	}
	return &wire.PutStartResp{Results: res}, err
}

func (s *Server) register() {
	c, mc := s.core, s.metrics.mc
	rpc.HandleFunc(s.rpc, wire.OpPing, func(r *wire.PingReq) (*wire.PingResp, error) {
		mc.ping.call(nil)
		return &wire.PingResp{Known: c.Ping(r.ClientID), OffloadWork: c.OffloadPending(r.ClientID),
			OffloadEnabled: s.opts.EnableOffload}, nil
	})
	rpc.HandleFunc(s.rpc, wire.OpClientLeave, func(r *wire.LeaveReq) (*struct{}, error) {
		if c.ClientLeave(r.ClientID) {
			s.log.Info("client left", "client", r.ClientID)
		}
		return &struct{}{}, nil
	})
	rpc.HandleFunc(s.rpc, wire.OpMountSegment, func(r *wire.MountReq) (*wire.MountResp, error) {
		res, err := c.Mount(r.Seg, r.GrantKey)
		mc.mount.call(err)
		if res.TookOver != "" {
			s.log.Warn("segment taken over: its holder was silent (dead) and a new client has its name; the holder's "+
				"memory objects are dropped, its disk copies wait for the new client to claim them",
				"name", r.Seg.Name, "dead_client", res.TookOver, "silent", res.Silent.Round(time.Millisecond), "client", r.Seg.ClientID)
		}
		switch {
		case err == nil:
			s.log.Info("segment mounted", "name", r.Seg.Name, "id", res.ID, "size", r.Seg.Size, "client", r.Seg.ClientID)
		case wire.CodeOf(err) == wire.ErrSegmentAlreadyExists:
			// Debug: a client asks again for a while (its setup's takeover
			// wait) and logs the refusal itself, naming the holder.
			s.log.Debug("mount refused", "client", r.Seg.ClientID, "err", err)
		case wire.CodeOf(err) == wire.ErrInvalidParams:
			s.log.Warn("mount refused", "name", r.Seg.Name, "client", r.Seg.ClientID, "err", err)
		}
		return &wire.MountResp{SegID: res.ID}, err
	})
	rpc.HandleFunc(s.rpc, wire.OpUnmountSegment, func(r *wire.UnmountReq) (*struct{}, error) {
		grace := time.Duration(min(r.GraceMs, maxGraceMs)) * time.Millisecond
		err := c.DrainSegment(r.ClientID, r.Name, grace)
		mc.unmount.call(err)
		switch {
		case err != nil:
		case grace > 0:
			s.log.Info("segment draining: unmounted when its grace period ends", "name", r.Name, "client", r.ClientID, "grace", grace)
		default:
			s.log.Info("segment unmounted", "name", r.Name, "client", r.ClientID)
		}
		return &struct{}{}, err
	})
	rpc.HandleFunc(s.rpc, wire.OpUnmountLocalDisk, func(r *wire.UnmountLocalDiskReq) (*struct{}, error) {
		err := c.UnmountLocalDisk(r.ClientID)
		if err == nil {
			s.log.Info("SSD tier unmounted: its disk copies are forgotten", "client", r.ClientID)
		}
		return &struct{}{}, err
	})
	rpc.HandleFunc(s.rpc, wire.OpQuerySegments, func(r *wire.QuerySegmentsReq) (*wire.QuerySegmentsResp, error) {
		return &wire.QuerySegmentsResp{Segs: c.QuerySegments(r.IDs)}, nil
	})
	rpc.HandleFunc(s.rpc, wire.OpPutStart, func(r *wire.PutStartReq) (*wire.PutStartResp, error) {
		res, err := c.PutStart(r.ClientID, r.HostID, r.Keys, r.Sizes, r.Config)
		mc.putStarted(r, res, err)
		return s.startWrites(res, err)
	})
	rpc.HandleFunc(s.rpc, wire.OpPutEnd, func(r *wire.KeysReq) (*wire.CodesResp, error) {
		codes := c.PutEndHold(r.ClientID, r.Keys, r.Epochs, holdOf(r))
		mc.putEnd.codes(codes, notOK)
		return &wire.CodesResp{Codes: codes}, nil
	})
	rpc.HandleFunc(s.rpc, wire.OpPutUnhold, func(r *wire.KeysReq) (*struct{}, error) {
		c.PutUnhold(r.ClientID, r.Keys, r.Epochs, holdOf(r))
		return &struct{}{}, nil
	})
	rpc.HandleFunc(s.rpc, wire.OpPutRevoke, func(r *wire.KeysReq) (*wire.CodesResp, error) {
		codes := c.PutRevoke(r.ClientID, r.Keys, r.Epochs)
		mc.putRevoke.codes(codes, notOK)
		return &wire.CodesResp{Codes: codes}, nil
	})
	rpc.HandleFunc(s.rpc, wire.OpGetReplicas, func(r *wire.KeysReq) (*wire.GetReplicasResp, error) {
		if r.Peek {
			return &wire.GetReplicasResp{Results: c.PeekReplicas(r.Keys)}, nil
		}
		res := c.GetReplicas(r.Keys, r.ForRead)
		mc.got(res) // peeks are the SSD tier's, not gets
		return &wire.GetReplicasResp{Results: res}, nil
	})
	rpc.HandleFunc(s.rpc, wire.OpExist, func(r *wire.KeysReq) (*wire.CodesResp, error) {
		codes := c.Exist(r.Keys)
		mc.exist.codes(codes, existFailed)
		return &wire.CodesResp{Codes: codes}, nil
	})
	rpc.HandleFunc(s.rpc, wire.OpRemove, func(r *wire.RemoveReq) (*wire.CodesResp, error) {
		codes := c.Remove(r.Keys, r.Force)
		mc.remove.codes(codes, notOK)
		return &wire.CodesResp{Codes: codes}, nil
	})
	rpc.HandleFunc(s.rpc, wire.OpReplicaClear, func(r *wire.ReplicaClearReq) (*wire.KeysResp, error) {
		return &wire.KeysResp{Keys: c.ReplicaClear(r.ClientID, r.Keys, r.Segment)}, nil
	})
	rpc.HandleFunc(s.rpc, wire.OpRemoveByRegex, func(r *wire.RemoveByRegexReq) (*wire.CountResp, error) {
		n, err := c.RemoveByRegex(r.Pattern, r.Force)
		mc.removeRegex.call(err)
		return &wire.CountResp{N: n}, err
	})
	rpc.HandleFunc(s.rpc, wire.OpRemoveAll, func(r *wire.RemoveAllReq) (*wire.CountResp, error) {
		mc.removeAll.call(nil)
		return &wire.CountResp{N: c.RemoveAll(r.Force)}, nil
	})
	rpc.HandleFunc(s.rpc, wire.OpUpsertStart, func(r *wire.PutStartReq) (*wire.PutStartResp, error) {
		return s.startWrites(c.UpsertStart(r.ClientID, r.HostID, r.Keys, r.Sizes, r.Config))
	})
	rpc.HandleFunc(s.rpc, wire.OpReadDone, func(r *wire.KeysReq) (*struct{}, error) {
		c.ReadDone(r.Keys, r.Epochs)
		return &struct{}{}, nil
	})
	rpc.HandleFunc(s.rpc, wire.OpCreateTask, func(r *wire.CreateTaskReq) (*wire.TaskPlan, error) {
		plan, err := c.CreateTask(*r)
		if r.Kind == wire.TaskMove {
			mc.moveTask.call(err)
		} else {
			mc.copyTask.call(err)
		}
		return &plan, err
	})
	rpc.HandleFunc(s.rpc, wire.OpTaskDone, func(r *wire.TaskDoneReq) (*struct{}, error) {
		err := c.TaskDone(r.ClientID, r.ID, r.Code)
		mc.updateTask.call(err)
		return &struct{}{}, err
	})
	rpc.HandleFunc(s.rpc, wire.OpQueryTask, func(r *wire.QueryTaskReq) (*wire.TaskInfo, error) {
		info, err := c.QueryTask(r.ID)
		mc.queryTask.call(err)
		return &info, err
	})
	rpc.HandleFunc(s.rpc, wire.OpOffloadHeartbeat, func(r *wire.OffloadHeartbeatReq) (*wire.OffloadHeartbeatResp, error) {
		keys, sizes, drop := c.OffloadHeartbeat(r.ClientID, r.StorageID, r.Max)
		return &wire.OffloadHeartbeatResp{Keys: keys, Sizes: sizes, Drop: drop}, nil
	})
	rpc.HandleFunc(s.rpc, wire.OpNotifyOffloaded, func(r *wire.NotifyOffloadedReq) (*wire.CodesResp, error) {
		return &wire.CodesResp{Codes: c.NotifyOffloaded(r.ClientID, r.Endpoint, r.StorageID, r.Keys, r.Sizes, r.Epochs)}, nil
	})
	rpc.HandleFunc(s.rpc, wire.OpPlanJoin, func(r *wire.PlanJoinReq) (*wire.PlanJoinResp, error) {
		rank, err := c.PlanJoin(r.ClientID, r.Segment)
		return &wire.PlanJoinResp{Rank: rank}, err
	})
	rpc.HandleFunc(s.rpc, wire.OpPlanMembers, func(*wire.PlanMembersReq) (*wire.PlanMembersResp, error) {
		return &wire.PlanMembersResp{Members: c.PlanMembers()}, nil
	})
	rpc.HandleFunc(s.rpc, wire.OpEvictUntil, func(r *wire.EvictUntilReq) (*wire.EvictUntilResp, error) {
		if !(r.Ratio >= 0 && r.Ratio <= 1) {
			return nil, wire.Errorf(wire.ErrInvalidParams, "usage ratio %v is not in [0, 1]", r.Ratio)
		}
		res, usage := c.EvictUntil(r.Ratio)
		return &wire.EvictUntilResp{Objects: res.Objects, Bytes: res.Bytes, Usage: usage}, nil
	})
	rpc.HandleFunc(s.rpc, wire.OpRecoverDisk, func(r *wire.RecoverDiskReq) (*wire.CodesResp, error) {
		return &wire.CodesResp{Codes: c.RecoverDisk(r.ClientID, r.Endpoint, r.StorageID, r.Keys, r.Sizes)}, nil
	})
	rpc.HandleFunc(s.rpc, wire.OpEvictDiskReplicas, func(r *wire.KeysReq) (*wire.CodesResp, error) {
		codes := c.EvictDiskReplicas(r.ClientID, r.Keys)
		mc.evictDisk.codes(codes, notOK)
		return &wire.CodesResp{Codes: codes}, nil
	})
}

// holdOf is a request's HoldMS as a Duration. The core bounds a hold by
// PutStartDiscardTimeout; the hour here only keeps a peer's number from
// overflowing.
func holdOf(r *wire.KeysReq) time.Duration {
	return time.Duration(min(r.HoldMS, uint64(time.Hour/time.Millisecond))) * time.Millisecond
}
