// store.go exports the store lifecycle: handles, setup, close, health.

package main

/*
#include <stdint.h>
#include <stdlib.h>
*/
import "C"

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/gostore/gostore/gostore/client"
	"github.com/gostore/gostore/gostore/gpu"
	"github.com/gostore/gostore/gostore/rdma"
	"github.com/gostore/gostore/gostore/ucx"
	"github.com/gostore/gostore/gostore/wire"
)

// store is what a Python MooncakeDistributedStore holds a handle to.
type store struct {
	mu     sync.Mutex // serializes setup and close
	client atomic.Pointer[client.Client]
	// closed: close ran and no setup since. The client stays (buffers
	// lent before close are freed through it) but serves no call: every
	// call answers as on a store never set up (clientOf).
	closed atomic.Bool
	// refusedAt (unix ns) is when the last line about a call refused for
	// want of a client was logged, refusedMore the refusals since: one
	// line per refusedEvery per store, so that an application looping on
	// a closed store gets a line, not a flood.
	refusedAt, refusedMore atomic.Int64
}

// refusedEvery is how often a store logs the calls it refuses because it
// is not set up or is closed.
const refusedEvery = 10 * time.Second

var (
	handles    sync.Map // int64 -> *store, *client.Pending or *server.Server
	nextHandle atomic.Int64
	// logLevel governs every logger of the library: this one, the one the
	// clients and an embedded master get, and slog's default, through
	// which packages log that are handed no logger.
	logLevel slog.LevelVar
	logger   = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: &logLevel}))
	// levelFromSetup: a setup's log_level outranks GOSTORE_LOG_LEVEL.
	levelFromSetup atomic.Bool
)

func init() {
	slog.SetDefault(logger)
	configureDrivers()
}

// configureDrivers passes GOSTORE_LIBCUDA, GOSTORE_LIBIBVERBS and
// GOSTORE_LIBUCX to the packages that open those libraries. Each library is opened once per
// process, at its first use, so the paths are read once, here, as this
// library loads: the same environment gpu and rdma used to read themselves
// (os.Getenv in a c-shared library sees the one of the moment it loaded).
func configureDrivers() {
	if err := gpu.Configure(gpu.Options{Library: getenv(gpu.EnvLibrary)}); err != nil {
		logger.Warn("CUDA driver path not applied", "err", err)
	}
	if err := rdma.Configure(rdma.Options{Library: getenv(rdma.EnvLibrary)}); err != nil {
		logger.Warn("verbs library path not applied", "err", err)
	}
	if err := ucx.Configure(ucx.Options{Library: getenv(ucx.EnvLibrary)}); err != nil {
		logger.Warn("UCX library path not applied", "err", err)
	}
}

// getenv reads the process environment as it is now. In a c-shared library
// Go's os.Getenv sees the environment of the moment the library was loaded
// (and not even all of it: variables Python added later are missing), so
// settings a Python program makes with os.environ are read through libc.
func getenv(name string) string {
	v, _ := lookupenv(name)
	return v
}

// lookupenv is os.LookupEnv through libc (see getenv).
func lookupenv(name string) (string, bool) {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	if v := C.getenv(cs); v != nil {
		return C.GoString(v), true
	}
	return "", false
}

// refreshEnv applies the environment settings that may change after load:
// GOSTORE_LOG_LEVEL, unless a setup's log_level said otherwise.
func refreshEnv() {
	if levelFromSetup.Load() {
		return
	}
	lvl := slog.LevelInfo
	if v := getenv("GOSTORE_LOG_LEVEL"); v != "" {
		if err := lvl.UnmarshalText([]byte(v)); err != nil {
			logger.Warn("ignoring GOSTORE_LOG_LEVEL: want debug, info, warn or error", "value", v)
		}
	}
	logLevel.Set(lvl)
}

