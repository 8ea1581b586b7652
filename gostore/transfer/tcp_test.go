// tcp_test.go tests the Engine's TCP path against a Server: sizes, scatter
// lists, batches, concurrency, ranges, dead and hung servers.

package transfer

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/gostore/gostore/gostore/wire"
)

func TestTCPSizesScatter(t *testing.T) {
	const size = 40 << 20
	tp := newTCPPeer(t, size)
	for _, opt := range []Options{
		{ForceTCP: true},
		{ForceTCP: true, StreamsPerPeer: 3, SliceSize: 64 << 10}, // many slices straddling buffers
		{ForceTCP: true, StreamsPerPeer: 1, SliceSize: 1000},     // unaligned slice size
	} {
		t.Run(fmt.Sprintf("streams%d-slice%d", opt.StreamsPerPeer, opt.SliceSize), func(t *testing.T) {
			opt.Log = quietLog()
			e := NewEngine(opt)
			defer e.Close()
			if e.Route(tp.peer) != RouteTCP {
				t.Fatalf("PathFor = %q", e.Route(tp.peer))
			}
			ctx := context.Background()
			seed := uint64(opt.SliceSize)
			off := uint64(3)
			for _, n := range []int{1, 4096, 1<<20 + 3, 16 << 20} {
				for li, lens := range [][]int{nil, {1, 4095, 100000}, {333333}} {
					if n == 16<<20 && (li == 1 || opt.SliceSize == 1000) {
						continue // keeps the race run short; covered by the other layouts
					}
					seed++
					data := pattern(seed, n)
					mustOK(t, grantDo(e, ctx, []Op{{Peer: tp.peer, Offset: off, Bufs: scatter(data, lens...), Write: true}}))
					if d := firstDiff(tp.seg.Bytes()[off:off+uint64(n)], data); d != "" {
						t.Fatalf("write %d bytes at %d, lens %v: %s", n, off, lens, d)
					}
					dst := scatter(make([]byte, n), append(lens, 7777)...)
					mustOK(t, grantDo(e, ctx, []Op{{Peer: tp.peer, Offset: off, Bufs: dst}}))
					if d := firstDiff(join(dst), data); d != "" {
						t.Fatalf("read %d bytes at %d, lens %v: %s", n, off, lens, d)
					}
					off += uint64(n) + 1
					if off > size-(16<<20) {
						off = 5
					}
				}
			}
		})
	}
}

func TestTCPBatch32(t *testing.T) {
	tp := newTCPPeer(t, 4<<20)
	e := NewEngine(Options{ForceTCP: true, Log: quietLog()})
	defer e.Close()
	ctx := context.Background()
	for round := 0; round < 5; round++ {
		var ops []Op
		var want [][]byte
		for i := 0; i < 32; i++ {
			data := pattern(uint64(round*100+i), 4096)
			want = append(want, data)
			ops = append(ops, Op{Peer: tp.peer, Offset: uint64(i*4096*3 + round), Bufs: scatter(data, 1000), Write: true})
		}
		mustOK(t, grantDo(e, ctx, ops))
		reads := make([]Op, 32)
		for i := range reads {
			reads[i] = Op{Peer: tp.peer, Offset: ops[i].Offset, Bufs: scatter(make([]byte, 4096), 3000)}
		}
		mustOK(t, grantDo(e, ctx, reads))
		for i := range reads {
			if d := firstDiff(tp.seg.Bytes()[ops[i].Offset:ops[i].Offset+4096], want[i]); d != "" {
				t.Fatalf("round %d op %d in segment: %s", round, i, d)
			}
			if d := firstDiff(join(reads[i].Bufs), want[i]); d != "" {
				t.Fatalf("round %d op %d read: %s", round, i, d)
			}
		}
	}
}

