// mux_test.go tests muxClient against an rpc.Server: concurrent callers,
// error codes, calls after Close.

package main

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/gostore/gostore/gostore/rpc"
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

// startEcho serves OpPing on 127.0.0.1: it answers S+"!", or the code
// Fail asks for.
func startEcho(t *testing.T) string {
	t.Helper()
	s := rpc.NewServer(slog.New(slog.DiscardHandler), nil)
	rpc.HandleFunc(s, wire.OpPing, func(r *echoReq) (*echoResp, error) {
		if r.Fail != 0 {
			return nil, wire.Errorf(wire.Code(r.Fail), "asked to fail")
		}
		return &echoResp{S: r.S + "!"}, nil
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	t.Cleanup(s.Close)
	return ln.Addr().String()
}

func TestMuxClientConcurrentCalls(t *testing.T) {
	addr := startEcho(t)
	m, err := dialMux(addr, 2)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				s := string(rune('a'+g)) + strings.Repeat("x", i%7)
				var resp echoResp
				if err := m.Call(context.Background(), wire.OpPing, &echoReq{S: s}, &resp); err != nil || resp.S != s+"!" {
					t.Errorf("call %d/%d: %v %q", g, i, err, resp.S)
					return
				}
			}
		}()
	}
	wg.Wait()
	var resp echoResp
	if err := m.Call(context.Background(), wire.OpPing, &echoReq{Fail: int32(wire.ErrObjectNotFound)}, &resp); wire.CodeOf(err) != wire.ErrObjectNotFound {
		t.Fatalf("error code over mux: %v", err)
	}
	m.Close()
	if err := m.Call(context.Background(), wire.OpPing, &echoReq{S: "late"}, &resp); wire.CodeOf(err) != wire.ErrRPCFail {
		t.Fatalf("call after close: %v", err)
	}
}
