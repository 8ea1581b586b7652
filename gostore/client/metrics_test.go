package client

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/gostore/gostore/gostore/internal/testkit"
	"github.com/gostore/gostore/gostore/wire"
)

// freePort is a TCP port nothing listens on at the moment of the call.
func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// scrapeClient reads the client's /metrics into "name{labels}" -> value.
func scrapeClient(t *testing.T, port int) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(port) + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	return testkit.Samples(t, resp.Body)
}

// With HTTPPort set, the client serves metrics that count exactly the
// RPCs, bytes and calls it made; Close stops the server.
func TestClientHTTPServerCountsTheClientsWork(t *testing.T) {
	m := testkit.StartMaster(t)
	port := freePort(t)
	cfg := edge(Config{LocalHostname: "127.0.0.1", MasterServerAddr: m.Addr(),
		GlobalSegmentSize: 8 << 20, LocalBufferSize: 1 << 20, HTTPPort: port, TenantID: "team-a"})
	c, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	one, a, b := testkit.Pattern(1, 1000), testkit.Pattern(2, 3000), testkit.Pattern(3, 5000)
	if r := c.Writes().PutBatch([]PutItem{{Key: "one", Parts: [][]byte{one}}}, wire.ReplicaConfig{}); r[0] != wire.OK {
		t.Fatalf("put: %v", r[0])
	}
	for i, code := range c.Writes().PutBatch([]PutItem{{Key: "a", Parts: [][]byte{a}}, {Key: "b", Parts: [][]byte{b}}}, wire.ReplicaConfig{}) {
		if code != wire.OK {
			t.Fatalf("batch put %d: %v", i, code)
		}
	}
	dst := make([]byte, len(one))
	if got := c.Reads().GetInto([]string{"one"}, [][][]byte{{dst}}); got[0] != int64(len(one)) || !bytes.Equal(dst, one) {
		t.Fatalf("get: %d", got[0])
	}
	bufs, codes := c.Reads().GetBuffers([]string{"a", "b", "missing"})
	if !bytes.Equal(bufs[0], a) || !bytes.Equal(bufs[1], b) || codes[2] != int64(wire.ErrObjectNotFound) {
		t.Fatalf("get buffers: %v", codes)
	}
	for _, buf := range bufs[:2] {
		c.Reads().FreeBuffer(addrOf(buf))
	}
	// A get that finds nothing moved nothing: not counted.
	if got := c.Reads().GetInto([]string{"missing"}, [][][]byte{{dst}}); got[0] != int64(wire.ErrObjectNotFound) {
		t.Fatalf("miss: %d", got[0])
	}

	got := scrapeClient(t, port)
	const mode = `client_mode="real"`
	put, read := float64(len(one)+len(a)+len(b)), float64(len(one)+len(a)+len(b))
	for k, v := range map[string]float64{
		`mooncake_transfer_write_bytes{` + mode + `}`:                                     put,
		`mooncake_transfer_read_bytes{` + mode + `}`:                                      read,
		`mooncake_transfer_put_latency_count{` + mode + `}`:                               1,
		`mooncake_transfer_batch_put_latency_count{` + mode + `}`:                         1,
		`mooncake_transfer_get_latency_count{` + mode + `}`:                               1,
		`mooncake_transfer_batch_get_latency_count{` + mode + `}`:                         1,
		`mooncake_client_rpc_count{` + mode + `,rpc_name="PutStart"}`:                     2,
		`mooncake_client_rpc_count{` + mode + `,rpc_name="PutEnd"}`:                       2,
		`mooncake_client_rpc_count{` + mode + `,rpc_name="GetReplicas"}`:                  3,
		`mooncake_client_rpc_count{` + mode + `,rpc_name="MountSegment"}`:                 1,
		`mooncake_transfer_write_operation_count{` + mode + `,op_name="put"}`:             1,
		`mooncake_transfer_write_operation_bytes{` + mode + `,op_name="put"}`:             float64(len(one)),
		`mooncake_transfer_write_operation_count{` + mode + `,op_name="put_batch"}`:       1,
		`mooncake_transfer_write_operation_bytes{` + mode + `,op_name="put_batch"}`:       float64(len(a) + len(b)),
		`mooncake_transfer_read_operation_count{` + mode + `,op_name="get"}`:              1,
		`mooncake_transfer_read_operation_bytes{` + mode + `,op_name="get"}`:              float64(len(one)),
		`mooncake_transfer_read_operation_count{` + mode + `,op_name="batch_get_buffer"}`: 1,
		`mooncake_transfer_read_operation_bytes{` + mode + `,op_name="batch_get_buffer"}`: float64(len(a) + len(b)),
	} {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present: %v), want %v", k, g, ok, v)
		}
	}
	if got[`mooncake_client_rpc_count{`+mode+`,rpc_name="Ping"}`] < 1 {
		t.Error("the setup's first Ping was not counted")
	}
	// The lookup of the missing key answered -704 as its result, not as
	// a failed RPC.
	for k := range got {
		if strings.HasPrefix(k, "gostore_client_rpc_errors{") {
			t.Errorf("an RPC counted as failed: %s", k)
		}
	}

	resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(port) + "/metrics/summary")
	if err != nil {
		t.Fatal(err)
	}
	summary, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`tenant "team-a"`, "PutStart", "batch_get_buffer", "put_batch"} {
		if !bytes.Contains(summary, []byte(want)) {
			t.Errorf("summary lacks %q:\n%s", want, summary)
		}
	}

	c.Close()
	if _, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port)); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial after Close: %v, want connection refused", err)
	}
}

// A taken port does not fail setup: the client works without the server.
// A port out of range does.
func TestClientHTTPPortTakenOrInvalid(t *testing.T) {
	m := testkit.StartMaster(t)
	ln, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	c, err := New(edge(Config{LocalHostname: "127.0.0.1", MasterServerAddr: m.Addr(),
		GlobalSegmentSize: 1 << 20, LocalBufferSize: 1 << 20, HTTPPort: port}), nil)
	if err != nil {
		t.Fatalf("setup with the HTTP port taken: %v", err)
	}
	defer c.Close()
	if c.http != nil || c.metrics != nil {
		t.Error("a server or metrics on a port another listener holds")
	}
	if r := c.Writes().PutBatch([]PutItem{{Key: "k", Parts: [][]byte{[]byte("v")}}}, wire.ReplicaConfig{}); r[0] != wire.OK {
		t.Fatalf("put without the server: %v", r[0])
	}
	for _, bad := range []int{-1, 65536} {
		_, err := New(edge(Config{LocalHostname: "127.0.0.1", MasterServerAddr: m.Addr(), HTTPPort: bad}), nil)
		if wire.CodeOf(err) != wire.ErrInvalidParams {
			t.Errorf("HTTPPort %d: %v, want -600", bad, err)
		}
	}
}