func TestTCPConcurrent(t *testing.T) {
	const goroutines, region = 8, 1 << 20
	tp := newTCPPeer(t, goroutines*region)
	e := NewEngine(Options{ForceTCP: true, SliceSize: 128 << 10, Log: quietLog()})
	defer e.Close()
	ctx := context.Background()
	var wg sync.WaitGroup
	errc := make(chan error, goroutines)
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			base := uint64(g * region)
			for it := 0; it < 10; it++ {
				big := pattern(uint64(g*100+it), region/2+it)
				small := make([][]byte, 8)
				ops := []Op{{Peer: tp.peer, Offset: base, Bufs: scatter(big, 70000), Write: true}}
				for k := range small {
					small[k] = pattern(uint64(g*100+it+k*7), 4096)
					ops = append(ops, Op{Peer: tp.peer, Offset: base + region/2 + 4096 + uint64(k*5000), Bufs: [][]byte{small[k]}, Write: true})
				}
				for i, err := range grantDo(e, ctx, ops) {
					if err != nil {
						errc <- fmt.Errorf("goroutine %d write op %d: %w", g, i, err)
						return
					}
				}
				reads := make([]Op, len(ops))
				for i := range ops {
					n := len(join(ops[i].Bufs))
					reads[i] = Op{Peer: tp.peer, Offset: ops[i].Offset, Bufs: scatter(make([]byte, n), 50000)}
				}
				for i, err := range grantDo(e, ctx, reads) {
					if err != nil {
						errc <- fmt.Errorf("goroutine %d read op %d: %w", g, i, err)
						return
					}
					if d := firstDiff(join(reads[i].Bufs), join(ops[i].Bufs)); d != "" {
						errc <- fmt.Errorf("goroutine %d iteration %d op %d: %s", g, it, i, d)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
}

func TestTCPOutOfRange(t *testing.T) {
	const size = 1 << 20
	tp := newTCPPeer(t, size)
	e := NewEngine(Options{ForceTCP: true, Log: quietLog()})
	defer e.Close()
	ctx := context.Background()
	before := append([]byte(nil), tp.seg.Bytes()...)
	unknown := tp.peer
	unknown.Size = 0 // the server has to catch it
	for _, p := range []Peer{tp.peer, unknown} {
		errs := grantDo(e, ctx, []Op{
			{Peer: p, Offset: size - 10, Bufs: [][]byte{pattern(1, 11)}, Write: true},
			{Peer: p, Offset: ^uint64(0), Bufs: [][]byte{pattern(2, 2)}, Write: true},
			{Peer: p, Offset: size + 1, Bufs: [][]byte{make([]byte, 10)}},
			{Peer: p, Offset: 100, Bufs: [][]byte{pattern(3, 50)}, Write: true}, // fine
		})
		for i := 0; i < 3; i++ {
			wantCode(t, errs[i], wire.ErrInvalidParams)
		}
		if errs[3] != nil {
			t.Fatalf("in-range op beside bad ones: %v", errs[3])
		}
	}
	copy(before[100:], pattern(3, 50))
	if d := firstDiff(tp.seg.Bytes(), before); d != "" {
		t.Fatalf("segment changed outside the good op: %s", d)
	}
	// A multi-slice write crossing the end, checked by the server only
	// (size unknown): every slice is refused.
	big := make([]byte, 2<<20)
	errs := grantDo(e, ctx, []Op{{Peer: unknown, Offset: size - 1000, Bufs: [][]byte{big}, Write: true}})
	wantCode(t, errs[0], wire.ErrInvalidParams)
	if d := firstDiff(tp.seg.Bytes(), before); d != "" {
		t.Fatalf("segment changed by a rejected write: %s", d)
	}
}

func TestEngineClosed(t *testing.T) {
	tp := newTCPPeer(t, 1<<20)
	e := NewEngine(Options{ForceTCP: true, Log: quietLog()})
	mustOK(t, grantDo(e, context.Background(), []Op{{Peer: tp.peer, Bufs: [][]byte{make([]byte, 10)}}}))
	e.Close()
	e.Close()
	errs := grantDo(e, context.Background(), []Op{{Peer: tp.peer, Bufs: [][]byte{make([]byte, 10)}}})
	wantCode(t, errs[0], wire.ErrTransferFail)
}

// A server that takes requests and never answers: Do must wait for it
// until its deadline passes, then return with -800 (matching
// context.DeadlineExceeded), and the engine must keep working for other
// peers. The deadline passes when the server has the requests, not at a
// time.
func TestTCPHungServerDeadline(t *testing.T) {
	e := NewEngine(Options{ForceTCP: true, Log: quietLog()})
	defer e.Close()
	for _, write := range []bool{true, false} {
		hung, reading := hungServer(t)
		ctx := newDeadlineCtx()
		done := make(chan []error, 1)
		go func() {
			done <- grantDo(e, ctx, []Op{
				{Peer: hung, Offset: 0, Bufs: [][]byte{make([]byte, 8<<20)}, Write: write},
				{Peer: hung, Offset: 8 << 20, Bufs: [][]byte{make([]byte, 4096)}, Write: write},
			})
		}()
		await(t, reading, "the hung server to receive a request")
		select {
		case errs := <-done:
			t.Fatalf("Do returned before its context ended, with no answer from the peer: %v", errs)
		default:
		}
		ctx.expire()
		errs := await(t, done, "Do to return once its context ended")
		for _, err := range errs {
			wantCode(t, err, wire.ErrTransferFail)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("%v does not match DeadlineExceeded", err)
			}
		}
	}
	tp := newTCPPeer(t, 1<<20)
	data := pattern(9, 5000)
	mustOK(t, grantDo(e, context.Background(), []Op{{Peer: tp.peer, Offset: 1, Bufs: [][]byte{data}, Write: true}}))
	if d := firstDiff(tp.seg.Bytes()[1:5001], data); d != "" {
		t.Fatal(d)
	}
}

// A peer that stalls in the middle of a read's payload does not hang the
// call past its ctx: the server answers the one request of a 512 KiB read
// (past the lane, on a pooled stream) with its header and a quarter of
// the bytes, then sends nothing more. Once the ctx ends, Do returns -800
// matching DeadlineExceeded. Before, the request being read was no longer
// among the connection's pending ones, so abandoning the call did not
// break the connection, and Do waited for the rest of the payload for
// good.
func TestTCPStallMidPayloadEndsWithTheCtx(t *testing.T) {
	const n = 512 << 10
	sent := make(chan struct{}, 1)
	peer := rawPeer(t, 1<<20, func(c net.Conn) {
		var hdr [reqHdrSize]byte
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			return
		}
		var resp [respHdrSize]byte
		copy(resp[0:8], hdr[1:9]) // the request's id
		binary.LittleEndian.PutUint64(resp[12:], n)
		if _, err := c.Write(append(resp[:], make([]byte, n/4)...)); err != nil {
			return
		}
		sent <- struct{}{}
		io.Copy(io.Discard, c) // the rest of the request (its grant), then silence
	})
	e := NewEngine(Options{ForceTCP: true, Log: quietLog()})
	defer e.Close()
	ctx := newDeadlineCtx()
	done := make(chan []error, 1)
	go func() { done <- grantDo(e, ctx, []Op{{Peer: peer, Bufs: [][]byte{make([]byte, n)}}}) }()
	await(t, sent, "the peer to send part of the payload")
	ctx.expire()
	errs := await(t, done, "Do to return once its ctx ended")
	wantCode(t, errs[0], wire.ErrTransferFail)
	if !errors.Is(errs[0], context.DeadlineExceeded) {
		t.Fatalf("%v does not match DeadlineExceeded", errs[0])
	}
}

// One call's ctx end does not cut short another call's request on the
// same stream: two 512 KiB reads (past the lane) share the engine's one
// stream to a server that holds its answers until told. The first call's
// ctx ends with both requests on the wire; it returns at once, and once
// the server answers both in order, the second call gets its bytes from
// that same connection, its request sent once. Before, the abandoned
// call broke the stream, and the other call's request was sent again on
// a new connection (the retry that hides one such cut; a second cut
// fails the call).
func TestTCPAbandonedCallLeavesTheStreamToOthers(t *testing.T) {
	const n = 512 << 10
	data := pattern(12, 2*n)
	var mu sync.Mutex
	accepts, requests := 0, 0
	arrived := make(chan struct{}, 8)
	release := make(chan struct{})
	peer := rawPeer(t, 2*n, func(c net.Conn) {
		mu.Lock()
		accepts++
		mu.Unlock()
		hdrs := make(chan [reqHdrSize]byte, 8)
		go func() {
			defer close(hdrs)
			for {
				var hdr [reqHdrSize]byte
				if _, err := io.ReadFull(c, hdr[:]); err != nil {
					return
				}
				mu.Lock()
				requests++
				mu.Unlock()
				hdrs <- hdr
				arrived <- struct{}{}
			}
		}()
		<-release
		for hdr := range hdrs {
			off, ln := binary.LittleEndian.Uint64(hdr[9:]), binary.LittleEndian.Uint64(hdr[17:])
			var resp [respHdrSize]byte
			copy(resp[0:8], hdr[1:9])
			binary.LittleEndian.PutUint64(resp[12:], ln)
			if _, err := c.Write(append(resp[:], data[off:off+ln]...)); err != nil {
				return
			}
		}
	})
	e := NewEngine(Options{ForceTCP: true, StreamsPerPeer: 1, Log: quietLog()})
	defer e.Close()
	ctx := newDeadlineCtx()
	aDone, bDone := make(chan []error, 1), make(chan []error, 1)
	bBuf := make([]byte, n)
	go func() { aDone <- e.Do(ctx, []Op{{Peer: peer, Bufs: [][]byte{make([]byte, n)}}}) }()
	await(t, arrived, "the first call's request")
	go func() { bDone <- e.Do(context.Background(), []Op{{Peer: peer, Offset: n, Bufs: [][]byte{bBuf}}}) }()
	for {
		mu.Lock()
		queued := requests
		mu.Unlock()
		if queued >= 2 {
			break
		}
		await(t, arrived, "the second call's request")
	}
	ctx.expire()
	errs := await(t, aDone, "the first call to return once its ctx ended")
	wantCode(t, errs[0], wire.ErrTransferFail)
	close(release)
	mustOK(t, await(t, bDone, "the second call"))
	if d := firstDiff(bBuf, data[n:]); d != "" {
		t.Fatal(d)
	}
	mu.Lock()
	defer mu.Unlock()
	if accepts != 1 || requests != 2 {
		t.Fatalf("%d connections and %d requests for two reads: the second call's was cut short and sent again", accepts, requests)
	}
}

// hungServer listens on 127.0.0.1 and reads whatever its connections send
// without ever answering. reading yields once a request has arrived.
func hungServer(t *testing.T) (Peer, <-chan struct{}) {
	t.Helper()
	reading := make(chan struct{}, 1)
	peer := rawPeer(t, 64<<20, func(c net.Conn) {
		buf := make([]byte, 64<<10)
		for {
			if _, err := c.Read(buf); err != nil {
				return
			}
			select {
			case reading <- struct{}{}:
			default:
			}
		}
	})
	return peer, reading
}

// deadlineCtx is a context whose deadline passes when the test calls
// expire rather than at a time: Err (and so context.Cause) then says
// context.DeadlineExceeded, as for a real deadline.
type deadlineCtx struct {
	context.Context // Background, for Deadline and Value
	done            chan struct{}
	once            sync.Once
}

func newDeadlineCtx() *deadlineCtx {
	return &deadlineCtx{Context: context.Background(), done: make(chan struct{})}
}

func (c *deadlineCtx) expire()               { c.once.Do(func() { close(c.done) }) }
func (c *deadlineCtx) Done() <-chan struct{} { return c.done }

func (c *deadlineCtx) Err() error {
	select {
	case <-c.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

// await returns what ch yields. The bound only turns a hang into a
// failure that names what never happened; it is not what a test measures.
func await[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(time.Minute):
	}
	t.Fatalf("waited a minute for %s", what)
	var none T
	return none
}

// A server that drops every connection after reading a little: ops fail
// with -800 promptly, with no deadline needed.
func TestTCPServerDropsConnections(t *testing.T) {
	p := rawPeer(t, 64<<20, func(c net.Conn) { c.Read(make([]byte, 100)) })
	e := NewEngine(Options{ForceTCP: true, Log: quietLog()})
	defer e.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	errs := grantDo(e, ctx, []Op{
		{Peer: p, Offset: 0, Bufs: [][]byte{make([]byte, 8<<20)}, Write: true},
		{Peer: p, Offset: 0, Bufs: [][]byte{make([]byte, 8<<20)}},
	})
	for _, err := range errs {
		wantCode(t, err, wire.ErrTransferFail)
	}
	if ctx.Err() != nil {
		t.Fatal("needed the deadline")
	}
}

// The real server closes while transfers run: every Do returns (-800 or
// success), and after a new server starts at the same address the engine
// works again with its pooled connections replaced.
func TestTCPServerClosedMidFlight(t *testing.T) {
	mp := newMovablePeer(t, "midflight", 32<<20, 11)
	p := mp.peer
	e := NewEngine(Options{ForceTCP: true, SliceSize: 256 << 10, Log: quietLog()})
	defer e.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	failures := 0
	started := make(chan struct{}, 4)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 8<<20)
			for it := 0; ; it++ {
				errs := grantDo(e, ctx, []Op{{Peer: p, Offset: uint64(g) * (8 << 20), Bufs: [][]byte{buf}, Write: it%2 == 0}})
				if it == 0 {
					started <- struct{}{}
				}
				if errs[0] != nil {
					if wire.CodeOf(errs[0]) != wire.ErrTransferFail {
						t.Errorf("goroutine %d: %v", g, errs[0])
					}
					mu.Lock()
					failures++
					mu.Unlock()
					return
				}
			}
		}()
	}
	for g := 0; g < 4; g++ {
		<-started
	}
	mp.srv.Close()
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatal("transfers hung until the deadline")
	}
	if failures != 4 {
		t.Fatalf("%d goroutines saw a failure, want 4", failures)
	}

	// A new server at the same address (a new owner's key): the engine
	// recovers.
	mp.restart(t)
	data := pattern(11, 3<<20)
	mustOK(t, grantDo(e, ctx, []Op{{Peer: p, Offset: 12345, Bufs: scatter(data, 1<<20), Write: true}}))
	if d := firstDiff(mp.seg.Bytes()[12345:12345+len(data)], data); d != "" {
		t.Fatal(d)
	}
}
