// limits_test.go checks the RPC server's per-peer limits at their edges:
// body size, connections and requests in flight from one address.

package rpc

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/gostore/gostore/gostore/internal/testbase"
	"github.com/gostore/gostore/gostore/wire"
)

// startLimited serves the echo handler (and those more registers) with opt.
func startLimited(t *testing.T, opt ServerOptions, more func(*Server)) (*Server, string, *testbase.LogBuffer) {
	t.Helper()
	logs := &testbase.LogBuffer{}
	s := NewServerWith(slog.New(slog.NewTextHandler(logs, nil)), opt)
	HandleFunc(s, wire.OpPing, func(r *echoReq) (*echoResp, error) { return &echoResp{S: r.S + "!"}, nil })
	if more != nil {
		more(s)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	t.Cleanup(s.Close)
	return s, ln.Addr().String(), logs
}

// echoOfSize is an echo request whose body is exactly n bytes.
func echoOfSize(t *testing.T, n int) *echoReq {
	t.Helper()
	for l := n - 16; l <= n; l++ {
		req := &echoReq{S: strings.Repeat("x", l)}
		if b, _ := msgpack.Marshal(req); len(b) == n {
			return req
		}
	}
	t.Fatalf("no echo request of %d bytes", n)
	return nil
}

// lines counts the log lines holding msg.
func lines(logs *testbase.LogBuffer, msg string) int { return strings.Count(logs.String(), msg) }

func idleConns(c *Client) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.mu.idle)
}

// A body at the limit is served; one byte more is dropped and answered
// INVALID_PARAMS naming the flag, on a connection that goes on serving;
// the refusals of a burst log one line.
func TestRequestBodyLimit(t *testing.T) {
	const limit = 64 << 10
	_, addr, logs := startLimited(t, ServerOptions{MaxBody: Limit{N: limit, Flag: "rpc_max_request_bytes"}}, nil)
	c := NewClient(addr)
	defer c.Close()
	ctx := context.Background()
	at := echoOfSize(t, limit)
	var resp echoResp
	if err := c.Call(ctx, wire.OpPing, at, &resp); err != nil || resp.S != at.S+"!" {
		t.Fatalf("a body at the limit: %v", err)
	}
	over := echoOfSize(t, limit+1)
	for range 2 {
		err := c.Call(ctx, wire.OpPing, over, &resp)
		if wire.CodeOf(err) != wire.ErrInvalidParams ||
			!strings.Contains(err.Error(), "request body of 65537 bytes exceeds --rpc_max_request_bytes=65536") {
			t.Fatalf("a body over the limit: %v", err)
		}
	}
	if err := c.Call(ctx, wire.OpPing, &echoReq{S: "after"}, &resp); err != nil || resp.S != "after!" {
		t.Fatalf("after the refusals: %v", err)
	}
	if n := idleConns(c); n != 1 {
		t.Fatalf("%d connections: the refusals closed the first", n)
	}
	if n := lines(logs, "body over the limit"); n != 1 {
		t.Fatalf("%d log lines for two refusals, want 1:\n%s", n, logs)
	}
}

// rawCall sends an echo request on c and reads the answer.
func rawCall(c net.Conn, r *bufio.Reader, id uint64, s string) (wire.Header, error) {
	body, _ := msgpack.Marshal(&echoReq{S: s})
	if _, err := c.Write(wire.AppendFrame(nil, id, wire.OpPing, wire.OK, body)); err != nil {
		return wire.Header{}, err
	}
	h, b, err := wire.ReadFrame(r, nil)
	if err != nil {
		return h, err
	}
	return h, DecodeReply(h.Op, h.Status, b, &echoResp{})
}

// Connections up to the limit from one address are served; one more has
// its first request answered RPC_FAIL naming the flag, then is closed; a
// connection that ends makes room.
func TestConnectionsPerAddress(t *testing.T) {
	_, addr, logs := startLimited(t, ServerOptions{ConnsPerIP: Limit{N: 2, Flag: "rpc_max_connections_per_ip"}}, nil)
	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(10 * time.Second))
		return c, bufio.NewReader(c)
	}
	c1, r1 := dial()
	c2, r2 := dial()
	for i, cr := range []struct {
		c net.Conn
		r *bufio.Reader
	}{{c1, r1}, {c2, r2}} {
		if _, err := rawCall(cr.c, cr.r, 1, "in"); err != nil {
			t.Fatalf("connection %d of 2: %v", i+1, err)
		}
	}
	for range 2 {
		c3, r3 := dial()
		_, err := rawCall(c3, r3, 3, "one too many")
		if wire.CodeOf(err) != wire.ErrRPCFail || !strings.Contains(err.Error(),
			"at most 2 connections from one address (--rpc_max_connections_per_ip=2), and 127.0.0.1 has them") {
			t.Fatalf("a third connection: %v", err)
		}
		if _, err := r3.ReadByte(); err != io.EOF {
			t.Fatalf("the refused connection stays open: %v", err)
		}
	}
	if n := lines(logs, "connection refused"); n != 1 {
		t.Fatalf("%d log lines for two refusals, want 1:\n%s", n, logs)
	}
	if _, err := rawCall(c2, r2, 2, "still"); err != nil {
		t.Fatalf("a counted connection after the refusals: %v", err)
	}
	c1.Close()
	testbase.WaitFor(t, "room after a connection closed", func() bool {
		c4, r4 := dial()
		_, err := rawCall(c4, r4, 4, "room")
		return err == nil
	})
}

