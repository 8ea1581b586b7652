// flagtable.go lists every flag the master accepts: Mooncake 0.3.13's
// master flags (its own, gflags' and glog's), whether this master acts on
// each, and gostore's own.

package server

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/gostore/gostore/gostore/master"
	"github.com/gostore/gostore/gostore/wire"
)

// flagSpec is one flag. Values reach set in canonical form (see canonical),
// so setters and inert checks compare and convert plain text.
type flagSpec struct {
	name string
	// gtype is the value's type as gflags names it (bool, string, int32,
	// int64, uint32, uint64, double): Mooncake's type for its flags.
	gtype string
	// unit makes the flag a duration: a plain integer counts unit, and
	// 5s, 500ms, 2m are accepted too (Mooncake's TTL flags are strings
	// read that way; its second and millisecond integers are not).
	unit time.Duration
	def  string // the default, Mooncake's unless docs/master-flags.md says why not
	help string // for --help, set flags only
	// set applies the value. Nil: accepted for Mooncake compatibility but
	// not implemented; giving it a value that is not inert earns a warning.
	set func(st *flagState, v string) error
	// inert reports whether a value asks for nothing this master lacks
	// (nil: the default does, and nothing else).
	inert func(v string) bool
	// check refuses values Mooncake's master refuses, for flags that are
	// not implemented (a typo must fail here as it fails there).
	check func(v string) error
	// fileKey is the flag's key in a --config_path file: the name unless
	// set; "-" when the file cannot set it (as in Mooncake).
	fileKey string
	// special flags act while the command line is read (flagfile, help...).
	special bool
}

// flagState is what the flags build before Options is checked.
type flagState struct {
	o           Options
	given       map[string]bool // flags given on the command line or in the file
	rpcPort     int
	port        int
	iface       string
	minLogLevel int
	verbosity   int
}

// canonical checks v against the flag's type and spells it one way:
// booleans true/false, integers in decimal, durations in nanoseconds.
func (f *flagSpec) canonical(v string) (string, error) {
	if f.unit != 0 {
		d, err := f.duration(v)
		return strconv.FormatInt(int64(d), 10), err
	}
	switch f.gtype {
	case "bool":
		b, err := parseBool(v)
		return strconv.FormatBool(b), err
	case "int32", "int64":
		n, err := parseInt(v, bitsOf(f.gtype))
		return strconv.FormatInt(n, 10), err
	case "uint32", "uint64":
		n, err := parseUint(v, bitsOf(f.gtype))
		return strconv.FormatUint(n, 10), err
	case "double":
		x, err := parseDouble(v)
		return strconv.FormatFloat(x, 'g', -1, 64), err
	}
	return v, nil
}

// duration reads a duration flag. Where Mooncake's flag is an integer, the
// integer spellings gflags takes (0x10, +5) count the unit; anything else
// is parseDuration's.
func (f *flagSpec) duration(v string) (time.Duration, error) {
	if f.gtype == "int64" || f.gtype == "uint64" {
		if n, err := parseInt(v, 64); err == nil {
			if n > math.MaxInt64/int64(f.unit) || n < math.MinInt64/int64(f.unit) {
				return 0, fmt.Errorf("duration %q is too large", v)
			}
			return time.Duration(n) * f.unit, nil
		}
	}
	return parseDuration(v, f.unit)
}

func bitsOf(gtype string) int {
	if gtype == "int32" || gtype == "uint32" {
		return 32
	}
	return 64
}

// isInert reports whether v (canonical) leaves the master as it is.
func (f *flagSpec) isInert(v string) bool {
	if f.inert != nil {
		return f.inert(v)
	}
	def, _ := f.canonical(f.def) // every default parses: TestFlagTableMatchesMooncake
	return v == def
}

// key is the flag's config-file key, or "" when the file cannot set it.
func (f *flagSpec) key() string {
	switch f.fileKey {
	case "":
		return f.name
	case "-":
		return ""
	}
	return f.fileKey
}

// Setters over Options fields, fed canonical values.