// envUint reads a positive integer setting; unset or unparsable is 0
// (the default), the latter with a warning.
func envUint(name string) uint64 {
	v := strings.TrimSpace(getenv(name))
	if v == "" {
		return 0
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		logger.Warn("ignoring an environment setting that is not a positive integer", "name", name, "value", v)
		return 0
	}
	return n
}

// envSpin reads a polling time in microseconds (a client.Config spin):
// unset is 0 (the client's default), "0" is -1 (never poll).
func envSpin(name string) time.Duration {
	if getenv(name) == "" {
		return 0
	}
	us := envUint(name)
	if us == 0 {
		return -1
	}
	return time.Duration(min(us, 1<<20)) * time.Microsecond
}

// defaultPutSpaceWaitMS is how long a put waits for room being freed when
// neither put_space_wait_ms nor GOSTORE_PUT_SPACE_WAIT_MS says.
const defaultPutSpaceWaitMS = 5000

// putSpaceWait turns milliseconds (0: never wait) into the client's option.
func putSpaceWait(ms uint64) time.Duration {
	if ms == 0 {
		return -1
	}
	return time.Duration(min(ms, 1<<40)) * time.Millisecond
}

func newHandle(v any) int64 {
	h := nextHandle.Add(1)
	handles.Store(h, v)
	return h
}

func lookup[T any](h C.int64_t) (T, bool) {
	v, ok := handles.Load(int64(h))
	if !ok {
		var zero T
		return zero, false
	}
	t, ok := v.(T)
	return t, ok
}

// clientOf returns the set-up client behind a store handle, or nil (and logs
// why) when there is none.
func clientOf(h C.int64_t) *client.Client {
	s, ok := lookup[*store](h)
	if !ok {
		logger.Error("unknown store handle", "handle", int64(h))
		return nil
	}
	c := s.client.Load()
	if c == nil || s.closed.Load() {
		s.refuse(callerName(2))
		return nil
	}
	c.BeginCall() // each export is one API call (interrupt.go)
	return c
}

// refuse logs (rate-limited) that call met a store that is not set up or
// is closed; the call answers as its contract says for that case.
func (s *store) refuse(call string) {
	state, fix := "is not set up", "call setup first"
	if s.closed.Load() {
		state, fix = "is closed", "a closed store serves no call: set it up again, or use another"
	}
	now := time.Now().UnixNano()
	last := s.refusedAt.Load()
	if last != 0 && now-last < int64(refusedEvery) || !s.refusedAt.CompareAndSwap(last, now) {
		s.refusedMore.Add(1)
		return
	}
	logger.Error("store "+state+": "+call+" refused; "+fix, "call", call, "refused_not_logged", s.refusedMore.Swap(0))
}

// callerName names the exported call (gs_put: "put") on the stack above
// skip frames, for log lines; a helper between it and clientOf is skipped.
func callerName(skip int) string {
	pcs := make([]uintptr, 8)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(skip+1, pcs)])
	for {
		f, more := frames.Next()
		name := f.Function[strings.LastIndexByte(f.Function, '.')+1:]
		if strings.HasPrefix(name, "gs_") {
			return strings.TrimPrefix(name, "gs_")
		}
		if !more {
			return "a call"
		}
	}
}

// defaultHeapRetainBytes is GOSTORE_HEAP_RETAIN_BYTES' default, as the
// Python package reads it for malloc (gostore/buffers/heap.py): memory lent by
// get_buffer beyond the local buffer that stays mapped for the next loan.
const defaultHeapRetainBytes = 1 << 30

//export gs_store_new
func gs_store_new() (ret C.int64_t) {
	defer recoverTo("gs_store_new", &ret)
	refreshEnv()
	return C.int64_t(newHandle(&store{}))
}

//export gs_store_free
func gs_store_free(h C.int64_t) {
	defer recoverTo("gs_store_free", nil)
	if s, ok := lookup[*store](h); ok {
		if c := s.client.Swap(nil); c != nil {
			c.Close()
		}
		handles.Delete(int64(h))
	}
}

