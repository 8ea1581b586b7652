// flags.go defines the master's options and builds them from flags and a
// config file.

package server

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	"github.com/gostore/gostore/gostore/auth"
	"github.com/gostore/gostore/gostore/master"
	"github.com/gostore/gostore/gostore/master/ha"
	"github.com/gostore/gostore/gostore/wire"
)

// minRequestBytes and maxRequestBytes bound --rpc_max_request_bytes: below
// 64 KiB a client's ordinary requests (a mount, a small batch) would be
// refused; above 1 GiB a request is no metadata request.
const (
	minRequestBytes = 64 << 10
	maxRequestBytes = 1 << 30
)

// maxSpinMicros bounds --rpc_spin_us: a poll longer than 10 ms would hold a
// CPU through what is an idle client, not a burst.
const maxSpinMicros = 10000

// Options configure a master server. ParseFlags fills them from the command
// line of gostore-master, and the embedded master (bindings) uses the same
// parser, so both accept exactly the same flags.
type Options struct {
	RPCAddress  string
	RPCPort     int
	MetricsHost string // "": where RPCAddress is
	MetricsPort int    // 0 picks a free port; negative disables HTTP

	DefaultKVLeaseTTL      time.Duration
	DefaultKVSoftPinTTL    time.Duration
	AllowEvictSoftPinned   bool
	EvictionRatio          float64
	EvictionHighWatermark  float64
	ClientTTL              time.Duration
	PutStartDiscardTimeout time.Duration
	PutStartReleaseTimeout time.Duration

	EnableOffload  bool
	OffloadOnEvict bool
	// Promotion on hit and hot-object replicas (Mooncake's --promotion_*
	// and --dynamic_replication_*), as master.Config takes them.
	master.Promotion
	master.DynamicReplication

	// EnableMultiTenants gives each tenant (setup's tenant_id) its own
	// key space (tenants.go); TenantQuotaURI, a policy file
	// (TenantQuotaConnector "file"), their quotas (tenantpolicy.go).
	EnableMultiTenants   bool
	TenantQuotaConnector string
	TenantQuotaURI       string

	// KVEvents: the KV events publisher (--enable_kv_events and the
	// --kv_events_* flags; kvevents.go).
	KVEvents KVEventsOptions

	// StateDir, when set, holds the journal of every durable change and its
	// snapshots (every SnapshotInterval); Start restores from it.
	StateDir         string
	SnapshotInterval time.Duration
	// AckBeforeSync: changes are acknowledged once written, synced within
	// 100 ms (a machine crash loses at most that much).
	AckBeforeSync bool
	// RestoreQuarantine: see master.Config.RestoreQuarantine.
	RestoreQuarantine time.Duration

	// EnableHA: lead through an etcd lease (a standby until then), the
	// change log on etcd at EtcdEndpoints, under ClusterID.
	EnableHA      bool
	EtcdEndpoints []string
	ClusterID     string
	HALeaseTTL    time.Duration // default 5 s
	// HATail bounds the log on etcd kept before the leader's newest
	// snapshot (ha.Trim); zero fields take ha.DefaultTail's.
	HATail ha.Tail

	// Limits on one request (master.Config's): the longest key, the most
	// keys in one request, the largest object. Zero takes the core's
	// default.
	MaxKeyBytes    int
	MaxBatchKeys   int
	MaxObjectBytes uint64
	// Limits on one peer (rpc.ServerOptions'): the largest request body
	// (0: wire.MaxBody), the connections and the requests in flight from
	// one IP address (0: no limit).
	RPCMaxRequestBytes     int
	RPCMaxConnectionsPerIP int
	RPCMaxInflightPerIP    int
	// RPCSpinMicros is how long a connection polls for its client's next
	// request after an answer (rpc.ServerOptions.Spin); 0 never polls.
	RPCSpinMicros int

	// TickInterval is how often time-driven work runs: client expiry,
	// quarantine release, orphaned tasks, eviction.
	TickInterval time.Duration
	LogLevel     string
	// LogLevelGiven: a flag or the config file chose LogLevel (log_level,
	// or glog's minloglevel or v), rather than the default.
	LogLevelGiven bool

	// Unimplemented names the Mooncake flags given a value that asks for
	// what this master does not do; IgnoredKeys the config file's keys no
	// flag reads. Start warns about both in one line.
	Unimplemented []string
	IgnoredKeys   []string

	// Auth names the files every RPC connection and the HTTP endpoints
	// (but /metrics and /health) authenticate with; none: off, which
	// Start allows only on loopback unless AllowInsecure.
	Auth          auth.Options
	AllowInsecure bool

	Log *slog.Logger // nil: a text logger on stderr at LogLevel
}

// ErrVersion is ParseFlags' answer to --version.
var ErrVersion = errors.New("version requested")

