package rpc

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/gostore/gostore/gostore/wire"
)

// silentMaster accepts connections and reads requests without ever
// answering: a master that stopped (SIGSTOP) as the kernel still takes its
// connections.
func silentMaster(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(io.Discard, c); c.Close() }()
		}
	}()
	return ln.Addr().String()
}

type coded struct{}

func (coded) Error() string        { return "ended on purpose" }
func (coded) WireCode() wire.Code  { return wire.ErrRPCFail }
func (coded) Is(target error) bool { _, ok := target.(coded); return ok }

// A call waiting for a master that does not answer ends as soon as its
// context is cancelled, with the cancellation's cause and code, in both
// reading modes; its deadline gives RPC_TIMEOUT.
func TestCancelWakesAWaitingCall(t *testing.T) {
	addr := silentMaster(t)
	for name, opt := range clientModes {
		t.Run(name, func(t *testing.T) {
			c := NewClientWith(addr, opt)
			defer c.Close()
			ctx, cancel := context.WithCancelCause(context.Background())
			ctx, stop := context.WithTimeout(ctx, 30*time.Second)
			defer stop()
			time.AfterFunc(50*time.Millisecond, func() { cancel(coded{}) })
			began := time.Now()
			err := c.Call(ctx, wire.OpPing, &echoReq{S: "x"}, &echoResp{})
			if took := time.Since(began); took > time.Second {
				t.Fatalf("the cancelled call took %v", took)
			}
			if !errors.Is(err, coded{}) || wire.CodeOf(err) != wire.ErrRPCFail {
				t.Fatalf("err %v (code %v), want the cause", err, wire.CodeOf(err))
			}
			// A context ended before the call: it fails at once.
			if err := c.Call(ctx, wire.OpPing, &echoReq{}, nil); !errors.Is(err, coded{}) {
				t.Fatalf("call on an ended context: %v", err)
			}
			dctx, dstop := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer dstop()
			began = time.Now()
			err = c.Call(dctx, wire.OpPing, &echoReq{}, nil)
			if wire.CodeOf(err) != wire.ErrRPCTimeout || time.Since(began) > time.Second {
				t.Fatalf("deadline: %v after %v", err, time.Since(began))
			}
		})
	}
}