//export gs_setup
func gs_setup(h C.int64_t, js *C.char, n C.int) (ret C.int) {
	defer recoverTo("gs_setup", &ret)
	s, ok := lookup[*store](h)
	if !ok {
		return C.int(wire.ErrInvalidParams)
	}
	refreshEnv()
	cfg, edge, err := parseSetup([]byte(goString(js, n)))
	if err != nil {
		logger.Error("setup rejected", "err", err)
		return C.int(wire.CodeOf(err))
	}
	return setupStore(s, cfg, edge)
}

// setupStore sets s up with cfg plus what the environment says (setup and
// init_all): -600 when it already is.
func setupStore(s *store, cfg client.Config, edge setupEdge) C.int {
	if edge.spaceWaitMS == nil {
		env, err := envMillis("GOSTORE_PUT_SPACE_WAIT_MS", false)
		if err != nil {
			logger.Error("setup rejected", "err", err)
			return C.int(wire.CodeOf(err))
		}
		ms := uint64(defaultPutSpaceWaitMS)
		if env != nil {
			ms = uint64(*env)
		}
		edge.spaceWaitMS = &ms
	}
	if edge.logLevel != nil {
		logLevel.Set(*edge.logLevel)
		levelFromSetup.Store(true)
	}
	cfg.PutSpaceWait = putSpaceWait(*edge.spaceWaitMS)
	if err := applyBounds(&cfg, edge); err != nil {
		logger.Error("setup rejected", "err", err)
		return C.int(wire.CodeOf(err))
	}
	// The client reads no environment: what it takes from there comes here.
	cfg.ForceTCP = strings.EqualFold(getenv("GOSTORE_TRANSPORT"), "tcp")
	cfg.ForceUCX = strings.EqualFold(getenv("GOSTORE_TRANSPORT"), "ucx")
	if ms := envUint("GOSTORE_PING_INTERVAL_MS"); ms > 0 {
		cfg.PingInterval = time.Duration(min(ms, 1<<31)) * time.Millisecond
	}
	cfg.GPUBounceBytes = envUint("GOSTORE_GPU_BOUNCE_BYTES")
	cfg.SpinWait = envSpin("GOSTORE_SPIN_US")
	cfg.ServeSpin = envSpin("GOSTORE_SERVE_SPIN_US")
	cfg.LentRetainBytes = defaultHeapRetainBytes
	if getenv("GOSTORE_HEAP_RETAIN_BYTES") != "" {
		cfg.LentRetainBytes = envUint("GOSTORE_HEAP_RETAIN_BYTES")
	}
	if cfg.SegmentLocation == "" {
		cfg.SegmentLocation = getenv("GOSTORE_SEGMENT_LOCATION")
	}
	cfg.SysfsRoot = getenv("GOSTORE_SYSFS_ROOT")
	// An HA cluster's id: setup's cluster_id, else Mooncake's variable
	// (what its clients read), else the masters' default.
	if strings.TrimSpace(cfg.ClusterID) == "" {
		cfg.ClusterID = strings.TrimSpace(getenv("MC_STORE_CLUSTER_ID"))
	}
	// Authentication: what setup did not name, the environment may (so an
	// engine that calls setup itself needs no change).
	if !cfg.Auth.Enabled() {
		cfg.Auth.SecretFile = getenv("GOSTORE_AUTH_SECRET_FILE")
		cfg.Auth.CAFile = getenv("GOSTORE_TLS_CA_FILE")
		cfg.Auth.CertFile = getenv("GOSTORE_TLS_CERT_FILE")
		cfg.Auth.KeyFile = getenv("GOSTORE_TLS_KEY_FILE")
	}
	if v := getenv("GOSTORE_ALLOW_INSECURE"); v != "" && !cfg.AllowInsecure {
		cfg.AllowInsecure = asLenientBool("GOSTORE_ALLOW_INSECURE", v)
	}
	cfg.Getenv = lookupenv
	cfg.RPC.Netpoll = masterHere.Load()
	cfg.InterruptMain = true // Python's Ctrl-C (interrupt.go)
	cfg.OnMainThread = onMainThread
	watchInterrupts()
	cfg.Setup = setupContext()
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.client.Load(); c != nil && c.Health() != 1 {
		logger.Error("setup called on a store that is already set up", "hostname", c.Hostname())
		return C.int(wire.ErrInvalidParams)
	}
	c, err := client.New(cfg, logger)
	if err != nil {
		return C.int(wire.CodeOf(err))
	}
	s.client.Store(c)
	s.closed.Store(false)
	return 0
}