// ParseFlags parses args (without the program name) with the names, units
// and syntax of Mooncake 0.3.13's master (docs/master-flags.md), and the
// file --config_path names; flags on the command line win over the file.
// Unknown flags are an error. --help prints the flags on errOut and returns
// flag.ErrHelp; --version returns ErrVersion. Other errors carry
// ErrInvalidParams.
func ParseFlags(args []string, errOut io.Writer) (Options, error) {
	var c cmdline
	if err := c.parse(args, "command line"); err != nil {
		return Options{}, wire.Errorf(wire.ErrInvalidParams, "%v", err)
	}
	if err := c.leftovers(); err != nil {
		return Options{}, wire.Errorf(wire.ErrInvalidParams, "%v", err)
	}
	switch {
	case c.help:
		if errOut != nil {
			printUsage(errOut)
		}
		return Options{}, flag.ErrHelp
	case c.version:
		return Options{}, ErrVersion
	}
	var fromFile []setting
	var ignored []string
	if path := c.last("config_path"); path != "" {
		var err error
		if fromFile, ignored, err = readConfig(path); err != nil {
			return Options{}, wire.Errorf(wire.ErrInvalidParams, "%v", err)
		}
	}
	st := flagState{given: map[string]bool{}}
	err := st.apply(append(fromFile, c.settings...))
	if err == nil {
		err = st.finish()
	}
	if err != nil {
		return Options{}, wire.Errorf(wire.ErrInvalidParams, "%v", err)
	}
	st.o.IgnoredKeys = ignored
	return st.o, nil
}

// apply gives every flag its last setting, or its default.
func (st *flagState) apply(settings []setting) error {
	final := make(map[*flagSpec]string, len(settings))
	for _, s := range settings {
		v, err := s.spec.canonical(s.value)
		if err == nil && s.spec.check != nil {
			err = s.spec.check(v)
		}
		if err != nil {
			return fmt.Errorf("%s: --%s: %v", s.from, s.spec.name, err)
		}
		final[s.spec] = v
		st.given[s.spec.name] = true
	}
	for i := range specs {
		f := &specs[i]
		v, given := final[f]
		if !given {
			v, _ = f.canonical(f.def) // every default parses: TestFlagTableMatchesMooncake
		}
		switch {
		case f.set != nil:
			if err := f.set(st, v); err != nil {
				return fmt.Errorf("--%s: %v", f.name, err)
			}
		case given && !f.isInert(v):
			st.o.Unimplemented = append(st.o.Unimplemented, f.name)
		}
	}
	return nil
}

// finish settles the flags that depend on others, then checks the result.
func (st *flagState) finish() error {
	o := &st.o
	o.RPCPort = st.port // Mooncake's older name, for when rpc_port is not given
	if st.given["rpc_port"] {
		o.RPCPort = st.rpcPort
	}
	if st.iface != "" {
		addr, err := interfaceIPv4(st.iface)
		if err != nil {
			return err
		}
		o.RPCAddress = addr
	}
	o.LogLevel, o.LogLevelGiven = st.logLevel()
	return o.validate()
}

// logLevel maps glog's minloglevel and v onto slog's levels when log_level
// is not given.
func (st *flagState) logLevel() (string, bool) {
	switch {
	case st.given["log_level"]:
		return st.o.LogLevel, true
	case st.minLogLevel >= 2:
		return "error", true
	case st.minLogLevel == 1:
		return "warn", true
	case st.verbosity > 0:
		return "debug", true
	}
	return "info", st.given["minloglevel"] || st.given["v"]
}

// interfaceIPv4 is the first IPv4 address of the named interface.
func interfaceIPv4(name string) (string, error) {
	ifc, err := net.InterfaceByName(name)
	if err != nil {
		return "", fmt.Errorf("--rpc_interface %s: %v", name, err)
	}
	addrs, err := ifc.Addrs()
	if err != nil {
		return "", fmt.Errorf("--rpc_interface %s: %v", name, err)
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil {
			return ipn.IP.String(), nil
		}
	}
	return "", fmt.Errorf("--rpc_interface %s has no IPv4 address", name)
}

