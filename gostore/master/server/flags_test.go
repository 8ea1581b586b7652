package server

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gostore/gostore/gostore/wire"
)

// wheelFlag is a line of testdata/mooncake-0.3.13-master-flags.txt.
type wheelFlag struct{ name, gtype, def, origin string }

func wheelFlags(t *testing.T) []wheelFlag {
	t.Helper()
	f, err := os.Open("testdata/mooncake-0.3.13-master-flags.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []wheelFlag
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if line := sc.Text(); line != "" && line[0] != '#' {
			p := strings.Split(line, "\t")
			out = append(out, wheelFlag{p[0], p[1], strings.Trim(p[2], `"`), p[3]})
		}
	}
	if len(out) != 134 {
		t.Fatalf("%d wheel flags, want 134", len(out))
	}
	return out
}

// ourDefaults are the defaults that differ from the wheel's on purpose
// (docs/master-flags.md says why).
var ourDefaults = map[string]string{
	"metrics_host": "",          // the HTTP listener follows --rpc_address
	"rpc_address":  "127.0.0.1", // loopback unless an address is given: no unauthenticated port reachable by default
}

// ourFlags are gostore's own, not Mooncake's.
var ourFlags = map[string]bool{"tick_interval_ms": true, "kv_events_replay_endpoint": true, "kv_events_format": true, "log_level": true, "restore_quarantine_ms": true,
	"journal_ack_before_sync": true, "ha_lease_ttl_ms": true, "max_key_bytes": true, "max_batch_keys": true,
	"max_object_bytes": true, "rpc_max_request_bytes": true, "rpc_max_connections_per_ip": true,
	"rpc_max_inflight_per_ip": true, "auth_secret_file": true, "tls_ca_file": true, "tls_cert_file": true,
	"tls_key_file": true, "allow_insecure": true, "rpc_spin_us": true,
	"ha_log_tail_records": true, "ha_log_tail_bytes": true}

func TestFlagTableMatchesMooncake(t *testing.T) {
	wheel := map[string]bool{}
	for _, w := range wheelFlags(t) {
		wheel[w.name] = true
		f := specByName[w.name]
		if f == nil {
			t.Errorf("--%s (%s) is not in the table", w.name, w.gtype)
			continue
		}
		if f.gtype != w.gtype {
			t.Errorf("--%s: type %s, the wheel's is %s", w.name, f.gtype, w.gtype)
		}
		want, ok := ourDefaults[w.name]
		if !ok {
			want = w.def
		}
		got, err1 := f.canonical(f.def)
		exp, err2 := f.canonical(want)
		if err1 != nil || err2 != nil || got != exp {
			t.Errorf("--%s: default %q (%v), want %q (%v)", w.name, f.def, err1, want, err2)
		}
	}
	for _, f := range specs {
		if !wheel[f.name] && !ourFlags[f.name] {
			t.Errorf("--%s is in the table but not a Mooncake 0.3.13 flag", f.name)
		}
		if _, err := f.canonical(f.def); err != nil {
			t.Errorf("--%s: default %q: %v", f.name, f.def, err)
		}
	}
}

func parse(t *testing.T, args ...string) Options {
	t.Helper()
	o, err := ParseFlags(args, nil)
	if err != nil {
		t.Fatalf("%q: %v", args, err)
	}
	return o
}

func parseFails(t *testing.T, want string, args ...string) {
	t.Helper()
	_, err := ParseFlags(args, nil)
	if err == nil || !strings.Contains(err.Error(), want) || wire.CodeOf(err) != wire.ErrInvalidParams {
		t.Errorf("%q: error %v, want INVALID_PARAMS naming %q", args, err, want)
	}
}

