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
	state   *durability  // nil without a state directory or HA
	leader  *ha.Leader   // nil without HA
	events  *kvPublisher // nil without --enable_kv_events
	done    chan struct{}

	// evictNow asks the tick loop for a pass before its next tick: a put
	// was refused for space that eviction may free.
	evictNow chan struct{}

	stop chan struct{}
	wg   sync.WaitGroup
	once sync.Once
}

// Start listens on the configured ports and serves until Close. It reads
// as its steps: check the settings, bind the RPC port, recover the state
// (or campaign for it), build the core, wire the RPC server, open the HTTP
// port, then start the goroutines.
func Start(opts Options) (*Server, error) {
	log := startLog(opts)
	if opts.TickInterval <= 0 {
		opts.TickInterval = 100 * time.Millisecond
	}
	warnIgnored(log, opts)
	guard, err := checkAuth(opts, log)
	if err != nil {
		return nil, err
	}
	if err := checkKVEvents(opts.KVEvents, opts.AllowInsecure); err != nil {
		return nil, err
	}
	// The RPC port is bound first: a master under HA advertises it while
	// it campaigns.
	rpcLn, err := net.Listen(listenNetwork(opts.RPCAddress), net.JoinHostPort(opts.RPCAddress, strconv.Itoa(opts.RPCPort)))
	if err != nil {
		return nil, listenErr("--rpc_port", opts.RPCPort, "--rpc_address", opts.RPCAddress, err)
	}
	state, saved, leader, err := recoverState(&opts, rpcLn, guard, log)
	if err != nil {
		rpcLn.Close()
		return nil, err
	}
	cfg := coreConfig(opts, state)
	events, err := kvEventsFor(opts, &cfg, log)
	if err != nil {
		rpcLn.Close()
		if state != nil {
			state.j.Close()
		}
		return nil, err
	}
	core := master.New(cfg)
	if saved != nil {
		if err := restoreSaved(opts, saved, core, log); err != nil {
			rpcLn.Close()
			state.j.Close()
			events.close()
			return nil, err
		}
	}
	policy, err := loadTenantPolicy(opts, core, log)
	if err != nil {
		rpcLn.Close()
		if state != nil {
			state.j.Close()
		}
		return nil, err
	}
	s := &Server{opts: opts, log: log, core: core, state: state, stop: make(chan struct{}),
		evictNow: make(chan struct{}, 1), rpcLn: rpcLn, leader: leader, events: events, done: make(chan struct{})}
	s.wireRPC(guard)
	if events != nil {
		events.registerMetrics(s.metrics.reg)
	}
	if opts.MetricsPort >= 0 {
		if err := s.serveHTTP(guard); err != nil {
			s.rpcLn.Close()
			if state != nil {
				state.j.Close()
			}
			events.close()
			return nil, err
		}
		s.advertiseSnapshots(guard)
	}
	if s.events != nil {
		s.events.start()
	}
	s.serveRPC()
	s.watchTenantPolicy(policy)
	s.watchLeadership()
	s.startSnapshots(saved != nil)
	// The addresses the sockets are bound to, as the kernel reports them
	// (a wildcard stays a wildcard), then where a local client dials.
	log.Info("master serving", "rpc_listen", s.rpcLn.Addr().String(), "http_listen", s.httpListen(),
		"rpc", s.Addr(), "http", s.HTTPAddr(), "auth", guard.Mode(), "offload", opts.EnableOffload,
		"lease_ttl", opts.DefaultKVLeaseTTL, "client_ttl", opts.ClientTTL, "multi_tenants", opts.EnableMultiTenants)
	return s, nil
}

// startLog is opts.Log, or a text logger on stderr at --log_level (info
// when that does not parse: the flags were checked before).
func startLog(opts Options) *slog.Logger {
	if opts.Log != nil {
		return opts.Log
	}
	lvl, err := parseLevel(opts.LogLevel)
	if err != nil {
		lvl = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl})).With("component", "master")
}

// checkAuth is the guard of the master's ports (nil without
// authentication): it refuses to serve without one on a port other hosts
// reach unless --allow_insecure, and warns when it does so.
func checkAuth(opts Options, log *slog.Logger) (*auth.Auth, error) {
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
	return guard, nil
}

// recoverState is where the master's state comes from and goes to: under
// HA it campaigns (advertising rpcLn) and leads; with a state directory it
// opens the journal. state is nil for neither, saved when nothing is to
// be restored. It may set opts.RestoreQuarantine (openState).
func recoverState(opts *Options, rpcLn net.Listener, guard *auth.Auth, log *slog.Logger) (
	state *durability, saved *savedState, leader *ha.Leader, err error) {
	switch {
	case opts.EnableHA:
		var st *master.State
		if state, st, leader, err = campaign(*opts, dialable(rpcLn.Addr()), guard, log); err == nil {
			saved = &savedState{st: st}
		}
	case opts.StateDir != "":
		state, saved, err = openState(opts, log)
	}
	return state, saved, leader, err
}