// parseSetup decodes the JSON config; sizes may be numbers or strings such
// as "16MB". Unknown keys are an error so a typo is never silently ignored.
//
// A non-empty ssd_offload_path alone turns the SSD tier on (one argument
// is enough); enable_ssd_offload=False keeps it off regardless.
// enable_client_http_server turns the client HTTP server on at
// client_http_port (default 9300), which must then be 1-65535.
func parseSetup(b []byte) (client.Config, setupEdge, error) {
	var raw map[string]any
	var cfg client.Config
	var edge setupEdge
	tierSaid := false
	httpOn, httpPort := false, defaultClientHTTPPort
	if err := json.Unmarshal(b, &raw); err != nil {
		return cfg, edge, wire.Errorf(wire.ErrInvalidParams, "setup config is not a JSON object: %v", err)
	}
	for k, v := range raw {
		var err error
		switch k {
		case "local_hostname":
			cfg.LocalHostname, err = asString(k, v)
		case "metadata_server":
			cfg.MetadataServer, err = asString(k, v)
		case "protocol":
			cfg.Protocol, err = asString(k, v)
		case "rdma_devices":
			cfg.RDMADevices, err = asString(k, v)
		case "master_server_addr":
			cfg.MasterServerAddr, err = asString(k, v)
		case "ssd_offload_path":
			cfg.SSDOffloadPath, err = asString(k, v)
		case "segment_location":
			cfg.SegmentLocation, err = asString(k, v)
		case "tenant_id":
			cfg.TenantID, err = asString(k, v)
		case "cluster_id":
			cfg.ClusterID, err = asString(k, v)
		case "ipc_socket_path":
			var path string
			if path, err = asString(k, v); err == nil && path != "" {
				logger.Info("ipc_socket_path has no effect: it belongs to Mooncake's standalone (dummy) client mode, which gostore does not have", "ipc_socket_path", path)
			}
		case "auth_secret_file":
			cfg.Auth.SecretFile, err = asString(k, v)
		case "tls_ca_file":
			cfg.Auth.CAFile, err = asString(k, v)
		case "tls_cert_file":
			cfg.Auth.CertFile, err = asString(k, v)
		case "tls_key_file":
			cfg.Auth.KeyFile, err = asString(k, v)
		case "allow_insecure":
			cfg.AllowInsecure = asLenientBool(k, v)
		case "enable_client_http_server":
			httpOn = asLenientBool(k, v)
		case "client_http_port":
			httpPort, err = asPort(k, v)
		case "enable_ssd_offload":
			cfg.EnableSSDOffload, tierSaid = asLenientBool(k, v), true
		case "global_segment_size":
			cfg.GlobalSegmentSize, err = asSize(k, v)
		case "local_buffer_size":
			cfg.LocalBufferSize, err = asSize(k, v)
		case "put_space_wait_ms":
			var ms uint64
			ms, err = asCount(k, v)
			edge.spaceWaitMS = &ms
		case "rpc_timeout_ms":
			edge.rpcTimeoutMS, err = asMillis(k, v, true)
		case "rpc_connect_timeout_ms":
			edge.connectTimeoutMS, err = asMillis(k, v, false)
		case "close_timeout_ms":
			edge.closeTimeoutMS, err = asMillis(k, v, false)
		case "log_level":
			var name string
			if name, err = asString(k, v); err == nil {
				var lvl slog.Level
				if lvl.UnmarshalText([]byte(name)) != nil {
					err = fmt.Errorf("log_level %q: want debug, info, warn or error", name)
				}
				edge.logLevel = &lvl
			}
		default:
			err = fmt.Errorf("unknown setup key %q", k)
		}
		if err != nil {
			return cfg, edge, wire.Errorf(wire.ErrInvalidParams, "%v", err)
		}
	}
	if !tierSaid && cfg.SSDOffloadPath != "" {
		cfg.EnableSSDOffload = true
	}
	if httpOn {
		// Checked only when on: Mooncake ignores the port otherwise.
		if httpPort < 1 || httpPort > 65535 {
			return cfg, edge, wire.Errorf(wire.ErrInvalidParams, "client_http_port %d: want 1-65535", httpPort)
		}
		cfg.HTTPPort = httpPort
	}
	return cfg, edge, nil
}

