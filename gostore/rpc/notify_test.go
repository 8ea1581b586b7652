// notify_test.go tests Notify: requests sent without waiting, every one
// handled, in order, once NotifyFlush returns.

package rpc

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"testing"

	"github.com/gostore/gostore/gostore/internal/testbase"
	"github.com/gostore/gostore/gostore/wire"
)

// A server that records what it was told, in order.
func startRecorder(t *testing.T) (string, func() []string) {
	t.Helper()
	var mu sync.Mutex
	var seen []string
	s := NewServer(slog.New(slog.NewTextHandler(&testbase.LogBuffer{}, nil)), nil)
	HandleFunc(s, wire.OpPing, func(r *echoReq) (*echoResp, error) {
		mu.Lock()
		seen = append(seen, r.S)
		mu.Unlock()
		return &echoResp{S: r.S}, nil
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	t.Cleanup(s.Close)
	return ln.Addr().String(), func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen...)
	}
}

// More notifications than the backlog (so Notify reads answers on the
// way), then a flush: the server has handled every one, in order, and
// calls on the same client still work.
func TestNotifyThenFlush(t *testing.T) {
	addr, seen := startRecorder(t)
	c := NewClient(addr)
	defer c.Close()
	ctx := context.Background()
	const n = 3*notifyBacklog + 5
	for i := range n {
		if err := c.Notify(ctx, wire.OpPing, &echoReq{S: strconv.Itoa(i)}); err != nil {
			t.Fatalf("notify %d: %v", i, err)
		}
	}
	if err := c.NotifyFlush(ctx); err != nil {
		t.Fatal(err)
	}
	got := seen()
	if len(got) != n {
		t.Fatalf("the server handled %d of %d notifications after the flush", len(got), n)
	}
	for i, s := range got {
		if s != strconv.Itoa(i) {
			t.Fatalf("notification %d handled as %q: out of order", i, s)
		}
	}
	var resp echoResp
	if err := c.Call(ctx, wire.OpPing, &echoReq{S: "call"}, &resp); err != nil || resp.S != "call" {
		t.Fatalf("a call after notifications: %v %q", err, resp.S)
	}
	if err := c.NotifyFlush(ctx); err != nil {
		t.Fatal("a flush with nothing sent:", err)
	}
}

// A netpoll client has no blocking connection to write on: Notify sends
// nothing and says so.
func TestNotifyUnavailable(t *testing.T) {
	addr, seen := startRecorder(t)
	c := NewClientWith(addr, ClientOptions{Netpoll: true})
	defer c.Close()
	if err := c.Notify(context.Background(), wire.OpPing, &echoReq{S: "x"}); !errors.Is(err, ErrNotifyUnavailable) {
		t.Fatalf("Notify on a netpoll client: %v", err)
	}
	var resp echoResp
	if err := c.Call(context.Background(), wire.OpPing, &echoReq{S: "y"}, &resp); err != nil {
		t.Fatal(err)
	}
	if got := seen(); len(got) != 1 || got[0] != "y" {
		t.Fatalf("the server saw %v", got)
	}
}