// coreConfig is the metadata core's configuration from the flags; the
// core reports its durable changes to state, when there is one.
func coreConfig(opts Options, state *durability) master.Config {
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
		Promotion:              opts.Promotion,
		DynamicReplication:     opts.DynamicReplication,
		MultiTenants:           opts.EnableMultiTenants,
		RestoreQuarantine:      opts.RestoreQuarantine,
		MaxKeyBytes:            opts.MaxKeyBytes,
		MaxBatchKeys:           opts.MaxBatchKeys,
		MaxObjectBytes:         opts.MaxObjectBytes,
	}
	if state != nil {
		cfg.OnChange = state.record
	}
	return cfg
}

// restoreSaved installs saved into the new core and logs what it made of
// it. The collector stays on: turned off for the restore, it saved under
// 5 % of a restart at 10^6 objects and raised the process's peak by a
// quarter (bench/scale's "master peak RSS").
func restoreSaved(opts Options, saved *savedState, core *master.Core, log *slog.Logger) error {
	rep, err := saved.restore(core)
	if err != nil { // a snapshot changed since Open found it whole
		return fmt.Errorf("--snapshot_backup_dir=%s: %w", opts.StateDir, err)
	}
	log.Info("state restored", "segments", rep.Segments, "objects", rep.Objects, "dropped", rep.Dropped,
		"held_ranges", rep.HeldRanges)
	if rep.BadSegments > 0 {
		log.Warn("restored state held segments no mount could have made: dropped, with their replicas",
			"bad_segments", rep.BadSegments)
	}
	return nil
}

// wireRPC makes the RPC server (metrics, limits, auth, handlers), with
// the durable ops answering only once the log holds their changes.
func (s *Server) wireRPC(guard *auth.Auth) {
	s.metrics = newMetrics(s.core)
	if s.state != nil {
		s.state.registerMetrics(s.metrics.reg)
	}
	s.rpc = s.newRPCServer()
	s.rpc.SetAuth(guard)
	s.register()
	if s.state != nil {
		s.state.waitForDisk(s.rpc)
	}
}

// serveHTTP opens the HTTP port (--metrics_host, else --rpc_address's
// host) and serves it in a goroutine.
func (s *Server) serveHTTP(guard *auth.Auth) error {
	opts := s.opts
	host, network := opts.RPCAddress, listenNetwork(opts.RPCAddress)
	if opts.MetricsHost != "" {
		host, network = opts.MetricsHost, metricsNetwork(opts.MetricsHost)
	}
	ln, err := net.Listen(network, net.JoinHostPort(host, strconv.Itoa(opts.MetricsPort)))
	if err != nil {
		hostFlag := "--metrics_host (else --rpc_address)"
		if opts.MetricsHost != "" {
			hostFlag = "--metrics_host"
		}
		return listenErr("--metrics_port", opts.MetricsPort, hostFlag, host, err)
	}
	s.httpLn = guard.HTTPListener(ln)
	s.http = &http.Server{Handler: guard.Guard(s.httpHandler(), openHTTP, s.log), ReadHeaderTimeout: 5 * time.Second}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.http.Serve(s.httpLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("http server stopped", "err", err)
		}
	}()
	return nil
}

// advertiseSnapshots names, on etcd, where this leader serves its
// snapshot: standbys whose state the log on etcd no longer reaches fetch
// it there. Without HA it does nothing.
func (s *Server) advertiseSnapshots(guard *auth.Auth) {
	if s.leader == nil {
		return
	}
	url := guard.HTTPScheme() + "://" + s.HTTPAddr() + snapshotPath
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	err := s.leader.Advertise(ctx, url)
	cancel()
	if err != nil {
		s.log.Error("ha: cannot name this leader's snapshot source on etcd: standbys behind the log's tail cannot catch up", "err", err)
	}
}

// serveRPC starts the RPC server's goroutine and the tick loop's.
func (s *Server) serveRPC() {
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		if err := s.rpc.Serve(s.rpcLn); err != nil {
			s.log.Error("rpc server stopped", "err", err)
		}
	}()
	go func() {
		defer s.wg.Done()
		s.tickLoop()
	}()
}

// watchLeadership, under HA, steps a leader whose lease lapsed down: it
// answers nothing more (another master may lead already) and Done closes.
func (s *Server) watchLeadership() {
	if s.leader == nil {
		return
	}
	go func() {
		select {
		case <-s.leader.Lost():
			s.log.Error("leadership lost: stepping down")
			s.stepDown()
		case <-s.stop:
		}
	}()
}

// startSnapshots starts the goroutine that folds the change log into
// snapshots every --snapshot_interval (10 minutes by default), the first
// at once after a restore. Without a state it does nothing.
func (s *Server) startSnapshots(restored bool) {
	if s.state == nil {
		return
	}
	interval := s.opts.SnapshotInterval
	if interval <= 0 {
		interval = 10 * time.Minute
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if restored {
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
		if s.events != nil {
			s.events.close() // after the RPCs: it publishes their last events
		}
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