// defaultClientHTTPPort is client_http_port's default, as in Mooncake.
const defaultClientHTTPPort = 9300

// asLenientBool reads a flag the way Mooncake reads setup's config dict:
// a bool, or (as Python's dict form passes anything else) its text:
// true/1/yes/on or false/0/no/off in any case; anything else is false,
// with a warning.
func asLenientBool(k string, v any) bool {
	switch x := v.(type) {
	case bool:
		return x
	case string:
		switch strings.ToLower(strings.TrimSpace(x)) {
		case "true", "1", "yes", "on":
			return true
		case "false", "0", "no", "off":
			return false
		}
	}
	logger.Warn("setup: not a boolean; taking false", "key", k, "value", v)
	return false
}

// asPort reads an int (a JSON number, or decimal text as the dict form
// may pass it: surrounding blanks allowed, no sign but '-', nothing
// else); its range is checked where the server is turned on.
func asPort(k string, v any) (int, error) {
	switch x := v.(type) {
	case float64:
		if x == float64(int32(x)) {
			return int(x), nil
		}
	case string:
		t := strings.TrimSpace(x)
		if digits := strings.TrimPrefix(t, "-"); digits != "" && strings.Trim(digits, "0123456789") == "" {
			if n, err := strconv.ParseInt(t, 10, 32); err == nil {
				return int(n), nil
			}
		}
	}
	return 0, fmt.Errorf("%s must be an integer, got %v", k, v)
}

// setupEdge holds the setup settings the bindings apply themselves; nil
// means not given.
type setupEdge struct {
	logLevel    *slog.Level
	spaceWaitMS *uint64
	// the bounds in milliseconds (timeouts.go); rpcTimeoutMS may be
	// negative (no bound)
	rpcTimeoutMS, connectTimeoutMS, closeTimeoutMS *int64
}

// asCount reads a non-negative integer (a JSON number).
func asCount(k string, v any) (uint64, error) {
	x, ok := v.(float64)
	if !ok || x < 0 || x != float64(uint64(x)) {
		return 0, fmt.Errorf("%s must be a non-negative integer, got %v", k, v)
	}
	return uint64(x), nil
}

func asString(k string, v any) (string, error) {
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("%s must be a string, got %T", k, v)
	}
	return s, nil
}

func asSize(k string, v any) (uint64, error) {
	switch x := v.(type) {
	case float64:
		if x < 0 || x != float64(uint64(x)) {
			return 0, fmt.Errorf("%s must be a non-negative integer, got %v", k, x)
		}
		return uint64(x), nil
	case string:
		n, err := client.ParseSize(x)
		if err != nil {
			return 0, fmt.Errorf("%s: %v", k, err)
		}
		return n, nil
	}
	return 0, fmt.Errorf("%s must be a size, got %T", k, v)
}

