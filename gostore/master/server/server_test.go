package server

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gostore/gostore/gostore/rpc"
	"github.com/gostore/gostore/gostore/wire"
)

func TestParseFlags(t *testing.T) {
	o, err := ParseFlags([]string{"--rpc_port=0", "--default_kv_lease_ttl=500", "--client_ttl=3",
		"--eviction_high_watermark_ratio=0.8", "--enable_offload"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if o.DefaultKVLeaseTTL != 500*time.Millisecond || o.ClientTTL != 3*time.Second ||
		o.EvictionHighWatermark != 0.8 || !o.EnableOffload || o.MetricsPort != 9003 || o.RPCPort != 0 {
		t.Fatalf("parsed %+v", o)
	}
	for _, bad := range [][]string{{"--nope=1"}, {"--rpc_port=70000"}, {"--client_ttl=0"},
		{"--eviction_ratio=2"}, {"--eviction_ratio=0"}, {"--default_kv_lease_ttl=0"}, {"--log_level=loud"},
		{"stray"}, {"--client_ttl=abc"}, {"--eviction_ratio=nan"}} {
		if _, err := ParseFlags(bad, nil); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestHTTPEndpoints(t *testing.T) {
	o, _ := ParseFlags([]string{"--rpc_address=127.0.0.1", "--rpc_port=0", "--metrics_port=0", "--log_level=error"}, nil)
	s, err := Start(o)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := rpc.NewClient(s.Addr())
	defer c.Close()
	ctx := context.Background()
	seg := wire.SegmentDesc{Name: "127.0.0.1:12345", ClientID: "c1", Size: 1 << 20}
	if err := c.Call(ctx, wire.OpMountSegment, &wire.MountReq{Seg: seg}, &wire.MountResp{}); err != nil {
		t.Fatal(err)
	}
	var ps wire.PutStartResp
	if err := c.Call(ctx, wire.OpPutStart, &wire.PutStartReq{ClientID: "c1", Keys: []string{"k/1"}, Sizes: []uint64{4096}}, &ps); err != nil || ps.Results[0].Code != wire.OK {
		t.Fatalf("put start: %v %+v", err, ps)
	}
	if err := c.Call(ctx, wire.OpPutEnd, &wire.KeysReq{ClientID: "c1", Keys: []string{"k/1"}}, &wire.CodesResp{}); err != nil {
		t.Fatal(err)
	}
	base := "http://" + s.HTTPAddr()
	if code, body := get(t, base+"/health"); code != 200 || !strings.Contains(body, "OK") {
		t.Fatalf("/health: %d %q", code, body)
	}
	code, body := get(t, base+"/get_all_segments")
	var segs []map[string]any
	if code != 200 || json.Unmarshal([]byte(body), &segs) != nil || len(segs) != 1 || segs[0]["Name"] != seg.Name || segs[0]["Used"].(float64) != 4096 {
		t.Fatalf("/get_all_segments: %d %s", code, body)
	}
	code, body = get(t, base+"/query_key?key=k/1")
	if code != 200 || !strings.Contains(body, `"size": 4096`) || !strings.Contains(body, `"COMPLETE"`) {
		t.Fatalf("/query_key: %d %s", code, body)
	}
	if code, _ := get(t, base+"/query_key?key=missing"); code != 404 {
		t.Fatalf("/query_key miss: %d", code)
	}
	code, body = get(t, base+"/metrics")
	for _, want := range []string{"gostore_master_put_start_total 1", "gostore_master_segments 1",
		"gostore_master_used_bytes 4096", `gostore_master_rpc_total{code="0",op="PutStart"} 1`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
}

func TestSilentClientExpiresThroughTickLoop(t *testing.T) {
	o, _ := ParseFlags([]string{"--rpc_address=127.0.0.1", "--rpc_port=0", "--metrics_port=-1", "--client_ttl=1", "--tick_interval_ms=20", "--log_level=error"}, nil)
	s, err := Start(o)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Core().MountSegment(wire.SegmentDesc{Name: "n", ClientID: "quiet", Size: 1 << 20}, nil); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(s.Core().Segments()) > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := len(s.Core().Segments()); n != 0 {
		t.Fatalf("silent client's segment still mounted (%d)", n)
	}
}

func TestMetricsHost(t *testing.T) {
	o := parse(t, "--rpc_address=0.0.0.0", "--allow_insecure", "--rpc_port=0", "--metrics_host=127.0.0.1", "--metrics_port=0", "--log_level=error")
	s, err := Start(o)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := s.httpListen(); !strings.HasPrefix(got, "127.0.0.1:") {
		t.Errorf("HTTP listens on %s, want --metrics_host's 127.0.0.1", got)
	}
	if got := s.rpcLn.Addr().String(); !strings.HasPrefix(got, "0.0.0.0:") {
		t.Errorf("RPC listens on %s, want 0.0.0.0", got)
	}
	// "::" takes IPv4 too, as Mooncake documents for --metrics_host.
	for host, want := range map[string]string{"::": "tcp", "::1": "tcp6", "0.0.0.0": "tcp4", "localhost": "tcp"} {
		if got := metricsNetwork(host); got != want {
			t.Errorf("metricsNetwork(%q) = %s, want %s", host, got, want)
		}
	}
}