// Every flag of the wheel is accepted in each of gflags' forms, at the
// wheel's default; a default never earns the warning but for
// enable_metric_reporting, whose default asks for periodic reports.
func TestEveryMooncakeFlagAccepted(t *testing.T) {
	for _, w := range wheelFlags(t) {
		forms := [][]string{{"--" + w.name + "=" + w.def}, {"-" + w.name + "=" + w.def}}
		if w.gtype == "bool" {
			forms = append(forms, []string{"--" + w.name}, []string{"--no" + w.name})
		} else {
			forms = append(forms, []string{"--" + w.name, w.def}, []string{"-" + w.name, w.def})
		}
		for _, args := range forms {
			o, err := ParseFlags(args, nil)
			switch {
			case w.gtype == "bool" && strings.HasPrefix(w.name, "help") && len(args[0]) == 2+len(w.name):
				if !errors.Is(err, flag.ErrHelp) {
					t.Errorf("%q: %v, want ErrHelp", args, err)
				}
			case w.name == "version" && args[0] == "--version":
				if !errors.Is(err, ErrVersion) {
					t.Errorf("%q: %v, want ErrVersion", args, err)
				}
			case w.name == "enable_ha" && args[0] == "--enable_ha":
				if err == nil || !strings.Contains(err.Error(), "--etcd_endpoints") {
					t.Errorf("%q alone: %v, want a request for --etcd_endpoints", args, err)
				}
			case err != nil:
				t.Errorf("%q: %v", args, err)
			case (w.gtype != "bool" || strings.Contains(args[0], "=")) && len(o.Unimplemented) > 0 && w.name != "enable_metric_reporting":
				t.Errorf("%q at the default warns about %v", args, o.Unimplemented)
			}
		}
	}
	o := parse(t, "--enable_metric_reporting")
	if !reflect.DeepEqual(o.Unimplemented, []string{"enable_metric_reporting"}) {
		t.Errorf("--enable_metric_reporting: unimplemented %v", o.Unimplemented)
	}
}

func TestGflagsSyntax(t *testing.T) {
	o := parse(t, "--enable-offload", "-client_ttl", "7", "--rpc_address", "-x", "--eviction_ratio=0x1p-3")
	if !o.EnableOffload || o.ClientTTL != 7*time.Second || o.RPCAddress != "-x" || o.EvictionRatio != 0.125 {
		t.Errorf("parsed %+v", o)
	}
	o = parse(t, "--enable_offload", "--noenable_offload", "--client_ttl=0x10", "--client_ttl=+12")
	if o.EnableOffload || o.ClientTTL != 12*time.Second {
		t.Errorf("later flags win: %+v", o)
	}
	for v, want := range map[string]bool{"yes": true, "Y": true, "1": true, "TRUE": true, "no": false, "f": false, "0": false} {
		if o := parse(t, "--enable_offload="+v); o.EnableOffload != want {
			t.Errorf("--enable_offload=%s: %v", v, o.EnableOffload)
		}
	}
	parseFails(t, `"on" is not a boolean`, "--enable_offload=on")
	parseFails(t, "missing its value", "--client_ttl")
	parseFails(t, "--client_ttl is not a boolean", "--noclient_ttl")
	parseFails(t, "takes no value", "--noenable_offload=true")
	parseFails(t, `unexpected argument "false"`, "--enable_offload", "false")
	parseFails(t, `unexpected argument "--client_ttl=5"`, "--", "--client_ttl=5")
	parseFails(t, "not an int32", "--metrics_port=1.5")
	parseFails(t, "not a uint64", "--cxl_size=-1")
	parseFails(t, "not a duration", "--client_ttl=010x")
	parseFails(t, "not an int64", "--nof_heartbeat_interval_sec=1e3")
	parseFails(t, "is not one of", "--memory_allocator=jemalloc")
	parseFails(t, "is not one of", "--dynamic_replication_mode=on")
}

func TestUnknownFlags(t *testing.T) {
	parseFails(t, "unknown flag --nope, --no_such_flag", "--nope=1", "--client_ttl=3", "--no_such_flag")
	parseFails(t, "unknown flag ---enable_offload", "---enable_offload")
	parseFails(t, "unknown flag --CLIENT_TTL", "--CLIENT_TTL=5")
	// --undefok lets listed names through, as in gflags.
	parse(t, "--undefok=nope,zap", "--nope=1", "--zap")
	parseFails(t, "unknown flag --zap", "--undefok=nope", "--nope=1", "--zap")
}

