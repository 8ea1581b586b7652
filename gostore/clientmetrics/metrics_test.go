package clientmetrics

import (
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gostore/gostore/gostore/wire"

	"github.com/gostore/gostore/gostore/internal/testkit"
)

// serve starts a server for m on a port the kernel picks and returns its
// base URL; the server is closed when the test ends.
func serve(t *testing.T, m *Metrics, health func() int) (string, *Server) {
	t.Helper()
	s, err := Serve(m, 0, health, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	port := s.Addr().(*net.TCPAddr).Port
	return "http://127.0.0.1:" + strconv.Itoa(port), s
}

func get(t *testing.T, url string) (int, string, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
}

// scrape reads /metrics into "name{labels}" -> value, labels as the text
// format writes them.
func scrape(t *testing.T, base string) map[string]float64 {
	t.Helper()
	code, _, body := get(t, base+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	return testkit.Samples(t, strings.NewReader(body))
}

// Every series counts exactly what was recorded, under Mooncake's names,
// labels, microsecond units and bucket bounds.
func TestSeriesCountWhatWasRecorded(t *testing.T) {
	m := New(Options{Tenant: "t1"})
	m.RPC(wire.OpPutStart, 100*time.Microsecond, nil)
	m.RPC(wire.OpPutStart, 60*time.Microsecond, nil)
	m.RPC(wire.OpGetReplicas, 3*time.Millisecond, wire.Errorf(wire.ErrObjectNotFound, "gone"))
	m.Transfer(Write, 1, 1000, 40*time.Microsecond)
	m.Transfer(Write, 3, 300, 70*time.Microsecond)
	m.Transfer(Read, 1, 1000, 20*time.Microsecond)
	m.Transfer(Read, 1, 0, time.Second) // moved nothing: not a transfer
	m.Op(Write, "put", 1000, 200*time.Microsecond)
	m.Op(Write, "put_batch", 300, 250*time.Microsecond)
	m.Op(Read, "get", 1000, 30*time.Microsecond)
	base, _ := serve(t, m, func() int { return Healthy })
	got := scrape(t, base)
	const mode = `client_mode="real"`
	want := map[string]float64{
		`mooncake_transfer_write_bytes{` + mode + `}`:                                             1300,
		`mooncake_transfer_read_bytes{` + mode + `}`:                                              1000,
		`mooncake_transfer_put_latency_count{` + mode + `}`:                                       1,
		`mooncake_transfer_put_latency_sum{` + mode + `}`:                                         40,
		`mooncake_transfer_put_latency_bucket{` + mode + `,le="50"}`:                              1,
		`mooncake_transfer_batch_put_latency_count{` + mode + `}`:                                 1,
		`mooncake_transfer_batch_put_latency_bucket{` + mode + `,le="50"}`:                        0,
		`mooncake_transfer_batch_put_latency_bucket{` + mode + `,le="75"}`:                        1,
		`mooncake_transfer_get_latency_count{` + mode + `}`:                                       1,
		`mooncake_transfer_batch_get_latency_count{` + mode + `}`:                                 0,
		`mooncake_client_rpc_count{` + mode + `,rpc_name="PutStart"}`:                             2,
		`mooncake_client_rpc_count{` + mode + `,rpc_name="GetReplicas"}`:                          1,
		`mooncake_client_rpc_latency_sum{` + mode + `,rpc_name="PutStart"}`:                       160,
		`mooncake_client_rpc_latency_bucket{` + mode + `,rpc_name="GetReplicas",le="2000"}`:       0,
		`mooncake_client_rpc_latency_bucket{` + mode + `,rpc_name="GetReplicas",le="3000"}`:       1,
		`gostore_client_rpc_errors{` + mode + `,code="-704",rpc_name="GetReplicas"}`:              1,
		`mooncake_transfer_write_operation_count{` + mode + `,op_name="put"}`:                     1,
		`mooncake_transfer_write_operation_bytes{` + mode + `,op_name="put_batch"}`:               300,
		`mooncake_transfer_write_operation_latency_sum{` + mode + `,op_name="put_batch"}`:         250,
		`mooncake_transfer_read_operation_count{` + mode + `,op_name="get"}`:                      1,
		`mooncake_transfer_read_operation_bytes{` + mode + `,op_name="get"}`:                      1000,
		`mooncake_transfer_read_operation_latency_bucket{` + mode + `,op_name="get",le="+Inf"}`:   1,
		`mooncake_transfer_write_operation_latency_bucket{` + mode + `,op_name="put",le="2e+07"}`: 1,
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present: %v), want %v", k, g, ok, v)
		}
	}
	if _, ok := got[`gostore_client_rpc_errors{`+mode+`,code="-704",rpc_name="PutStart"}`]; ok {
		t.Error("a call that succeeded was counted as failed")
	}
	// One bucket per bound, plus +Inf.
	n := 0
	for k := range got {
		if strings.HasPrefix(k, "mooncake_transfer_get_latency_bucket{") {
			n++
		}
	}
	if n != len(LatencyBuckets)+1 {
		t.Errorf("get latency has %d buckets, want %d", n, len(LatencyBuckets)+1)
	}
}

