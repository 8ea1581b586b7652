package rpc

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gostore/gostore/gostore/internal/blockconn"
	"github.com/gostore/gostore/gostore/internal/testbase"
	"github.com/gostore/gostore/gostore/wire"
)

type echoReq struct {
	_msgpack struct{} `msgpack:",as_array"`
	S        string
	Fail     int32
}

type echoResp struct {
	_msgpack struct{} `msgpack:",as_array"`
	S        string
}

func startEcho(t testing.TB) (*Server, string, *testbase.LogBuffer) {
	t.Helper()
	logs := &testbase.LogBuffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	s := NewServer(log, nil)
	HandleFunc(s, wire.OpPing, func(r *echoReq) (*echoResp, error) {
		if r.Fail != 0 {
			return nil, wire.Errorf(wire.Code(r.Fail), "asked to fail")
		}
		if r.S == "panic" {
			panic("handler bug")
		}
		return &echoResp{S: r.S + "!"}, nil
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	t.Cleanup(s.Close)
	return s, ln.Addr().String(), logs
}

// clientModes are the two ways a Client reads replies.
var clientModes = map[string]ClientOptions{"blocking": {}, "netpoll": {Netpoll: true}}

func TestCallAndErrors(t *testing.T) {
	for name, opt := range clientModes {
		t.Run(name, func(t *testing.T) { testCallAndErrors(t, opt) })
	}
}

func testCallAndErrors(t *testing.T, opt ClientOptions) {
	_, addr, _ := startEcho(t)
	c := NewClientWith(addr, opt)
	defer c.Close()
	ctx := context.Background()
	var resp echoResp
	if err := c.Call(ctx, wire.OpPing, &echoReq{S: "hi"}, &resp); err != nil || resp.S != "hi!" {
		t.Fatalf("call: %v %q", err, resp.S)
	}
	err := c.Call(ctx, wire.OpPing, &echoReq{Fail: int32(wire.ErrObjectHasLease)}, &resp)
	if wire.CodeOf(err) != wire.ErrObjectHasLease {
		t.Fatalf("error code lost: %v", err)
	}
	if err := c.Call(ctx, wire.OpPing, &echoReq{S: "panic"}, &resp); wire.CodeOf(err) != wire.ErrInternal {
		t.Fatalf("panicking handler: %v", err)
	}
	// An unregistered opcode closes the connection: the caller sees RPC_FAIL.
	if err := c.Call(ctx, wire.OpRemoveAll, &echoReq{}, &resp); wire.CodeOf(err) != wire.ErrRPCFail {
		t.Fatalf("unknown op: %v", err)
	}
	if err := c.Call(ctx, wire.OpPing, &echoReq{S: "again"}, &resp); err != nil || resp.S != "again!" {
		t.Fatalf("after a dropped connection: %v", err)
	}
}

// NewClient reads with blocking system calls; Netpoll asks for the
// netpoller. The choice is the Client's own: two clients in one process
// may differ.
func TestClientOptionsPickTheConnection(t *testing.T) {
	_, addr, _ := startEcho(t)
	for name, opt := range clientModes {
		c := NewClientWith(addr, opt)
		defer c.Close()
		var resp echoResp
		if err := c.Call(context.Background(), wire.OpPing, &echoReq{S: name}, &resp); err != nil || resp.S != name+"!" {
			t.Fatalf("%s: %q, %v", name, resp.S, err)
		}
		c.mu.Lock()
		conn := c.mu.idle[0].c
		c.mu.Unlock()
		if _, blocking := conn.(*blockconn.Conn); blocking == opt.Netpoll {
			t.Errorf("%s: the client's connection is a %T", name, conn)
		}
	}
	if o := NewClient(addr).opt; o.Netpoll || o.Observe != nil {
		t.Error("NewClient does not take the default options")
	}
}

// Observe hears of every call as it returns: the op, a duration covering
// the round trip, and the error the caller got.
func TestObserveSeesEveryCall(t *testing.T) {
	_, addr, _ := startEcho(t)
	type seen struct {
		op   wire.Op
		d    time.Duration
		code wire.Code
	}
	var mu sync.Mutex
	var got []seen
	c := NewClientWith(addr, ClientOptions{Observe: func(op wire.Op, d time.Duration, err error) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, seen{op, d, wire.CodeOf(err)})
	}})
	defer c.Close()
	ctx := context.Background()
	var resp echoResp
	began := time.Now()
	if err := c.Call(ctx, wire.OpPing, &echoReq{S: "hi"}, &resp); err != nil {
		t.Fatal(err)
	}
	first := time.Since(began)
	c.Call(ctx, wire.OpPing, &echoReq{Fail: int32(wire.ErrObjectHasLease)}, &resp)
	c.Call(ctx, wire.OpRemoveAll, &echoReq{}, &resp) // unregistered: the connection drops
	mu.Lock()
	defer mu.Unlock()
	want := []struct {
		op   wire.Op
		code wire.Code
	}{{wire.OpPing, wire.OK}, {wire.OpPing, wire.ErrObjectHasLease}, {wire.OpRemoveAll, wire.ErrRPCFail}}
	if len(got) != len(want) {
		t.Fatalf("observed %d calls, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		if got[i].op != w.op || got[i].code != w.code {
			t.Errorf("call %d observed as %s/%d, want %s/%d", i, got[i].op, got[i].code, w.op, w.code)
		}
	}
	if got[0].d <= 0 || got[0].d > first {
		t.Errorf("first call observed as %v; it took %v as the caller saw it", got[0].d, first)
	}
}