func TestHelpAndVersion(t *testing.T) {
	var out bytes.Buffer
	if _, err := ParseFlags([]string{"--helpshort"}, &out); !errors.Is(err, flag.ErrHelp) ||
		!strings.Contains(out.String(), "-rpc_port") || !strings.Contains(out.String(), "--enable_ha") {
		t.Errorf("--helpshort: %v\n%s", err, out.String())
	}
	parse(t, "--help=false", "--helpon=", "--version=false")
	if _, err := ParseFlags([]string{"--version"}, nil); !errors.Is(err, ErrVersion) {
		t.Errorf("--version: %v", err)
	}
}

func TestDurations(t *testing.T) {
	for _, c := range []struct {
		flag, value string
		want        time.Duration
		got         func(Options) time.Duration
	}{
		{"default_kv_lease_ttl", "7", 7 * time.Millisecond, leaseTTL},
		{"default_kv_lease_ttl", "5s", 5 * time.Second, leaseTTL},
		{"default_kv_lease_ttl", " 5 S ", 5 * time.Second, leaseTTL},
		{"default_kv_lease_ttl", "500ms", 500 * time.Millisecond, leaseTTL},
		{"default_kv_lease_ttl", "2m", 2 * time.Minute, leaseTTL},
		{"default_kv_lease_ttl", "1H", time.Hour, leaseTTL},
		{"default_kv_lease_ttl", "1m30s", 90 * time.Second, leaseTTL}, // Go's syntax: more than Mooncake takes
		{"default_kv_lease_ttl", "1.5s", 1500 * time.Millisecond, leaseTTL},
		{"default_kv_soft_pin_ttl", "30m", 30 * time.Minute, func(o Options) time.Duration { return o.DefaultKVSoftPinTTL }},
		{"client_ttl", "5", 5 * time.Second, func(o Options) time.Duration { return o.ClientTTL }},
		{"client_ttl", "1500ms", 1500 * time.Millisecond, func(o Options) time.Duration { return o.ClientTTL }},
		{"put_start_discard_timeout_sec", "2m", 2 * time.Minute, func(o Options) time.Duration { return o.PutStartDiscardTimeout }},
		{"put_start_release_timeout_sec", "900", 900 * time.Second, func(o Options) time.Duration { return o.PutStartReleaseTimeout }},
		{"tick_interval_ms", "1s", time.Second, func(o Options) time.Duration { return o.TickInterval }},
	} {
		o := parse(t, "--"+c.flag+"="+c.value)
		if got := c.got(o); got != c.want {
			t.Errorf("--%s=%q: %v, want %v", c.flag, c.value, got, c.want)
		}
	}
	for _, bad := range []string{"5sec", "-5", "-5s", "", "abc", "18446744073709551616", "9223372036854775807s"} {
		parseFails(t, "default_kv_lease_ttl", "--default_kv_lease_ttl="+bad)
	}
	parse(t, "--max_kv_soft_pin_ttl=2h") // read as a duration, though not acted on
	parseFails(t, "max_kv_soft_pin_ttl", "--max_kv_soft_pin_ttl=2 days")
}

func leaseTTL(o Options) time.Duration { return o.DefaultKVLeaseTTL }