// /health reports the client's code: 200 when healthy, 503 otherwise.
func TestHealthFollowsTheClient(t *testing.T) {
	var code atomic.Int64
	base, _ := serve(t, New(Options{}), func() int { return int(code.Load()) })
	for _, c := range []struct {
		health int
		status int
		body   string
	}{
		{Healthy, 200, `{"status":"healthy","code":0}`},
		{MasterUnreachable, 503, `{"status":"master_unreachable","code":2}`},
		{Closed, 503, `{"status":"closed","code":1}`},
		{Healthy, 200, `{"status":"healthy","code":0}`},
	} {
		code.Store(int64(c.health))
		status, ctype, body := get(t, base+"/health")
		if status != c.status || body != c.body || ctype != "application/json" {
			t.Errorf("health %d: %d %q %q, want %d %q", c.health, status, ctype, body, c.status, c.body)
		}
	}
}

// Only the three paths are served, and only to GET and HEAD.
func TestOtherRequestsAre404(t *testing.T) {
	base, _ := serve(t, New(Options{}), func() int { return Healthy })
	for _, p := range []string{"/", "/metrics/", "/healthz", "/metrics/summary/x"} {
		if code, _, _ := get(t, base+p); code != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", p, code)
		}
	}
	resp, err := http.Post(base+"/metrics", "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("POST /metrics: %d, want 404", resp.StatusCode)
	}
	resp, err = http.Head(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("HEAD /metrics: %d, want 200", resp.StatusCode)
	}
}

// The summary names every RPC and interface call recorded, with its
// count, bytes and latency bounds.
func TestSummaryNamesWhatHappened(t *testing.T) {
	now := time.Unix(1000, 0)
	m := New(Options{Tenant: "team-a", Now: func() time.Time { return now }})
	base, _ := serve(t, m, func() int { return Healthy })
	_, _, empty := get(t, base+"/metrics/summary")
	if !strings.Contains(empty, "none yet") || !strings.Contains(empty, "no calls") {
		t.Errorf("summary before any call:\n%s", empty)
	}
	m.RPC(wire.OpPutStart, 100*time.Microsecond, nil)
	m.RPC(wire.OpPutEnd, 60*time.Microsecond, wire.Errorf(wire.ErrRPCTimeout, "slow"))
	m.Transfer(Write, 1, 3<<20, 40*time.Microsecond)
	m.Op(Write, "put", 3<<20, 180*time.Microsecond)
	m.Op(Read, "get_buffer", 100, 30*time.Microsecond)
	now = now.Add(90 * time.Second)
	status, ctype, s := get(t, base+"/metrics/summary")
	if status != 200 || !strings.HasPrefix(ctype, "text/plain") {
		t.Fatalf("summary: %d %q", status, ctype)
	}
	for _, want := range []string{
		`tenant "team-a"`, "measuring for 1m30s",
		"written to replicas        3.00 MiB (3145728 B)",
		"read into callers' memory  0 B",
		"put        1 calls, mean 40, 95% <= 50, all <= 50",
		"PutStart           1 calls, mean 100, 95% <= 125, all <= 125, 0 failed",
		"PutEnd             1 calls, mean 60, 95% <= 75, all <= 75, 1 failed",
		"put                1 calls, mean 180, 95% <= 200, all <= 200, 3.00 MiB (3145728 B)",
		"get_buffer         1 calls, mean 30, 95% <= 50, all <= 50, 100 B",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("summary lacks %q:\n%s", want, s)
		}
	}
}

// The server listens on every IPv4 address, and Close frees the port: a
// connection after it is refused.
func TestServeBindsAllAndCloseStops(t *testing.T) {
	s, err := Serve(New(Options{}), 0, func() int { return Healthy }, nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := s.Addr().(*net.TCPAddr)
	if !addr.IP.Equal(net.IPv4zero) {
		t.Errorf("bound to %v, want 0.0.0.0", addr)
	}
	url := "http://127.0.0.1:" + strconv.Itoa(addr.Port) + "/health"
	if code, _, _ := get(t, url); code != 200 {
		t.Fatalf("health before close: %d", code)
	}
	s.Close()
	_, err = net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(addr.Port))
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial after Close: %v, want connection refused", err)
	}
}

// A port already taken is an error to the caller, not a panic or a
// silent server elsewhere.
func TestTakenPortIsAnError(t *testing.T) {
	ln, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	s, err := Serve(New(Options{}), ln.Addr().(*net.TCPAddr).Port, func() int { return Healthy }, nil)
	if err == nil {
		s.Close()
		t.Fatal("Serve on a taken port succeeded")
	}
	if !errors.Is(err, syscall.EADDRINUSE) {
		t.Errorf("error %v, want address in use", err)
	}
}

// A nil *Metrics records nothing and does not panic: the client's state
// with the server off.
func TestNilMetricsRecordNothing(t *testing.T) {
	var m *Metrics
	m.RPC(wire.OpPing, time.Millisecond, nil)
	m.Transfer(Read, 1, 10, time.Millisecond)
	m.Op(Write, "put", 10, time.Millisecond)
}
