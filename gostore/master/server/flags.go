// flags.go defines the master's options and parses Mooncake's flag names.

package server

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"
)

// Options configure a master server. ParseFlags fills them from the command
// line of gostore-master, and the embedded master (bindings) uses the same
// parser, so both accept exactly the same flags.
type Options struct {
	RPCAddress  string
	RPCPort     int
	MetricsPort int // 0 picks a free port; negative disables HTTP

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
	EnableHA       bool
	EtcdEndpoints  string
	ClusterID      string

	// TickInterval is how often time-driven work runs: client expiry,
	// quarantine release, orphaned tasks, eviction.
	TickInterval time.Duration
	LogLevel     string

	Log *slog.Logger // nil: a text logger on stderr at LogLevel
}

// ParseFlags parses args (without the program name) using Mooncake's flag
// names and units. Unknown flags are an error.
func ParseFlags(args []string, errOut io.Writer) (Options, error) {
	var o Options
	fs := flag.NewFlagSet("gostore-master", flag.ContinueOnError)
	if errOut != nil {
		fs.SetOutput(errOut)
	} else {
		fs.SetOutput(io.Discard)
	}
	var leaseMS, softPinMS, clientTTLS, discardS, releaseS, tickMS int64
	fs.StringVar(&o.RPCAddress, "rpc_address", "0.0.0.0", "address the RPC server listens on")
	fs.IntVar(&o.RPCPort, "rpc_port", 50051, "RPC port (0 picks a free one)")
	fs.IntVar(&o.MetricsPort, "metrics_port", 9003, "HTTP port for /metrics, /health, /get_all_segments, /query_key (0 picks a free one, -1 disables)")
	fs.Int64Var(&leaseMS, "default_kv_lease_ttl", 10000, "lease granted by reads, in ms")
	fs.Int64Var(&softPinMS, "default_kv_soft_pin_ttl", 1800000, "soft pin duration, in ms")
	fs.BoolVar(&o.AllowEvictSoftPinned, "allow_evict_soft_pinned_objects", true, "let eviction take soft-pinned objects after the others")
	fs.Float64Var(&o.EvictionRatio, "eviction_ratio", 0.05, "share of objects one eviction pass frees")
	fs.Float64Var(&o.EvictionHighWatermark, "eviction_high_watermark_ratio", 0.90, "pool usage above which eviction starts")
	fs.Int64Var(&clientTTLS, "client_ttl", 10, "seconds a silent client keeps its segments")
	fs.Int64Var(&discardS, "put_start_discard_timeout_sec", 30, "age after which an unfinished put may be taken over, in s")
	fs.Int64Var(&releaseS, "put_start_release_timeout_sec", 600, "age after which a taken-over put's space is released, in s")
	fs.BoolVar(&o.EnableOffload, "enable_offload", false, "accept SSD offload from clients")
	fs.BoolVar(&o.OffloadOnEvict, "offload_on_evict", false, "offload objects to SSD when evicting")
	fs.BoolVar(&o.EnableHA, "enable_ha", false, "run as one of several masters elected through etcd")
	fs.StringVar(&o.EtcdEndpoints, "etcd_endpoints", "", "etcd endpoints for HA, separated by ';'")
	fs.StringVar(&o.ClusterID, "cluster_id", "gostore_cluster", "cluster name for HA keys")
	fs.Int64Var(&tickMS, "tick_interval_ms", 100, "period of time-driven work, in ms")
	fs.StringVar(&o.LogLevel, "log_level", "info", "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	o.DefaultKVLeaseTTL = time.Duration(leaseMS) * time.Millisecond
	o.DefaultKVSoftPinTTL = time.Duration(softPinMS) * time.Millisecond
	o.ClientTTL = time.Duration(clientTTLS) * time.Second
	o.PutStartDiscardTimeout = time.Duration(discardS) * time.Second
	o.PutStartReleaseTimeout = time.Duration(releaseS) * time.Second
	o.TickInterval = time.Duration(tickMS) * time.Millisecond
	return o, o.validate()
}

func (o *Options) validate() error {
	switch {
	case o.RPCPort < 0 || o.RPCPort > 65535:
		return fmt.Errorf("--rpc_port %d out of range", o.RPCPort)
	case o.MetricsPort > 65535:
		return fmt.Errorf("--metrics_port %d out of range", o.MetricsPort)
	case o.DefaultKVLeaseTTL <= 0 || o.DefaultKVSoftPinTTL <= 0 || o.ClientTTL <= 0 || o.TickInterval <= 0 ||
		o.PutStartDiscardTimeout <= 0 || o.PutStartReleaseTimeout <= 0:
		// Zero would silently mean "the default" in the core: refuse it.
		return fmt.Errorf("ttls, timeouts and the tick interval must be positive")
	case o.EvictionRatio <= 0 || o.EvictionRatio > 1 || o.EvictionHighWatermark <= 0 || o.EvictionHighWatermark > 1:
		return fmt.Errorf("eviction ratios must lie in (0, 1]")
	}
	if _, err := parseLevel(o.LogLevel); err != nil {
		return err
	}
	return nil
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return l, fmt.Errorf("--log_level %q: %v", s, err)
	}
	return l, nil
}