func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestConfigFile(t *testing.T) {
	js := writeFile(t, "master.json", `{"client_live_ttl_sec": 33, "eviction_ratio": 0.2,
		"default_kv_lease_ttl": "7s", "default_kv_soft_pin_ttl": 1234, "enable_offload": true,
		"rpc_port": 4567, "enable_oplog": true, "client_ttl": 99, "nested": {"a": 1}, "metrics_port": 9100}`)
	o := parse(t, "--config_path="+js)
	if o.ClientTTL != 33*time.Second || o.EvictionRatio != 0.2 || o.DefaultKVLeaseTTL != 7*time.Second ||
		o.DefaultKVSoftPinTTL != 1234*time.Millisecond || !o.EnableOffload || o.RPCPort != 4567 || o.MetricsPort != 9100 {
		t.Errorf("from %s: %+v", js, o)
	}
	// The file's client_ttl is not Mooncake's key for it: ignored, and said so.
	if !reflect.DeepEqual(o.Unimplemented, []string{"enable_oplog"}) || !reflect.DeepEqual(o.IgnoredKeys, []string{"client_ttl", "nested.a"}) {
		t.Errorf("unimplemented %v, ignored %v", o.Unimplemented, o.IgnoredKeys)
	}
	// The command line wins, even with a flag's default value, and in
	// either order; --noenable_oplog leaves nothing to warn about.
	for _, args := range [][]string{
		{"--config_path=" + js, "--eviction_ratio=0.05", "--client_ttl=10", "--noenable_offload", "--noenable_oplog", "--rpc_port=0"},
		{"--eviction_ratio=0.05", "--client_ttl=10", "--noenable_offload", "--noenable_oplog", "--rpc_port=0", "--config_path=" + js},
	} {
		o = parse(t, args...)
		if o.EvictionRatio != 0.05 || o.ClientTTL != 10*time.Second || o.EnableOffload || o.RPCPort != 0 ||
			o.DefaultKVLeaseTTL != 7*time.Second || len(o.Unimplemented) != 0 {
			t.Errorf("%q: %+v", args, o)
		}
	}
	yml := writeFile(t, "master.yaml", "client_live_ttl_sec: 44\neviction_ratio: 0.3\ndefault_kv_lease_ttl: 2m\n"+
		"enable_offload: yes\nlog_level: warn\n# a comment\ncxl_size: 5\n")
	o = parse(t, "--config_path="+yml)
	if o.ClientTTL != 44*time.Second || o.EvictionRatio != 0.3 || o.DefaultKVLeaseTTL != 2*time.Minute ||
		!o.EnableOffload || o.LogLevel != "warn" || !o.LogLevelGiven || !reflect.DeepEqual(o.Unimplemented, []string{"cxl_size"}) {
		t.Errorf("from %s: %+v", yml, o)
	}
	if o := parse(t, "--config_path="+writeFile(t, "m.yml", "port: 1234\n")); o.RPCPort != 50051 || len(o.IgnoredKeys) != 1 {
		t.Errorf("the file cannot set --port, as in Mooncake: %+v", o)
	}
	parseFails(t, "must end in .json, .yaml or .yml", "--config_path="+writeFile(t, "m.conf", "{}"))
	parseFails(t, "no such file", "--config_path=/nonexistent/m.json")
	parseFails(t, "not a JSON object", "--config_path="+writeFile(t, "m.json", "{"))
	parseFails(t, "not a scalar", "--config_path="+writeFile(t, "m.json", `{"etcd_endpoints": ["a", "b"]}`))
	parseFails(t, "not a YAML map", "--config_path="+writeFile(t, "m.yaml", "- a\n- b\n"))
	parseFails(t, "key client_live_ttl_sec: --client_ttl", "--config_path="+writeFile(t, "m.json", `{"client_live_ttl_sec": "ten"}`))
}

func TestFlagfileAndEnvironment(t *testing.T) {
	ff := writeFile(t, "flags", "# comment\n\n--client_ttl=9\n  --enable_offload\n")
	if o := parse(t, "--flagfile="+ff); o.ClientTTL != 9*time.Second || !o.EnableOffload {
		t.Errorf("--flagfile: %+v", o)
	}
	if o := parse(t, "--flagfile="+ff, "--client_ttl=4"); o.ClientTTL != 4*time.Second {
		t.Errorf("a later flag wins over the flagfile: %+v", o)
	}
	parseFails(t, "is not a flag", "--flagfile="+writeFile(t, "f2", "gostore-master\n--client_ttl=9\n"))
	self := writeFile(t, "self", "")
	os.WriteFile(self, []byte("--flagfile="+self+"\n"), 0o644)
	parseFails(t, "include each other", "--flagfile="+self)
	t.Setenv("FLAGS_client_ttl", "12")
	t.Setenv("FLAGS_enable_offload", "true")
	if o := parse(t, "--fromenv=client_ttl,enable_offload"); o.ClientTTL != 12*time.Second || !o.EnableOffload {
		t.Errorf("--fromenv: %+v", o)
	}
	parseFails(t, "FLAGS_eviction_ratio is not set", "--fromenv=eviction_ratio")
	if o := parse(t, "--tryfromenv=eviction_ratio,client_ttl"); o.ClientTTL != 12*time.Second || o.EvictionRatio != 0.05 {
		t.Errorf("--tryfromenv: %+v", o)
	}
	parseFails(t, "no flag it can set", "--fromenv=nope")
}

