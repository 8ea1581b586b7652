// notify_test.go tests Notify: requests sent without waiting, every one
// handled, in order, once NotifyFlush returns.

package rpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
	"golang.org/x/sys/unix"

	"github.com/gostore/gostore/gostore/internal/blockconn"
	"github.com/gostore/gostore/gostore/internal/testbase"
	"github.com/gostore/gostore/gostore/wire"
)

// A server that records what it was told, in order; hook, when set, runs
// on each request after it is recorded (a test holds one there).
func startRecorder(t *testing.T, hook func(s string)) (string, func() []string) {
	t.Helper()
	var mu sync.Mutex
	var seen []string
	s := NewServer(slog.New(slog.NewTextHandler(&testbase.LogBuffer{}, nil)), nil)
	HandleFunc(s, wire.OpPing, func(r *echoReq) (*echoResp, error) {
		mu.Lock()
		seen = append(seen, r.S)
		mu.Unlock()
		if hook != nil {
			hook(r.S)
		}
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

// pooledClient is a client of addr (closed when the test ends) after one
// call, "a": it holds an idle connection a notification can ride.
func pooledClient(t *testing.T, addr string) *Client {
	t.Helper()
	c := NewClient(addr)
	t.Cleanup(c.Close)
	if err := c.Call(context.Background(), wire.OpPing, &echoReq{S: "a"}, &echoResp{}); err != nil {
		t.Fatal(err)
	}
	return c
}

// Notifications ride the connection the next call takes. More of them
// than the backlog (so Notify reads answers on the way), then a flush: the
// server has handled every one, in order, and calls on the same client
// still work, on the same connection.
func TestNotifyThenFlush(t *testing.T) {
	addr, seen := startRecorder(t, nil)
	c := NewClient(addr)
	defer c.Close()
	ctx := context.Background()
	if err := c.Notify(ctx, wire.OpPing, &echoReq{S: "early"}); !errors.Is(err, ErrNotifyUnavailable) {
		t.Fatalf("Notify with no connection idle: %v", err)
	}
	var first echoResp
	if err := c.Call(ctx, wire.OpPing, &echoReq{S: "0"}, &first); err != nil {
		t.Fatal(err)
	}
	const n = 3*notifyBacklog + 5
	for i := 1; i < n; i++ {
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
	if idle := idleConns(c); idle != 1 {
		t.Fatalf("%d idle connections: notifications took one of their own", idle)
	}
}

// A call reads the answers of the notifications sent on its connection
// ahead of its own reply: the server handled them first, the call gets its
// own answer, not theirs, and nothing is owed once it returns. A flush
// beside a call the server holds returns once that call's answers come
// (the notification's answer rides ahead of the held reply).
func TestCallReadsNotifyAnswersFirst(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	addr, seen := startRecorder(t, func(s string) {
		if s == "hold" {
			entered <- struct{}{}
			<-release
		}
	})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free) // runs before the server's Close: the held handler must end
	c := pooledClient(t, addr)
	ctx := context.Background()
	var resp echoResp
	for _, s := range []string{"b", "c"} {
		if err := c.Notify(ctx, wire.OpPing, &echoReq{S: s}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Call(ctx, wire.OpPing, &echoReq{S: "d"}, &resp); err != nil || resp.S != "d" {
		t.Fatalf("the call after two notifications: %v, answer %q", err, resp.S)
	}
	if err := c.Notify(ctx, wire.OpPing, &echoReq{S: "e"}); err != nil {
		t.Fatal(err)
	}
	held := make(chan error, 1)
	go func() { held <- c.Call(ctx, wire.OpPing, &echoReq{S: "hold"}, &echoResp{}) }()
	<-entered
	flushed := make(chan error, 1)
	go func() { flushed <- c.NotifyFlush(ctx) }()
	free()
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	if err := <-flushed; err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(seen(), ""); got != "abcdehold" {
		t.Fatalf("the server handled %q", got)
	}
	c.mu.Lock()
	owing := len(c.mu.owing)
	c.mu.Unlock()
	if owing != 0 {
		t.Fatalf("%d connections still owe answers after the calls read them", owing)
	}
}

// rawServer accepts one connection at addr's listener and hands it to the
// test, which speaks the frames itself.
func rawServer(t *testing.T) (string, <-chan net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	conns := make(chan net.Conn, 1)
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			close(conns)
			return
		}
		t.Cleanup(func() { nc.Close() })
		conns <- nc
	}()
	return ln.Addr().String(), conns
}

// serveOne reads one request frame from nc and returns it decoded; reply,
// when set, answers it with that string.
func serveOne(t *testing.T, nc net.Conn, reply *string) (wire.Header, echoReq) {
	t.Helper()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	h, b, err := wire.ReadFrame(nc, nil)
	if err != nil {
		t.Fatalf("reading a request: %v", err)
	}
	var req echoReq
	if err := wire.Unmarshal(b, &req); err != nil {
		t.Fatal(err)
	}
	if reply != nil {
		body, _ := msgpack.Marshal(&echoResp{S: *reply})
		if _, err := nc.Write(wire.AppendFrame(nil, h.ID, h.Op, wire.OK, body)); err != nil {
			t.Fatal(err)
		}
	}
	return h, req
}

// answerBoth writes the answers to the requests with headers nh and dh
// ("n?" and "d!") on nc, in one write.
func answerBoth(t *testing.T, nc net.Conn, nh, dh wire.Header) {
	t.Helper()
	var out []byte
	for _, r := range []struct {
		h wire.Header
		s string
	}{{nh, "n?"}, {dh, "d!"}} {
		body, _ := msgpack.Marshal(&echoResp{S: r.s})
		out = wire.AppendFrame(out, r.h.ID, r.h.Op, wire.OK, body)
	}
	if _, err := nc.Write(out); err != nil {
		t.Fatal(err)
	}
}

// rawPooled is a client of a raw server (the test speaks its frames on nc)
// with one pooled connection, made by a first call ("a") served and
// answered.
func rawPooled(t *testing.T) (c *Client, nc net.Conn) {
	t.Helper()
	addr, conns := rawServer(t)
	c = NewClient(addr)
	t.Cleanup(c.Close)
	first := make(chan error, 1)
	go func() { first <- c.Call(context.Background(), wire.OpPing, &echoReq{S: "a"}, &echoResp{}) }()
	nc, ok := <-conns
	if !ok {
		t.Fatal("no connection")
	}
	a := "a"
	serveOne(t, nc, &a)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	return c, nc
}

// owingOne is rawPooled's client after a notification ("n", header nh)
// the server has read and not answered.
func owingOne(t *testing.T) (c *Client, nc net.Conn, nh wire.Header) {
	t.Helper()
	c, nc = rawPooled(t)
	if err := c.Notify(context.Background(), wire.OpPing, &echoReq{S: "n"}); err != nil {
		t.Fatal(err)
	}
	nh, n := serveOne(t, nc, nil)
	if n.S != "n" {
		t.Fatalf("the server read %q for the notification", n.S)
	}
	return c, nc, nh
}

// A call on a connection whose notification is not answered yet sends its
// request without waiting for that answer: the server reads the call's
// request while it still owes the notification's answer, then answers
// both, and the call returns its own reply with nothing owed.
func TestACallDoesNotWaitForOwedAnswers(t *testing.T) {
	c, nc, nh := owingOne(t)
	ctx := context.Background()
	var resp echoResp
	called := make(chan error, 1)
	go func() { called <- c.Call(ctx, wire.OpPing, &echoReq{S: "d"}, &resp) }()
	dh, d := serveOne(t, nc, nil) // the call's request came while "n" is owed
	if d.S != "d" {
		t.Fatalf("the server read %q for the call", d.S)
	}
	answerBoth(t, nc, nh, dh)
	if err := <-called; err != nil || resp.S != "d!" {
		t.Fatalf("the call: %v, answer %q (the notification's was %q)", err, resp.S, "n?")
	}
	c.mu.Lock()
	owing := len(c.mu.owing)
	c.mu.Unlock()
	if owing != 0 {
		t.Fatalf("%d connections owe answers after the call read them", owing)
	}
	if err := c.NotifyFlush(ctx); err != nil {
		t.Fatal(err)
	}
}

// A server that goes away with a notification unanswered and the next
// call's request read fails that call (ErrRPCFail: it may or may not have
// been handled), and leaves nothing owed: a flush returns, and the
// connection is not kept for the next call.
func TestOwedAnswerThatNeverComesFailsOnlyThatCall(t *testing.T) {
	c, nc, _ := owingOne(t)
	ctx := context.Background()
	called := make(chan error, 1)
	go func() { called <- c.Call(ctx, wire.OpPing, &echoReq{S: "d"}, &echoResp{}) }()
	serveOne(t, nc, nil)
	nc.Close()
	if err := <-called; wire.CodeOf(err) != wire.ErrRPCFail {
		t.Fatalf("a call whose server went away before answering: %v, want RPC_FAIL", err)
	}
	if err := c.NotifyFlush(ctx); err != nil {
		t.Fatalf("a flush after the failed call: %v", err)
	}
	if idle := idleConns(c); idle != 0 {
		t.Fatalf("%d idle connections after the only one failed", idle)
	}
}

// A master that answered a notification and then went away (a restart)
// left the answer ahead of its end of the stream: the next call reads it,
// sees the connection closed, and goes out on a new one.
func TestCallAfterTheMasterWentAwayBehindANotification(t *testing.T) {
	s1, addr, _ := startEcho(t)
	c := pooledClient(t, addr)
	ctx := context.Background()
	var resp echoResp
	if err := c.Notify(ctx, wire.OpPing, &echoReq{S: "n"}); err != nil {
		t.Fatal(err)
	}
	if err := c.NotifyFlush(ctx); err != nil { // the answer is read: nothing owed
		t.Fatal(err)
	}
	if err := c.Notify(ctx, wire.OpPing, &echoReq{S: "m"}); err != nil {
		t.Fatal(err)
	}
	// Wait for the answer to land, unread, then stop the server.
	c.mu.Lock()
	fd := c.mu.idle[len(c.mu.idle)-1].c.(*blockconn.Conn).FD()
	c.mu.Unlock()
	if n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 10000); n != 1 || err != nil {
		t.Fatalf("the notification's answer did not come: %d %v", n, err)
	}
	s1.Close()
	s2 := NewServer(slog.New(slog.NewTextHandler(&testbase.LogBuffer{}, nil)), nil)
	HandleFunc(s2, wire.OpPing, func(r *echoReq) (*echoResp, error) { return &echoResp{S: r.S + "?"}, nil })
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("the address is taken again: %v", err)
	}
	go s2.Serve(ln)
	t.Cleanup(s2.Close)
	if err := c.Call(ctx, wire.OpPing, &echoReq{S: "b"}, &resp); err != nil || resp.S != "b?" {
		t.Fatalf("the call after the restart: %v %q", err, resp.S)
	}
}

// A netpoll client has no blocking connection to write on: Notify sends
// nothing and says so.
func TestNotifyUnavailable(t *testing.T) {
	addr, seen := startRecorder(t, nil)
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

// pendingBytes reports whether the server's end nc has bytes to read, not
// waiting for any (a loopback write is queued there before it returns).
func pendingBytes(t *testing.T, nc net.Conn) bool {
	t.Helper()
	raw, err := nc.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	if err := raw.Control(func(fd uintptr) {
		n, err = unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 0)
	}); err != nil {
		t.Fatal(err)
	}
	return n == 1
}

// A notification NotifyLater queues goes out with the next call, ahead of
// its request, and not before: nothing reaches the server until the call,
// which then brings the notification and its own request, in that order;
// answered both at once, the call returns its own answer with nothing
// owed.
func TestNotifyLaterRidesTheNextCall(t *testing.T) {
	c, nc := rawPooled(t)
	ctx := context.Background()
	if err := c.NotifyLater(ctx, wire.OpPing, &echoReq{S: "n"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	if pendingBytes(t, nc) {
		t.Fatal("NotifyLater wrote at once")
	}
	var resp echoResp
	called := make(chan error, 1)
	go func() { called <- c.Call(ctx, wire.OpPing, &echoReq{S: "d"}, &resp) }()
	nh, n := serveOne(t, nc, nil)
	dh, d := serveOne(t, nc, nil)
	if n.S != "n" || d.S != "d" {
		t.Fatalf("the server read %q then %q, want the notification then the call", n.S, d.S)
	}
	answerBoth(t, nc, nh, dh)
	if err := <-called; err != nil || resp.S != "d!" {
		t.Fatalf("the call: %v, answer %q", err, resp.S)
	}
	c.mu.Lock()
	owing, waiting := len(c.mu.owing), c.mu.laterCount
	c.mu.Unlock()
	if owing != 0 || waiting != 0 {
		t.Fatalf("after the call: %d connections owe answers, %d notifications wait", owing, waiting)
	}
}

// recorded is a recording server whose handler reports each request on
// the returned channel.
func recorded(t *testing.T) (string, func() []string, <-chan string) {
	t.Helper()
	got := make(chan string, 1024)
	addr, seen := startRecorder(t, func(s string) { got <- s })
	return addr, seen, got
}

func waitFor(t *testing.T, got <-chan string, want string) {
	t.Helper()
	select {
	case s := <-got:
		if s != want {
			t.Fatalf("the server was told %q, want %q", s, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the server was not told %q", want)
	}
}

// With no call to carry it, a notification goes on its own once its wait
// is over; a flush then finds nothing left to send and returns.
func TestNotifyLaterGoesAloneWhenNoCallComes(t *testing.T) {
	addr, seen, got := recorded(t)
	c := pooledClient(t, addr)
	waitFor(t, got, "a")
	if err := c.NotifyLater(context.Background(), wire.OpPing, &echoReq{S: "n"}, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	waitFor(t, got, "n")
	if err := c.NotifyFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s := seen(); len(s) != 2 {
		t.Fatalf("the server saw %v", s)
	}
}

// NotifyFlush sends what waits, and returns once it is handled; a backlog
// of waiting notifications is sent by the one that fills it, in order.
func TestNotifyLaterFlushAndBacklog(t *testing.T) {
	addr, seen, got := recorded(t)
	c := pooledClient(t, addr)
	waitFor(t, got, "a")
	ctx := context.Background()
	if err := c.NotifyLater(ctx, wire.OpPing, &echoReq{S: "n"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := c.NotifyFlush(ctx); err != nil {
		t.Fatal(err)
	}
	if s := seen(); len(s) != 2 || s[1] != "n" {
		t.Fatalf("after the flush the server saw %v", s)
	}
	waitFor(t, got, "n")
	for i := range notifyBacklog {
		if err := c.NotifyLater(ctx, wire.OpPing, &echoReq{S: strconv.Itoa(i)}, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	for i := range notifyBacklog {
		waitFor(t, got, strconv.Itoa(i))
	}
}

// Notifications queued by many goroutines while others call, with short
// waits so that timers send some of them: once flushed, the server has
// seen each exactly once, and every call got its own answer.
func TestNotifyLaterUnderConcurrentCalls(t *testing.T) {
	addr, seen := startRecorder(t, nil)
	c := pooledClient(t, addr)
	ctx := context.Background()
	const workers, each = 4, 200
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				s := "w" + strconv.Itoa(w) + "-" + strconv.Itoa(i)
				if i%2 == 0 {
					if err := c.NotifyLater(ctx, wire.OpPing, &echoReq{S: "n" + s}, time.Duration(i%5)*50*time.Microsecond+time.Microsecond); err != nil {
						errs <- err
						return
					}
					continue
				}
				var resp echoResp
				if err := c.Call(ctx, wire.OpPing, &echoReq{S: "c" + s}, &resp); err != nil || resp.S != "c"+s {
					errs <- fmt.Errorf("call %s: %v, answer %q", s, err, resp.S)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := c.NotifyFlush(ctx); err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, s := range seen() {
		count[s]++
	}
	if len(count) != 1+workers*each {
		t.Fatalf("the server saw %d distinct requests, want %d", len(count), 1+workers*each)
	}
	for s, n := range count {
		if n != 1 {
			t.Fatalf("the server saw %q %d times", s, n)
		}
	}
}

// A netpoll client queues nothing; a closed one drops what waits and
// queues nothing more.
func TestNotifyLaterUnavailableAndClosed(t *testing.T) {
	addr, _ := startRecorder(t, nil)
	np := NewClientWith(addr, ClientOptions{Netpoll: true})
	defer np.Close()
	if err := np.NotifyLater(context.Background(), wire.OpPing, &echoReq{S: "x"}, time.Hour); !errors.Is(err, ErrNotifyUnavailable) {
		t.Fatalf("NotifyLater on a netpoll client: %v", err)
	}
	c := pooledClient(t, addr)
	if err := c.NotifyLater(context.Background(), wire.OpPing, &echoReq{S: "n"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	c.Close()
	c.mu.Lock()
	waiting := c.mu.laterCount
	c.mu.Unlock()
	if waiting != 0 || c.waiting.Load() {
		t.Fatalf("%d notifications still wait after Close", waiting)
	}
	if err := c.NotifyLater(context.Background(), wire.OpPing, &echoReq{S: "m"}, time.Hour); wire.CodeOf(err) != wire.ErrRPCFail {
		t.Fatalf("NotifyLater on a closed client: %v", err)
	}
}