func asString(v string) (string, error) { return v, nil }
func asBool(v string) (bool, error)     { return strconv.ParseBool(v) }
func asInt(v string) (int, error)       { return strconv.Atoi(v) }
func asUint64(v string) (uint64, error) { return strconv.ParseUint(v, 10, 64) }
func asUint32(v string) (uint32, error) {
	n, err := strconv.ParseUint(v, 10, 32)
	return uint32(n), err
}
func asFloat(v string) (float64, error) { return strconv.ParseFloat(v, 64) }
func asDuration(v string) (time.Duration, error) {
	n, err := strconv.ParseInt(v, 10, 64)
	return time.Duration(n), err
}

func to[T any](field func(*Options) *T, parse func(string) (T, error)) func(*flagState, string) error {
	return func(st *flagState, v string) error {
		x, err := parse(v)
		*field(&st.o) = x
		return err
	}
}

func toState[T any](field func(*flagState) *T, parse func(string) (T, error)) func(*flagState, string) error {
	return func(st *flagState, v string) error {
		x, err := parse(v)
		*field(st) = x
		return err
	}
}

func nothing(*flagState, string) error { return nil }

// splitEndpoints reads "a;b" or "a,b" (Mooncake writes semicolons).
func splitEndpoints(v string) []string {
	var out []string
	for _, e := range strings.FieldsFunc(v, func(r rune) bool { return r == ';' || r == ',' }) {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

func always(string) bool { return true }

func oneOf(values ...string) func(string) error {
	return func(v string) error {
		for _, ok := range values {
			if v == ok {
				return nil
			}
		}
		return fmt.Errorf("%q is not one of %q", v, values)
	}
}

// mc is a Mooncake flag this master accepts and does not act on.
func mc(name, gtype, def string) flagSpec { return flagSpec{name: name, gtype: gtype, def: def} }

// specs is the table, in the order of Mooncake's --help: its master's
// flags, then gflags', then glog's, then gostore's.
var specs = []flagSpec{
	mc("allocation_strategy", "string", "random"),
	{name: "allow_evict_soft_pinned_objects", gtype: "bool", def: "true",
		help: "let eviction take soft-pinned objects once no other object is left",
		set:  to(func(o *Options) *bool { return &o.AllowEvictSoftPinned }, asBool)},
	mc("batch_oplog_retry_timeout_sec", "uint32", "180"),
	{name: "client_ttl", gtype: "int64", unit: time.Second, def: "10", fileKey: "client_live_ttl_sec",
		help: "how long a client may stay silent before the master drops it and its segments (seconds, or 5s, 1m)",
		set:  to(func(o *Options) *time.Duration { return &o.ClientTTL }, asDuration)},
	{name: "cluster_id", gtype: "string", def: "mooncake_cluster",
		help: "names the cluster's keys on etcd (--enable_ha)",
		set:  to(func(o *Options) *string { return &o.ClusterID }, asString)},
	{name: "config_path", gtype: "string", def: "", fileKey: "-", set: nothing,
		help: "a JSON (.json) or YAML (.yaml, .yml) file of flag values; flags given on the command line win"},
	mc("cxl_path", "string", "/dev/dax0.0"),
	mc("cxl_size", "uint64", "8589934592"),
	{name: "default_kv_lease_ttl", gtype: "string", unit: time.Millisecond, def: "10000",
		help: "how long a read protects an object from removal and eviction (milliseconds, or 500ms, 10s, 1m)",
		set:  to(func(o *Options) *time.Duration { return &o.DefaultKVLeaseTTL }, asDuration)},
	{name: "default_kv_soft_pin_ttl", gtype: "string", unit: time.Millisecond, def: "1800000",
		help: "how long a soft pin protects an object after its last read (milliseconds, or 30m, 1h)",
		set:  to(func(o *Options) *time.Duration { return &o.DefaultKVSoftPinTTL }, asDuration)},
	{name: "dynamic_replication_admission_qps_threshold", gtype: "double", def: "0.8",
		help: "reads per second of the heat window that make an object hot (ceil(qps x window) reads); above 0",
		set:  to(func(o *Options) *float64 { return &o.DynamicReplicationQPSThreshold }, asFloat)},
	{name: "dynamic_replication_heat_window_seconds", gtype: "uint32", def: "10",
		help: "the window (seconds) an object's reads are counted over for --dynamic_replication_mode; at least 1",
		set: func(st *flagState, v string) error {
			n, err := asInt(v)
			st.o.DynamicReplicationHeatWindow = time.Duration(n) * time.Second
			return err
		}},
	{name: "dynamic_replication_max_memory_replicas", gtype: "uint64", def: "2",
		help: "memory replicas a hot object may have, the extra ones included; at least 1",
		set:  to(func(o *Options) *int { return &o.DynamicReplicationMaxMemoryReplicas }, asInt)},
	{name: "dynamic_replication_mode", gtype: "string", def: "off", check: oneOf("off", "observe", "enforce"),
		help: "hot-object replicas: off, observe (count hot objects only) or enforce (add memory replicas on other segments)",
		set:  to(func(o *Options) *string { return &o.DynamicReplicationMode }, asString)}, // check ran first
	mc("enable_cxl", "bool", "false"),
	mc("enable_disk_eviction", "bool", "true"),
	{name: "enable_ha", gtype: "bool", def: "false",
		help: "high availability: lead through an etcd lease (a standby until then), the change log on etcd",
		set:  to(func(o *Options) *bool { return &o.EnableHA }, asBool)},
	mc("enable_http_metadata_server", "bool", "false"),
	{name: "enable_kv_events", gtype: "bool", def: "false",
		help: "publish KV events (stored/removed/all cleared, with medium and tenant) on --kv_events_bind_endpoint over ZeroMQ",
		set:  to(func(o *Options) *bool { return &o.KVEvents.Enable }, asBool)},
	mc("enable_metadata_cleanup_on_timeout", "bool", "false"),
	// Mooncake logs a summary of its metrics periodically by default; this
	// master does not, so only asking for it (true) earns the warning.
	{name: "enable_metric_reporting", gtype: "bool", def: "true", inert: func(v string) bool { return v == "false" }},
	{name: "enable_multi_tenants", gtype: "bool", def: "false",
		help: "each tenant (a client's setup tenant_id) has its own key space",
		set:  to(func(o *Options) *bool { return &o.EnableMultiTenants }, asBool)},
	{name: "enable_offload", gtype: "bool", def: "false",
		help: "accept SSD tiers: clients persist objects, eviction drops a memory copy once its disk copy exists",
		set:  to(func(o *Options) *bool { return &o.EnableOffload }, asBool)},
	mc("enable_oplog", "bool", "false"),
	{name: "enable_snapshot", gtype: "bool", def: "false", set: nothing,
		help: "accepted: a --snapshot_backup_dir turns the journal and its snapshots on"},
	{name: "enable_snapshot_restore", gtype: "bool", def: "false", set: nothing,
		help: "accepted: a master with a --snapshot_backup_dir always restores from it"},
	{name: "etcd_endpoints", gtype: "string", def: "",
		help: "the etcd cluster for --enable_ha: host:port;host:port (or commas)",
		set: func(st *flagState, v string) error {
			st.o.EtcdEndpoints = splitEndpoints(v)
			return nil
		}},
	{name: "eviction_high_watermark_ratio", gtype: "double", def: "0.9",
		help: "pool usage above which eviction passes run, in (0, 1]",
		set:  to(func(o *Options) *float64 { return &o.EvictionHighWatermark }, asFloat)},
	{name: "eviction_ratio", gtype: "double", def: "0.05",
		help: "share of the evictable objects one eviction pass frees, in (0, 1]",
		set:  to(func(o *Options) *float64 { return &o.EvictionRatio }, asFloat)},
	mc("global_file_segment_size", "int64", "9223372036854775807"),
	mc("ha_backend_connstring", "string", ""),
	mc("ha_backend_type", "string", "etcd"),
	mc("http_metadata_server_host", "string", "0.0.0.0"),
	mc("http_metadata_server_port", "int32", "8080"),
	{name: "kv_events_additional_salt", gtype: "string", def: "",
		help: "stamped on every KV event as additional_salt (none: null)",
		set:  to(func(o *Options) *string { return &o.KVEvents.AdditionalSalt }, asString)},
	{name: "kv_events_backend_id", gtype: "string", def: "",
		help: "names this master's KV event stream (backend_id of every event); required with --enable_kv_events",
		set:  to(func(o *Options) *string { return &o.KVEvents.BackendID }, asString)},
	{name: "kv_events_bind_endpoint", gtype: "string", def: "",
		help: "the KV events PUB socket, tcp://host:port (host * for every interface; unauthenticated: off loopback it wants --allow_insecure)",
		set:  to(func(o *Options) *string { return &o.KVEvents.BindEndpoint }, asString)},
	{name: "kv_events_block_size", gtype: "uint32", def: "0",
		help: "stamped on every KV event as block_size (tokens per block)",
		set:  to(func(o *Options) *uint32 { return &o.KVEvents.BlockSize }, asUint32)},
	{name: "kv_events_dp_rank", gtype: "uint32", def: "0",
		help: "the data-parallel rank of every KV event batch (and event)",
		set:  to(func(o *Options) *uint32 { return &o.KVEvents.DPRank }, asUint32)},
	{name: "kv_events_emit_legacy_compat", gtype: "bool", def: "true",
		help: "KV events carry the engines' fields (type, block_hashes...) that vLLM's and SGLang's decoders need",
		set:  to(func(o *Options) *bool { return &o.KVEvents.LegacyCompat }, asBool)},
	{name: "kv_events_emit_object_key", gtype: "bool", def: "true",
		help: "KV events name their key (object_key); without it, keys that are not a decimal or 0x-hex u64 hash are not published",
		set:  to(func(o *Options) *bool { return &o.KVEvents.ObjectKey }, asBool)},
	{name: "kv_events_lora_name", gtype: "string", def: "",
		help: "stamped on every KV event as lora_name (none: null)",
		set:  to(func(o *Options) *string { return &o.KVEvents.LoraName }, asString)},
	{name: "kv_events_model_name", gtype: "string", def: "",
		help: "stamped on every KV event as model_name (none: null)",
		set:  to(func(o *Options) *string { return &o.KVEvents.ModelName }, asString)},
	{name: "kv_events_queue_capacity", gtype: "uint32", def: "65536",
		help: "KV events waiting for the publisher; when full the oldest is dropped and counted (0: unbounded)",
		set:  to(func(o *Options) *uint32 { return &o.KVEvents.QueueCapacity }, asUint32)},
	{name: "kv_events_tenant_id", gtype: "string", def: "default",
		help: "the tenant_id of KV events for objects of the default tenant",
		set:  to(func(o *Options) *string { return &o.KVEvents.TenantID }, asString)},
	// Bounds a per-request soft pin TTL, which this master's protocol does
	// not carry: every soft pin lasts default_kv_soft_pin_ttl.
	{name: "max_kv_soft_pin_ttl", gtype: "string", unit: time.Millisecond, def: "86400000"},
	mc("max_retry_attempts", "uint32", "10"),
	{name: "max_threads", gtype: "int32", def: "16", fileKey: "-"},
	mc("max_total_finished_tasks", "uint32", "10000"),
	mc("max_total_pending_tasks", "uint32", "10000"),
	mc("max_total_processing_tasks", "uint32", "10000"),
	{name: "memory_allocator", gtype: "string", def: "offset", check: oneOf("offset", "cachelib")},
	// Mooncake's default is 0.0.0.0; here the HTTP listener follows
	// --rpc_address unless this is given, so that a master bound to one
	// address does not expose /metrics on all of them.
	{name: "metrics_host", gtype: "string", def: "",
		help: "the address the HTTP listener (/metrics, /health...) binds to; default: --rpc_address's. \"::\" takes IPv6 and IPv4",
		set:  to(func(o *Options) *string { return &o.MetricsHost }, asString)},
	{name: "metrics_port", gtype: "int32", def: "9003",
		help: "the HTTP port; 0 picks a free one, -1 turns HTTP off",
		set:  to(func(o *Options) *int { return &o.MetricsPort }, asInt)},
	mc("nof_eviction_high_watermark_ratio", "double", "0.9"),
	mc("nof_eviction_ratio", "double", "0.05"),
	mc("nof_heartbeat_failures_threshold", "uint32", "3"),
	mc("nof_heartbeat_interval_sec", "int64", "10"),
	mc("nof_heartbeat_probe_timeout_ms", "uint32", "1000"),
	mc("offload_cap_ratio", "double", "0.5"),
	mc("offload_force_evict", "bool", "false"),
	{name: "offload_on_evict", gtype: "bool", def: "false",
		help: "with --enable_offload: ask for disk copies only of the objects eviction picks",
		set:  to(func(o *Options) *bool { return &o.OffloadOnEvict }, asBool)},
	mc("offloading_queue_limit", "uint64", "50000"),
	mc("oplog_batch_max_entries", "uint32", "1024"),
	mc("oplog_poll_interval_ms", "int32", "1000"),
	mc("pending_task_timeout_sec", "uint64", "300"),
	mc("pod_name", "string", ""),
	mc("pod_namespace", "string", ""),
	{name: "port", gtype: "int32", def: "50051", fileKey: "-",
		help: "the RPC port when --rpc_port is not given (Mooncake's older name for it)",
		set:  toState(func(st *flagState) *int { return &st.port }, asInt)},
	mc("processing_task_timeout_sec", "uint64", "300"),
	{name: "promotion_admission_threshold", gtype: "uint32", def: "2",
		help: "disk reads of an object (counted by a count-min sketch) before --promotion_on_hit queues it; at least 1",
		set:  to(func(o *Options) *int { return &o.PromotionAdmissionThreshold }, asInt)},
	{name: "promotion_max_per_heartbeat", gtype: "uint32", def: "1",
		help: "promotions one offload heartbeat of a disk holder takes; at least 1",
		set:  to(func(o *Options) *int { return &o.PromotionMaxPerHeartbeat }, asInt)},
	{name: "promotion_on_hit", gtype: "bool", def: "false",
		help: "with --enable_offload: an object read from its disk copy often enough gets a memory replica back",
		set:  to(func(o *Options) *bool { return &o.PromotionOnHit }, asBool)},
	{name: "promotion_queue_limit", gtype: "uint32", def: "50000",
		help: "promotions queued or running at once, at most; at least 1",
		set:  to(func(o *Options) *int { return &o.PromotionQueueLimit }, asInt)},
	{name: "put_start_discard_timeout_sec", gtype: "uint64", unit: time.Second, def: "30",
		help: "age after which an unfinished put may be taken over by a new put of its key (seconds, or 30s, 1m)",
		set:  to(func(o *Options) *time.Duration { return &o.PutStartDiscardTimeout }, asDuration)},
	{name: "put_start_release_timeout_sec", gtype: "uint64", unit: time.Second, def: "600",
		help: "age after which the space of a taken-over put is reused (seconds, or 10m)",
		set:  to(func(o *Options) *time.Duration { return &o.PutStartReleaseTimeout }, asDuration)},
	mc("quota_bytes", "uint64", "0"),
	mc("root_fs_dir", "string", ""),
	{name: "rpc_address", gtype: "string", def: "127.0.0.1",
		help: "the address the RPC listener binds to (and the HTTP one, without --metrics_host); another than loopback needs authentication or --allow_insecure",
		set:  to(func(o *Options) *string { return &o.RPCAddress }, asString)},
	mc("rpc_conn_timeout_seconds", "int32", "0"),
	// Go sets TCP_NODELAY on every connection: true is what happens.
	mc("rpc_enable_tcp_no_delay", "bool", "true"),
	{name: "rpc_interface", gtype: "string", def: "",
		help: "a network interface whose IPv4 address replaces --rpc_address",
		set:  toState(func(st *flagState) *string { return &st.iface }, asString)},
	{name: "rpc_port", gtype: "int32", def: "0",
		help: "the RPC port; 0 picks a free one. Without it, --port's",
		set:  toState(func(st *flagState) *int { return &st.rpcPort }, asInt)},
	mc("rpc_thread_num", "int32", "0"),
	{name: "snapshot_backup_dir", gtype: "string", def: "",
		help: "directory of the master's journal and snapshots: a master started on it again loses no object",
		set:  to(func(o *Options) *string { return &o.StateDir }, asString)},
	mc("snapshot_catalog_backend_connstring", "string", ""),
	mc("snapshot_catalog_backend_type", "string", ""),
	mc("snapshot_catalog_store_connstring", "string", ""),
	mc("snapshot_catalog_store_type", "string", ""),
	mc("snapshot_child_timeout_seconds", "uint64", "300"),
	{name: "snapshot_interval_seconds", gtype: "uint64", unit: time.Second, def: "600",
		help: "how often the journal is folded into a snapshot (seconds, or 30s, 5m)",
		set:  to(func(o *Options) *time.Duration { return &o.SnapshotInterval }, asDuration)},
	mc("snapshot_object_store_type", "string", ""),
	mc("snapshot_payload_backend_type", "string", ""),
	mc("snapshot_payload_store_type", "string", ""),
	mc("snapshot_retention_count", "uint32", "2"),
	{name: "tenant_quota_connector_type", gtype: "string", def: "file",
		help: "where the tenants' quota policy is read: file (the only one here)",
		set:  to(func(o *Options) *string { return &o.TenantQuotaConnector }, asString)},
	{name: "tenant_quota_connector_uri", gtype: "string", def: "",
		help: "with --enable_multi_tenants: the YAML quota policy file, read again when it changes",
		set:  to(func(o *Options) *string { return &o.TenantQuotaURI }, asString)},
	{name: "mmap_arena_pool_size", gtype: "uint64", def: "8589934592", fileKey: "-"},
	{name: "use_mmap_arena_allocator", gtype: "bool", def: "false", fileKey: "-"},

	// gflags' own flags act while the command line is read (cmdline.go).
	gflag("flagfile", "string", ""),
	gflag("fromenv", "string", ""),
	gflag("tryfromenv", "string", ""),
	gflag("undefok", "string", ""),
	{name: "tab_completion_columns", gtype: "int32", def: "80", fileKey: "-"},
	{name: "tab_completion_word", gtype: "string", def: "", fileKey: "-"},
	gflag("help", "bool", "false"),
	gflag("helpfull", "bool", "false"),
	gflag("helpmatch", "string", ""),
	gflag("helpon", "string", ""),
	gflag("helppackage", "bool", "false"),
	gflag("helpshort", "bool", "false"),
	gflag("helpxml", "bool", "false"),
	gflag("version", "bool", "false"),

	// glog's flags. Mooncake's master logs to stderr unless --log_dir is
	// given, whatever the stderr flags say; so does this one, always.
	glog("alsologtoemail", "string", ""),
	{name: "alsologtostderr", gtype: "bool", def: "false", fileKey: "-", inert: always},
	glog("colorlogtostderr", "bool", "false"),
	glog("drop_log_memory", "bool", "true"),
	glog("log_backtrace_at", "string", ""),
	glog("log_dir", "string", ""),
	glog("log_link", "string", ""),
	glog("log_prefix", "bool", "true"),
	glog("logbuflevel", "int32", "0"),
	glog("logbufsecs", "int32", "30"),
	glog("logemaillevel", "int32", "999"),
	glog("logfile_mode", "int32", "436"),
	glog("logmailer", "string", "/bin/mail"),
	{name: "logtostderr", gtype: "bool", def: "false", fileKey: "-", inert: always},
	glog("max_log_size", "int32", "1800"),
	{name: "minloglevel", gtype: "int32", def: "0", fileKey: "-",
		help: "glog's severity floor, mapped onto --log_level when that is not given: 0 info, 1 warn, 2 and 3 error",
		set:  toState(func(st *flagState) *int { return &st.minLogLevel }, asInt)},
	{name: "stderrthreshold", gtype: "int32", def: "2", fileKey: "-", inert: always},
	glog("stop_logging_if_full_disk", "bool", "false"),
	glog("symbolize_stacktrace", "bool", "true"),
	{name: "v", gtype: "int32", def: "0", fileKey: "-",
		help: "glog's verbosity; above 0 it means --log_level=debug when neither that nor --minloglevel is given",
		set:  toState(func(st *flagState) *int { return &st.verbosity }, asInt)},
	glog("vmodule", "string", ""),

	// gostore's own.
	{name: "tick_interval_ms", unit: time.Millisecond, def: "100",
		help: "period of the time-driven work: client expiry, eviction, abandoned puts (milliseconds, or 100ms, 1s)",
		set:  to(func(o *Options) *time.Duration { return &o.TickInterval }, asDuration)},
	{name: "ha_lease_ttl_ms", unit: time.Millisecond, def: "5000",
		help: "--enable_ha: the leader's etcd lease; a dead leader is replaced this long after (milliseconds, or 2s)",
		set:  to(func(o *Options) *time.Duration { return &o.HALeaseTTL }, asDuration)},
	{name: "ha_log_tail_records", gtype: "uint64", def: "100000",
		help: "--enable_ha: the most records of the log on etcd kept before the leader's newest snapshot (a standby that far behind still catches up without a snapshot)",
		set:  to(func(o *Options) *uint64 { return &o.HATail.Records }, asUint64)},
	{name: "ha_log_tail_bytes", gtype: "uint64", def: "16777216",
		help: "--enable_ha: the most bytes of the log on etcd kept before the leader's newest snapshot; the leader also takes a snapshot early once the log since its last one holds four times this much",
		set: func(st *flagState, v string) error {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				return fmt.Errorf("not a byte count")
			}
			st.o.HATail.Bytes = n
			return nil
		}},
	{name: "journal_ack_before_sync", gtype: "bool", def: "false",
		help: "with --snapshot_backup_dir: answer once a change is written, before its fsync (a machine crash loses at most the last 100 ms of changes)",
		set:  to(func(o *Options) *bool { return &o.AckBeforeSync }, asBool)},
	{name: "restore_quarantine_ms", unit: time.Millisecond, def: "0",
		help: "after a restart on --snapshot_backup_dir, how long restored segments take no new objects at all (the ranges of writes in flight are held anyway; after a reboot at least until put_start_discard_timeout_sec after the journal's last write; milliseconds, or 5s)",
		set:  to(func(o *Options) *time.Duration { return &o.RestoreQuarantine }, asDuration)},
	{name: "log_level", gtype: "string", def: "info",
		help: "debug, info, warn or error",
		set:  to(func(o *Options) *string { return &o.LogLevel }, asString)},
	{name: "auth_secret_file", gtype: "string", def: "",
		help: "a file holding the shared secret (16 bytes or more) every client proves it holds; HTTP endpoints but /metrics and /health then want 'Authorization: Bearer <secret>'",
		set:  to(func(o *Options) *string { return &o.Auth.SecretFile }, asString)},
	{name: "tls_ca_file", gtype: "string", def: "",
		help: "mutual TLS: the CA (PEM) every client's certificate must chain to; with --tls_cert_file and --tls_key_file",
		set:  to(func(o *Options) *string { return &o.Auth.CAFile }, asString)},
	{name: "tls_cert_file", gtype: "string", def: "",
		help: "mutual TLS: the master's certificate (PEM), signed by --tls_ca_file's CA",
		set:  to(func(o *Options) *string { return &o.Auth.CertFile }, asString)},
	{name: "tls_key_file", gtype: "string", def: "",
		help: "mutual TLS: the private key (PEM) of --tls_cert_file",
		set:  to(func(o *Options) *string { return &o.Auth.KeyFile }, asString)},
	{name: "allow_insecure", gtype: "bool", def: "false",
		help: "serve without authentication on an address other than loopback (otherwise refused)",
		set:  to(func(o *Options) *bool { return &o.AllowInsecure }, asBool)},

	// gostore's limits on what one request or one peer may ask
	// (docs/master-flags.md says why each default).
	{name: "max_key_bytes", gtype: "int32", def: strconv.Itoa(master.DefaultMaxKeyBytes),
		help: "the longest key a request may name, in bytes (1 to 1048576); a longer one is refused INVALID_KEY",
		set:  to(func(o *Options) *int { return &o.MaxKeyBytes }, asInt)},
	{name: "max_batch_keys", gtype: "int32", def: strconv.Itoa(master.DefaultMaxBatchKeys),
		help: "the most keys one request may name (at least 4096); a larger batch is refused INVALID_PARAMS",
		set:  to(func(o *Options) *int { return &o.MaxBatchKeys }, asInt)},
	{name: "max_object_bytes", gtype: "uint64", def: strconv.FormatUint(master.DefaultMaxObjectBytes, 10),
		help: "the largest object a write may store, in bytes; a larger one is refused INVALID_PARAMS",
		set:  to(func(o *Options) *uint64 { return &o.MaxObjectBytes }, asUint64)},
	{name: "rpc_max_request_bytes", gtype: "int32", def: strconv.Itoa(wire.MaxBody),
		help: "the largest RPC request body, in bytes (65536 to 1073741824); a larger one is answered INVALID_PARAMS",
		set:  to(func(o *Options) *int { return &o.RPCMaxRequestBytes }, asInt)},
	{name: "rpc_max_connections_per_ip", gtype: "int32", def: "1024",
		help: "the most RPC connections from one IP address; one more is answered RPC_FAIL and closed",
		set:  to(func(o *Options) *int { return &o.RPCMaxConnectionsPerIP }, asInt)},
	{name: "rpc_max_inflight_per_ip", gtype: "int32", def: "256",
		help: "the most RPC requests from one IP address read and running at once; more wait for a slot",
		set:  to(func(o *Options) *int { return &o.RPCMaxInflightPerIP }, asInt)},
	{name: "kv_events_replay_endpoint", gtype: "string", def: "",
		help: "with --enable_kv_events: a ROUTER socket, tcp://host:port, where a subscriber sends a start sequence number and gets the buffered KV event batches from it (vLLM's replay protocol)",
		set:  to(func(o *Options) *string { return &o.KVEvents.ReplayEndpoint }, asString)},
	{name: "kv_events_format", gtype: "string", def: "array",
		help: "with --enable_kv_events: the batch's msgpack layout, array ([ts, events, rank]: Mooncake's, SGLang's, vLLM 0.32's) or map ({ts, events, data_parallel_rank}: vLLM's releases whose EventBatch is a map; replays answer [seq, payload] as theirs)",
		set:  to(func(o *Options) *string { return &o.KVEvents.Format }, asString)},
	{name: "rpc_spin_us", gtype: "int32", def: "200",
		help: "how long, in microseconds, a connection polls for its client's next request after an answer before it sleeps (0: never); see docs/operations.md",
		set:  to(func(o *Options) *int { return &o.RPCSpinMicros }, asInt)},
}

func gflag(name, gtype, def string) flagSpec {
	return flagSpec{name: name, gtype: gtype, def: def, fileKey: "-", special: true, set: nothing}
}

func glog(name, gtype, def string) flagSpec {
	return flagSpec{name: name, gtype: gtype, def: def, fileKey: "-"}
}

// specByName and specByKey index the table.
var specByName, specByKey = indexSpecs()

func indexSpecs() (map[string]*flagSpec, map[string]*flagSpec) {
	byName := make(map[string]*flagSpec, len(specs))
	byKey := make(map[string]*flagSpec, len(specs))
	for i := range specs {
		f := &specs[i]
		byName[f.name] = f
		if k := f.key(); k != "" {
			byKey[k] = f
		}
	}
	return byName, byKey
}