//export gs_close
func gs_close(h C.int64_t) (ret C.int) {
	defer recoverTo("gs_close", &ret)
	s, ok := lookup[*store](h)
	if !ok {
		return C.int(wire.ErrInvalidParams)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.client.Load(); c != nil {
		c.Close()
		s.closed.Store(true)
	}
	return 0
}

//export gs_health_check
func gs_health_check(h C.int64_t) (ret C.int) {
	defer recoverTo("gs_health_check", &ret)
	s, ok := lookup[*store](h)
	if !ok {
		return 1
	}
	c := s.client.Load()
	if c == nil || s.closed.Load() {
		return 1
	}
	return C.int(c.Health())
}

//export gs_get_hostname
func gs_get_hostname(h C.int64_t, out *C.char, capacity C.int) (ret C.int) {
	defer recoverTo("gs_get_hostname", &ret)
	c := clientOf(h)
	if c == nil {
		return C.int(wire.ErrInternal)
	}
	return putString(c.Hostname(), out, capacity)
}

//export gs_register_buffer
func gs_register_buffer(h C.int64_t, ptr, size C.uint64_t) (ret C.int) {
	defer recoverTo("gs_register_buffer", &ret)
	c := clientOf(h)
	if c == nil {
		return C.int(wire.ErrInternal)
	}
	if err := c.Buffers().RegisterBuffer(uint64(ptr), uint64(size)); err != nil {
		logger.Warn("register_buffer rejected", "err", err)
		return C.int(wire.CodeOf(err))
	}
	return 0
}

// gs_buffer_registered reports 1 when [ptr, ptr+size) lies inside one
// registered buffer of host memory, 2 inside one of GPU memory, 0 when
// not: Python checks it before it reads memory a caller named by address
// (put_tensor_from validates the header there; device memory only through
// gs_device_copy).
//
//export gs_buffer_registered
func gs_buffer_registered(h C.int64_t, ptr, size C.uint64_t) (ret C.int) {
	defer recoverTo("gs_buffer_registered", &ret)
	c := clientOf(h)
	if c == nil {
		return C.int(wire.ErrInternal)
	}
	if ptr == 0 || size == 0 {
		return 0
	}
	switch dev, ok := c.Buffers().BufferDevice(uint64(ptr), uint64(size)); {
	case !ok:
		return 0
	case dev >= 0:
		return 2
	}
	return 1
}

// gs_buffers_registered is gs_buffer_registered for n ranges at once,
// one answer per range in out: put_tensor_from of a batch crosses the ABI
// once to learn where every object lives.
//
//export gs_buffers_registered
func gs_buffers_registered(h C.int64_t, n C.int, ptrs, sizes *C.uint64_t, out *C.int32_t) (ret C.int) {
	defer recoverTo("gs_buffers_registered", &ret)
	c := clientOf(h)
	if c == nil {
		return C.int(wire.ErrInternal)
	}
	cnt := int(n)
	ps, ss, res := u64s(ptrs, cnt), u64s(sizes, cnt), i32s(out, cnt)
	for i := range cnt {
		res[i] = 0
		if ps[i] == 0 || ss[i] == 0 {
			continue
		}
		switch dev, ok := c.Buffers().BufferDevice(ps[i], ss[i]); {
		case !ok:
		case dev >= 0:
			res[i] = 2
		default:
			res[i] = 1
		}
	}
	return 0
}

//export gs_unregister_buffer
func gs_unregister_buffer(h C.int64_t, ptr C.uint64_t) (ret C.int) {
	defer recoverTo("gs_unregister_buffer", &ret)
	c := clientOf(h)
	if c == nil {
		return C.int(wire.ErrInternal)
	}
	if err := c.Buffers().UnregisterBuffer(uint64(ptr)); err != nil {
		logger.Warn("unregister_buffer rejected", "err", err)
		return C.int(wire.CodeOf(err))
	}
	return 0
}