// validate checks the options as a whole; each error names the flag and
// the value that was given.
func (o *Options) validate() error {
	// Zero would silently mean "the default" in the core: refuse it.
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{
		{"default_kv_lease_ttl", o.DefaultKVLeaseTTL}, {"default_kv_soft_pin_ttl", o.DefaultKVSoftPinTTL},
		{"client_ttl", o.ClientTTL}, {"tick_interval_ms", o.TickInterval},
		{"put_start_discard_timeout_sec", o.PutStartDiscardTimeout},
		{"put_start_release_timeout_sec", o.PutStartReleaseTimeout},
	} {
		if d.v <= 0 {
			return fmt.Errorf("--%s=%v: ttls, timeouts and the tick interval must be positive", d.flag, d.v)
		}
	}
	for _, r := range []struct {
		flag string
		v    float64
	}{{"eviction_ratio", o.EvictionRatio}, {"eviction_high_watermark_ratio", o.EvictionHighWatermark}} {
		if r.v <= 0 || r.v > 1 {
			return fmt.Errorf("--%s=%v: eviction ratios must lie in (0, 1]", r.flag, r.v)
		}
	}
	for _, n := range []struct {
		flag string
		v    int
	}{{"rpc_max_connections_per_ip", o.RPCMaxConnectionsPerIP}, {"rpc_max_inflight_per_ip", o.RPCMaxInflightPerIP},
		{"promotion_admission_threshold", o.PromotionAdmissionThreshold}, {"promotion_queue_limit", o.PromotionQueueLimit},
		{"promotion_max_per_heartbeat", o.PromotionMaxPerHeartbeat},
		{"dynamic_replication_max_memory_replicas", o.DynamicReplicationMaxMemoryReplicas},
		{"dynamic_replication_heat_window_seconds", int(o.DynamicReplicationHeatWindow / time.Second)}} {
		if n.v < 1 {
			return fmt.Errorf("--%s=%d: must be positive", n.flag, n.v)
		}
	}
	switch {
	case !(o.DynamicReplicationQPSThreshold > 0):
		return fmt.Errorf("--dynamic_replication_admission_qps_threshold=%v: must be above 0", o.DynamicReplicationQPSThreshold)
	case o.RPCPort < 0 || o.RPCPort > 65535:
		return fmt.Errorf("--rpc_port=%d (or --port): out of range, from 0 to 65535", o.RPCPort)
	case o.MetricsPort > 65535:
		return fmt.Errorf("--metrics_port=%d: out of range, at most 65535 (negative turns HTTP off)", o.MetricsPort)
	case o.TenantQuotaURI != "" && !o.EnableMultiTenants:
		return fmt.Errorf("--tenant_quota_connector_uri=%s needs --enable_multi_tenants", o.TenantQuotaURI)
	case o.TenantQuotaURI != "" && o.TenantQuotaConnector != "file":
		return fmt.Errorf("--tenant_quota_connector_type=%s: this master reads its quota policy from a file only (file)", o.TenantQuotaConnector)
	case o.EnableHA && len(o.EtcdEndpoints) == 0:
		return fmt.Errorf("--enable_ha needs --etcd_endpoints")
	case o.EnableHA && o.StateDir == "":
		return fmt.Errorf("--enable_ha needs --snapshot_backup_dir: each master keeps its snapshots on its own disk (etcd holds only the log's tail)")
	case o.EnableHA && o.MetricsPort < 0:
		return fmt.Errorf("--enable_ha needs the HTTP port (--metrics_port >= 0; 0 for a free one): the leader serves its snapshot to standbys there")
	case o.MaxKeyBytes < 1 || o.MaxKeyBytes > master.MaxKeyBytesLimit:
		return fmt.Errorf("--max_key_bytes=%d: from 1 to %d (the longest key the SSD tier stores)",
			o.MaxKeyBytes, master.MaxKeyBytesLimit)
	case o.MaxBatchKeys < master.MinMaxBatchKeys:
		return fmt.Errorf("--max_batch_keys=%d: at least %d (a client's own batches send that many)",
			o.MaxBatchKeys, master.MinMaxBatchKeys)
	case o.MaxObjectBytes < 1:
		return fmt.Errorf("--max_object_bytes=%d: must be positive", o.MaxObjectBytes)
	case o.RPCMaxRequestBytes < minRequestBytes || o.RPCMaxRequestBytes > maxRequestBytes:
		return fmt.Errorf("--rpc_max_request_bytes=%d: from %d to %d", o.RPCMaxRequestBytes, minRequestBytes, maxRequestBytes)
	case o.RPCSpinMicros < 0 || o.RPCSpinMicros > maxSpinMicros:
		return fmt.Errorf("--rpc_spin_us=%d: from 0 to %d", o.RPCSpinMicros, maxSpinMicros)
	}
	if _, err := parseLevel(o.LogLevel); err != nil {
		return err
	}
	return nil
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return l, fmt.Errorf("--log_level=%q: %v (debug, info, warn or error)", s, err)
	}
	return l, nil
}

// printUsage lists the flags that act, then the names accepted without
// effect.
func printUsage(w io.Writer) {
	fmt.Fprint(w, `Usage: gostore-master [flags]

Flags take the names of Mooncake 0.3.13's master, and gflags' syntax:
--name=value, --name value, and for booleans --name and --noname.

`)
	var inert []string
	for i := range specs {
		f := &specs[i]
		switch {
		case f.help != "":
			fmt.Fprintf(w, "  -%s (%s) default: %q\n      %s\n", f.name, typeName(f), f.def, f.help)
		case f.set == nil:
			inert = append(inert, "--"+f.name)
		}
	}
	fmt.Fprintf(w, "\ngflags' --flagfile, --fromenv, --tryfromenv, --undefok, --help and --version\nwork as in gflags.\n\n")
	fmt.Fprintf(w, "Accepted for Mooncake compatibility, with no effect here (a warning at start\nnames those given a value that asks for something):\n")
	line := " "
	for _, name := range inert {
		if len(line)+len(name) > 78 {
			fmt.Fprintln(w, line)
			line = " "
		}
		line += " " + name
	}
	fmt.Fprintln(w, line)
}

func typeName(f *flagSpec) string {
	switch f.unit {
	case time.Millisecond:
		return "duration, plain numbers in ms"
	case time.Second:
		return "duration, plain numbers in s"
	}
	return f.gtype
}