func TestPortsAddressesAndLevels(t *testing.T) {
	if o := parse(t, "--port=1234"); o.RPCPort != 1234 {
		t.Errorf("--port: %d", o.RPCPort)
	}
	if o := parse(t, "--port=1234", "--rpc_port=4321"); o.RPCPort != 4321 {
		t.Errorf("--rpc_port over --port: %d", o.RPCPort)
	}
	if o := parse(t, "--rpc_interface=lo", "--rpc_address=10.1.2.3"); o.RPCAddress != "127.0.0.1" {
		t.Errorf("--rpc_interface=lo: %q", o.RPCAddress)
	}
	parseFails(t, "rpc_interface", "--rpc_interface=nonexistent0")
	for args, want := range map[string]string{
		"": "info", "--minloglevel=1": "warn", "--minloglevel=2": "error", "--v=1": "debug",
		"--minloglevel=1 --v=2": "warn", "--log_level=debug --minloglevel=2": "debug",
	} {
		o := parse(t, strings.Fields(args)...)
		if o.LogLevel != want || o.LogLevelGiven != (args != "") {
			t.Errorf("%q: level %s (given %v), want %s", args, o.LogLevel, o.LogLevelGiven, want)
		}
	}
	// glog's stderr flags change nothing here or there: no warning.
	if o := parse(t, "--logtostderr", "--alsologtostderr", "--stderrthreshold=0", "--log_dir=/tmp"); !reflect.DeepEqual(o.Unimplemented, []string{"log_dir"}) {
		t.Errorf("glog flags: unimplemented %v", o.Unimplemented)
	}
}

// One warning line at start names every unimplemented flag given, and the
// config keys ignored.
func TestStartWarnsOnceAboutUnimplementedFlags(t *testing.T) {
	js := writeFile(t, "m.json", `{"enable_snapshot": true, "bogus": 1}`)
	o := parse(t, "--rpc_address=127.0.0.1", "--rpc_port=0", "--metrics_port=-1", "--enable_oplog", "--enable_cxl",
		"--cxl_size=1", "--rpc_thread_num=8", "--logtostderr", "--config_path="+js)
	var logs bytes.Buffer
	o.Log = slog.New(slog.NewTextHandler(&logs, nil))
	s, err := Start(o)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	var warns []string
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "level=WARN") {
			warns = append(warns, line)
		}
	}
	// enable_snapshot is accepted without a word: a state directory is
	// what turns the journal on.
	if len(warns) != 1 || !strings.Contains(warns[0], "flags=cxl_size,enable_cxl,enable_oplog,rpc_thread_num") ||
		!strings.Contains(warns[0], "unknown_config_keys=bogus") {
		t.Errorf("warnings: %q", warns)
	}
}

