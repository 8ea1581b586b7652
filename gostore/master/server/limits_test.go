// limits_test.go checks every limit flag on a real master at its edge and
// one past it, and that the master still serves after each refusal.

package server

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/gostore/gostore/gostore/internal/testbase"
	"github.com/gostore/gostore/gostore/rpc"
	"github.com/gostore/gostore/gostore/wire"
)

// startWithFlags starts a master on loopback with the given flags, its log
// collected.
func startWithFlags(t *testing.T, flags ...string) (*Server, *testbase.LogBuffer) {
	t.Helper()
	o, err := ParseFlags(append([]string{"--rpc_address=127.0.0.1", "--rpc_port=0", "--metrics_port=-1"}, flags...), nil)
	if err != nil {
		t.Fatal(err)
	}
	logs := &testbase.LogBuffer{}
	o.Log = slog.New(slog.NewTextHandler(logs, nil))
	s, err := Start(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s, logs
}

func refused(t *testing.T, what string, err error, code wire.Code, says string) {
	t.Helper()
	if wire.CodeOf(err) != code || !strings.Contains(err.Error(), says) {
		t.Fatalf("%s: %v, want %v naming %q", what, err, code, says)
	}
}

// Through the real master: each limit of one request lets a request at it
// through and refuses one over it with the contract's code and a message
// naming the flag; nothing refused is stored, each kind of refusal logs
// one line, and the master serves on.
func TestMasterRefusesRequestsOverItsLimits(t *testing.T) {
	s, logs := startWithFlags(t, "--max_key_bytes=16", "--max_batch_keys=4096", "--max_object_bytes=1000",
		"--rpc_max_request_bytes=65536")
	c := rpc.NewClient(s.Addr())
	defer c.Close()
	ctx := context.Background()
	seg := wire.SegmentDesc{Name: "127.0.0.1:12345", ClientID: "c1", Size: 1 << 20}
	if err := c.Call(ctx, wire.OpMountSegment, &wire.MountReq{Seg: seg}, &wire.MountResp{}); err != nil {
		t.Fatal(err)
	}
	key16, key17 := strings.Repeat("k", 16), strings.Repeat("k", 17)
	putStart := func(key string, size uint64) error {
		var r wire.PutStartResp
		return c.Call(ctx, wire.OpPutStart, &wire.PutStartReq{ClientID: "c1", Keys: []string{key}, Sizes: []uint64{size}}, &r)
	}

	// Key length and object size, at and over.
	if err := putStart(key16, 1000); err != nil {
		t.Fatalf("a 16-byte key of 1000 bytes: %v", err)
	}
	var codes wire.CodesResp
	if err := c.Call(ctx, wire.OpPutEnd, &wire.KeysReq{ClientID: "c1", Keys: []string{key16}}, &codes); err != nil || codes.Codes[0] != wire.OK {
		t.Fatalf("PutEnd: %v %v", err, codes)
	}
	refused(t, "a 17-byte key", putStart(key17, 10), wire.ErrInvalidKey,
		`key "kkkkkkkkkkkkkkkkk" (item 0) of 17 bytes exceeds --max_key_bytes=16`)
	refused(t, "an object of 1001 bytes", putStart("big", 1001), wire.ErrInvalidParams,
		`object "big" (item 0) of 1001 bytes exceeds --max_object_bytes=1000`)
	for _, k := range []string{key17, "big"} {
		if _, ok := s.Core().QueryKey(k); ok {
			t.Fatalf("refused %q was stored", k)
		}
	}
	// Every request naming keys is checked: reads, removes, tasks.
	var got wire.GetReplicasResp
	refused(t, "a get of a 17-byte key", c.Call(ctx, wire.OpGetReplicas, &wire.KeysReq{Keys: []string{key17}}, &got),
		wire.ErrInvalidKey, "--max_key_bytes=16")
	refused(t, "a remove of a 17-byte key", c.Call(ctx, wire.OpRemove, &wire.RemoveReq{Keys: []string{key17}}, &codes),
		wire.ErrInvalidKey, "--max_key_bytes=16")
	refused(t, "a task on a 17-byte key", c.Call(ctx, wire.OpCreateTask, &wire.CreateTaskReq{ClientID: "c1",
		Kind: wire.TaskCopy, Key: key17, Targets: []string{seg.Name}}, &wire.TaskPlan{}), wire.ErrInvalidKey, "--max_key_bytes=16")

	// Keys per request, at and over.
	keys := make([]string, 4097)
	for i := range keys {
		keys[i] = fmt.Sprint("k", i)
	}
	if err := c.Call(ctx, wire.OpExist, &wire.KeysReq{Keys: keys[:4096]}, &codes); err != nil || len(codes.Codes) != 4096 {
		t.Fatalf("4096 keys: %v", err)
	}
	refused(t, "4097 keys", c.Call(ctx, wire.OpExist, &wire.KeysReq{Keys: keys}, &codes), wire.ErrInvalidParams,
		"4097 keys in one request exceed --max_batch_keys=4096")

	// Request bytes, at and over.
	ping := func(n int) error {
		for l := n - 8; l <= n; l++ {
			req := &wire.PingReq{ClientID: strings.Repeat("c", l)}
			if b, _ := msgpack.Marshal(req); len(b) == n {
				return c.Call(ctx, wire.OpPing, req, &wire.PingResp{})
			}
		}
		t.Fatalf("no ping of %d bytes", n)
		return nil
	}
	if err := ping(65536); err != nil {
		t.Fatalf("a request of 65536 bytes: %v", err)
	}
	refused(t, "a request of 65537 bytes", ping(65537), wire.ErrInvalidParams,
		"request body of 65537 bytes exceeds --rpc_max_request_bytes=65536")

	// The master serves on, the object at the limits readable.
	if err := c.Call(ctx, wire.OpGetReplicas, &wire.KeysReq{Keys: []string{key16}}, &got); err != nil ||
		got.Results[0].Code != wire.OK || got.Results[0].Size != 1000 {
		t.Fatalf("the stored object after the refusals: %v %+v", err, got)
	}
	if n := strings.Count(logs.String(), "request refused"); n != 2 { // one per kind per 10 s
		t.Fatalf("%d refusal lines, want 2 (the checks', the body's):\n%s", n, logs)
	}
	if s.rpc.Panics() != 0 {
		t.Fatal("a handler panicked")
	}
}

// Through the real master: connections from one address up to the limit
// are served, one more is answered RPC_FAIL naming the flag and closed,
// and one that ends makes room.
func TestMasterConnectionLimit(t *testing.T) {
	s, logs := startWithFlags(t, "--rpc_max_connections_per_ip=2")
	ping := func(c net.Conn, r *bufio.Reader) error {
		body, _ := msgpack.Marshal(&wire.PingReq{ClientID: "c1"})
		if _, err := c.Write(wire.AppendFrame(nil, 1, wire.OpPing, wire.OK, body)); err != nil {
			return err
		}
		h, b, err := wire.ReadFrame(r, nil)
		if err != nil {
			return err
		}
		return rpc.DecodeReply(h.Op, h.Status, b, &wire.PingResp{})
	}
	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(10 * time.Second))
		return c, bufio.NewReader(c)
	}
	c1, r1 := dial()
	c2, r2 := dial()
	if err := ping(c1, r1); err != nil {
		t.Fatal(err)
	}
	if err := ping(c2, r2); err != nil {
		t.Fatal(err)
	}
	c3, r3 := dial()
	refused(t, "a third connection", ping(c3, r3), wire.ErrRPCFail,
		"at most 2 connections from one address (--rpc_max_connections_per_ip=2), and 127.0.0.1 has them")
	if !strings.Contains(logs.String(), "connection refused") {
		t.Fatalf("no log line:\n%s", logs)
	}
	if err := ping(c2, r2); err != nil {
		t.Fatalf("a served connection after the refusal: %v", err)
	}
	c1.Close()
	cl := rpc.NewClient(s.Addr())
	defer cl.Close()
	testbase.WaitFor(t, "room after a connection closed", func() bool {
		return cl.Call(context.Background(), wire.OpPing, &wire.PingReq{ClientID: "c2"}, &wire.PingResp{}) == nil
	})
}

// Every request the master serves that names keys is a wire.Keyed, so its
// keys are checked against the limits before the core sees them.
func TestEveryRequestWithKeysIsChecked(t *testing.T) {
	for _, m := range masterOps {
		req := m.req()
		v := reflect.ValueOf(req).Elem()
		for i := range v.NumField() {
			f := v.Type().Field(i)
			isKeys := (f.Name == "Keys" && f.Type == reflect.TypeOf([]string(nil))) ||
				(f.Name == "Key" && f.Type.Kind() == reflect.String)
			if _, keyed := req.(wire.Keyed); isKeys && !keyed {
				t.Errorf("%v: %T names keys (%s) but is no wire.Keyed", m.op, req, f.Name)
			}
		}
	}
}