func TestGarbageClosesOnlyThatConnection(t *testing.T) {
	_, addr, logs := startEcho(t)
	good := NewClient(addr)
	defer good.Close()
	var resp echoResp
	if err := good.Call(context.Background(), wire.OpPing, &echoReq{S: "x"}, &resp); err != nil {
		t.Fatal(err)
	}
	huge := make([]byte, wire.HeaderSize)
	wire.PutHeader(huge, wire.Header{Len: 1 << 30, ID: 1, Op: wire.OpPing})
	badBody := wire.AppendFrame(nil, 1, wire.OpPing, 0, []byte{0xc1, 0xc1, 0xc1})
	for name, payload := range map[string][]byte{
		"garbage":   []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/1.1\r\n\r\n"),
		"truncated": badBody[:10],
		"huge":      huge,
		"badbody":   badBody,
		"unknownop": wire.AppendFrame(nil, 1, wire.Op(60), 0, nil),
	} {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conn.Write(payload)
		if name == "truncated" {
			conn.(*net.TCPConn).CloseWrite()
		}
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		var b [64]byte
		if n, err := conn.Read(b[:]); err == nil {
			t.Errorf("%s: server answered %d bytes instead of closing", name, n)
		} else if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("%s: connection left open", name)
		}
		conn.Close()
		if err := good.Call(context.Background(), wire.OpPing, &echoReq{S: name}, &resp); err != nil || resp.S != name+"!" {
			t.Fatalf("after %s: %v", name, err)
		}
	}
	// The server logs before it closes a connection, and every one was
	// seen closed above: the lines are written.
	if !bytes.Contains([]byte(logs.String()), []byte("closing connection")) {
		t.Fatalf("bad frames were not logged: %s", logs.String())
	}
}

func TestPipelinedRequestsOnOneConnection(t *testing.T) {
	_, addr, _ := startEcho(t)
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var out []byte
	for i := uint64(1); i <= 50; i++ {
		out = wire.AppendFrame(out, i, wire.OpPing, 0, []byte{0x92, 0xa1, 'a', 0x00})
	}
	conn.Write(out)
	for i := uint64(1); i <= 50; i++ {
		h, _, err := wire.ReadFrame(conn, nil)
		if err != nil || h.ID != i || h.Status != wire.OK {
			t.Fatalf("reply %d: %+v %v", i, h, err)
		}
	}
}

// A master that restarts leaves the client's idle connections dead: the
// next call must not fail on one of them (it takes a fresh connection).
func TestIdleConnectionsOfARestartedServerAreDropped(t *testing.T) {
	s, addr, _ := startEcho(t)
	c := NewClient(addr)
	defer c.Close()
	var resp echoResp
	for i := 0; i < 3; i++ { // leaves idle connections in the pool
		if err := c.Call(context.Background(), wire.OpPing, &echoReq{S: "a"}, &resp); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	s2 := NewServer(nil, nil)
	HandleFunc(s2, wire.OpPing, func(r *echoReq) (*echoResp, error) { return &echoResp{S: r.S + "?"}, nil })
	var ln net.Listener
	var err error
	for deadline := time.Now().Add(5 * time.Second); ; {
		if ln, err = net.Listen("tcp", addr); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Skipf("cannot listen on %s again: %v", addr, err)
	}
	go s2.Serve(ln)
	defer s2.Close()
	awaitIdleHangUps(t, c)
	if err := c.Call(context.Background(), wire.OpPing, &echoReq{S: "b"}, &resp); err != nil || resp.S != "b?" {
		t.Fatalf("first call after the restart: %q, %v", resp.S, err)
	}
}

// awaitIdleHangUps returns once every idle connection of c has received
// its peer's FIN: the kernel reports it (POLLRDHUP) to a poll that blocks
// until then. It fails t when c keeps no idle connection, or when a FIN
// has not come within the bound that turns a hang into a failure.
func awaitIdleHangUps(t *testing.T, c *Client) {
	t.Helper()
	c.mu.Lock()
	idle := append([]*clientConn(nil), c.mu.idle...)
	c.mu.Unlock()
	if len(idle) == 0 {
		t.Fatal("the client kept no idle connection")
	}
	for _, cc := range idle {
		bc, ok := cc.c.(*blockconn.Conn)
		if !ok {
			t.Fatalf("idle connection %T, want a *blockconn.Conn", cc.c)
		}
		fds := []unix.PollFd{{Fd: int32(bc.FD()), Events: unix.POLLRDHUP}}
		for {
			n, err := unix.Poll(fds, int(time.Minute/time.Millisecond))
			if err == unix.EINTR {
				continue
			}
			if err != nil || n == 0 {
				t.Fatalf("no FIN from the closed server on an idle connection: n=%d err=%v", n, err)
			}
			break
		}
	}
}