// The limits' flags: their defaults, their values at the edges of their
// ranges, and the values refused.
func TestLimitFlags(t *testing.T) {
	o := parse(t)
	if o.MaxKeyBytes != 16384 || o.MaxBatchKeys != 1<<18 || o.MaxObjectBytes != 64<<30 ||
		o.RPCMaxRequestBytes != wire.MaxBody || o.RPCMaxConnectionsPerIP != 1024 || o.RPCMaxInflightPerIP != 256 {
		t.Fatalf("defaults %+v", o)
	}
	o = parse(t, "--max_key_bytes=1048576", "--max_batch_keys=4096", "--max_object_bytes=1", "--rpc_max_request_bytes=65536",
		"--rpc_max_connections_per_ip=1", "--rpc_max_inflight_per_ip=1")
	if o.MaxKeyBytes != 1<<20 || o.MaxBatchKeys != 4096 || o.MaxObjectBytes != 1 || o.RPCMaxRequestBytes != 65536 ||
		o.RPCMaxConnectionsPerIP != 1 || o.RPCMaxInflightPerIP != 1 {
		t.Fatalf("at the edges %+v", o)
	}
	if o := parse(t, "--rpc_max_request_bytes=1073741824"); o.RPCMaxRequestBytes != 1<<30 {
		t.Fatalf("the largest request bound: %d", o.RPCMaxRequestBytes)
	}
	parseFails(t, "--max_key_bytes=0: from 1 to", "--max_key_bytes=0")
	parseFails(t, "--max_key_bytes=1048577", "--max_key_bytes=1048577")
	parseFails(t, "--max_batch_keys=4095: at least 4096", "--max_batch_keys=4095")
	parseFails(t, "--max_object_bytes=0: must be positive", "--max_object_bytes=0")
	parseFails(t, "--rpc_max_request_bytes=65535", "--rpc_max_request_bytes=65535")
	parseFails(t, "--rpc_max_request_bytes=1073741825", "--rpc_max_request_bytes=1073741825")
	parseFails(t, "--rpc_max_connections_per_ip=0: must be positive", "--rpc_max_connections_per_ip=0")
	parseFails(t, "--rpc_max_inflight_per_ip=-1: must be positive", "--rpc_max_inflight_per_ip=-1")
}

func TestSpinFlag(t *testing.T) {
	if o := parse(t); o.RPCSpinMicros != 200 {
		t.Fatalf("default --rpc_spin_us %d", o.RPCSpinMicros)
	}
	for _, v := range []int{0, 10000} {
		if o := parse(t, fmt.Sprintf("--rpc_spin_us=%d", v)); o.RPCSpinMicros != v {
			t.Fatalf("--rpc_spin_us=%d read as %d", v, o.RPCSpinMicros)
		}
	}
	parseFails(t, "--rpc_spin_us=-1: from 0 to 10000", "--rpc_spin_us=-1")
	parseFails(t, "--rpc_spin_us=10001: from 0 to 10000", "--rpc_spin_us=10001")
}

// Every check of the options as a whole names the flag and the value
// given, and why it is refused.
func TestValidationErrorsNameFlagAndValue(t *testing.T) {
	for _, c := range []struct{ arg, want string }{
		{"--client_ttl=0", "--client_ttl=0s: ttls, timeouts and the tick interval must be positive"},
		{"--default_kv_lease_ttl=0", "--default_kv_lease_ttl=0s: ttls"},
		{"--default_kv_soft_pin_ttl=0", "--default_kv_soft_pin_ttl=0s: ttls"},
		{"--tick_interval_ms=0", "--tick_interval_ms=0s: ttls"},
		{"--put_start_discard_timeout_sec=0", "--put_start_discard_timeout_sec=0s: ttls"},
		{"--put_start_release_timeout_sec=0", "--put_start_release_timeout_sec=0s: ttls"},
		{"--eviction_ratio=0", "--eviction_ratio=0: eviction ratios must lie in (0, 1]"},
		{"--eviction_high_watermark_ratio=1.5", "--eviction_high_watermark_ratio=1.5: eviction ratios"},
		{"--rpc_port=70000", "--rpc_port=70000 (or --port): out of range"},
		{"--port=70000", "--rpc_port=70000 (or --port): out of range"},
		{"--metrics_port=70000", "--metrics_port=70000: out of range"},
		{"--log_level=loud", `--log_level="loud"`},
	} {
		parseFails(t, c.want, c.arg)
	}
}

// A config key no flag reads is named in the warning with the key it
// most likely meant, when one is close.
func TestNearestConfigKey(t *testing.T) {
	for key, want := range map[string]string{
		"enable_ofload": "enable_offload", "client_live_ttl_secs": "client_live_ttl_sec",
		"default_kv_leasettl": "default_kv_lease_ttl", "client_ttl": "client_live_ttl_sec", "bogus": "", "x": "", "not_a_flag": "",
	} {
		if got := nearestKey(key); got != want {
			t.Errorf("nearestKey(%q) = %q, want %q", key, got, want)
		}
	}
}