// Requests up to the limit run at once from one address; one more waits
// (it is not refused) and runs when a slot frees; the wait logs one line,
// and a server closing does not wait for the waiter.
func TestInflightPerAddressWaits(t *testing.T) {
	entered := make(chan string, 8)
	release := make(chan struct{})
	s, addr, logs := startLimited(t, ServerOptions{InflightPerIP: Limit{N: 2, Flag: "rpc_max_inflight_per_ip"}},
		func(s *Server) {
			HandleFunc(s, wire.OpExist, func(r *wire.KeysReq) (*wire.CodesResp, error) {
				entered <- r.ClientID
				<-release
				return &wire.CodesResp{}, nil
			})
		})
	c := NewClientWith(addr, ClientOptions{Netpoll: true})
	defer c.Close()
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	call := func(id string) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- c.Call(context.Background(), wire.OpExist, &wire.KeysReq{ClientID: id}, &wire.CodesResp{})
		}()
	}
	for i := range 3 {
		call(fmt.Sprint(i))
	}
	for range 2 {
		select {
		case <-entered:
		case <-time.After(5 * time.Second):
			t.Fatal("two requests do not run at once under a limit of 2")
		}
	}
	select {
	case id := <-entered:
		t.Fatalf("request %s ran with 2 in flight", id)
	case <-time.After(200 * time.Millisecond):
	}
	release <- struct{}{}
	select {
	case <-entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting request did not run when a slot freed")
	}
	release <- struct{}{}
	release <- struct{}{}
	wg.Wait()
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatalf("a call under the limit: %v", err)
		}
	}
	if n := lines(logs, "requests wait"); n != 1 {
		t.Fatalf("%d log lines for one wait, want 1:\n%s", n, logs)
	}

	// Close with two requests running and one waiting: the waiter gives
	// up, the running ones end when released.
	for i := range 3 {
		call(fmt.Sprint("close", i))
	}
	<-entered
	<-entered
	time.Sleep(50 * time.Millisecond) // the third is waiting
	closed := make(chan struct{})
	go func() { s.Close(); close(closed) }()
	time.Sleep(50 * time.Millisecond)
	close(release)
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close hangs on a waiting request")
	}
	wg.Wait()
}

// Admit's refusal answers the request without running the handler, names
// what it says, and logs one line with the peer per burst.
func TestAdmitRefusesBeforeTheHandler(t *testing.T) {
	var ran sync.Map
	admit := func(req any) error {
		if r, ok := req.(*echoReq); ok && len(r.S) > 4 {
			return wire.Errorf(wire.ErrInvalidKey, "key of %d bytes exceeds --max_key_bytes=4", len(r.S))
		}
		return nil
	}
	_, addr, logs := startLimited(t, ServerOptions{Admit: admit}, func(s *Server) {
		HandleFunc(s, wire.OpPing, func(r *echoReq) (*echoResp, error) {
			ran.Store(r.S, true)
			return &echoResp{S: r.S + "!"}, nil
		})
	})
	c := NewClient(addr)
	defer c.Close()
	var resp echoResp
	if err := c.Call(context.Background(), wire.OpPing, &echoReq{S: "four"}, &resp); err != nil || resp.S != "four!" {
		t.Fatalf("at the limit: %v", err)
	}
	for range 2 {
		err := c.Call(context.Background(), wire.OpPing, &echoReq{S: "fives"}, &resp)
		if wire.CodeOf(err) != wire.ErrInvalidKey || !strings.Contains(err.Error(), "key of 5 bytes exceeds --max_key_bytes=4") {
			t.Fatalf("over the limit: %v", err)
		}
	}
	if _, ok := ran.Load("fives"); ok {
		t.Fatal("the handler ran a refused request")
	}
	if n := lines(logs, "request refused"); n != 1 || !strings.Contains(logs.String(), "peer=127.0.0.1:") {
		t.Fatalf("%d log lines for two refusals, want 1 naming the peer:\n%s", n, logs)
	}
	if err := c.Call(context.Background(), wire.OpPing, &echoReq{S: "ok"}, &resp); err != nil {
		t.Fatalf("after the refusals: %v", err)
	}
}
