// tcp_lane_test.go tests the lane: which calls take it, that its bytes and
// codes are those of the streams, and what a dead, restarted or silent peer
// does to it.

package transfer

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/gostore/gostore/gostore/grant"
	"github.com/gostore/gostore/gostore/internal/blockconn"
	"github.com/gostore/gostore/gostore/wire"
)

// laneState returns the peer's idle lane connections and whether any
// stream was dialled to it.
func laneState(e *Engine, addr string) (idle []*blockconn.Conn, streams bool) {
	e.mu.Lock()
	p := e.pools[addr]
	e.mu.Unlock()
	if p == nil {
		return nil, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		streams = streams || c != nil
	}
	return append([]*blockconn.Conn(nil), p.lane...), streams
}

// Small calls (one op, a batch of 4 KiB ops, an op cut into slices) ride
// one lane connection and no stream, bytes intact; a call over LaneBytes
// and every call of an engine with the lane off take the streams.
func TestLaneCarriesSmallCalls(t *testing.T) {
	tp := newTCPPeer(t, 8<<20)
	ctx := context.Background()
	addr := tp.peer.TransferAddr
	for _, opt := range []Options{{}, {SliceSize: 1000}} {
		opt.ForceTCP, opt.Log = true, quietLog()
		e := NewEngine(opt)
		data := pattern(uint64(opt.SliceSize)+1, 4096)
		mustOK(t, grantDo(e, ctx, []Op{{Peer: tp.peer, Offset: 7, Bufs: scatter(data, 1000, 3000), Write: true}}))
		got := make([]byte, len(data))
		mustOK(t, grantDo(e, ctx, []Op{{Peer: tp.peer, Offset: 7, Bufs: scatter(got, 5, 4000)}}))
		if d := firstDiff(got, data); d != "" {
			t.Fatalf("slice %d: %s", opt.SliceSize, d)
		}
		var batch []Op
		dsts := make([][]byte, 32)
		for i := range dsts {
			dsts[i] = make([]byte, 4096)
			batch = append(batch, Op{Peer: tp.peer, Offset: uint64(i) * 4096, Bufs: [][]byte{dsts[i]}})
		}
		mustOK(t, grantDo(e, ctx, batch))
		for i, d := range dsts {
			if diff := firstDiff(d, tp.seg.Bytes()[i*4096:(i+1)*4096]); diff != "" {
				t.Fatalf("batch op %d: %s", i, diff)
			}
		}
		idle, streams := laneState(e, addr)
		if len(idle) != 1 || streams {
			t.Fatalf("slice %d: %d idle lane connections, streams dialled %v; want 1 and none", opt.SliceSize, len(idle), streams)
		}
		e.Close()
	}

	e := NewEngine(Options{ForceTCP: true, Log: quietLog()})
	defer e.Close()
	big := pattern(3, DefaultLaneBytes+1)
	mustOK(t, grantDo(e, ctx, []Op{{Peer: tp.peer, Offset: 0, Bufs: [][]byte{big}, Write: true}}))
	if idle, streams := laneState(e, addr); len(idle) != 0 || !streams {
		t.Fatalf("a call of LaneBytes+1: %d idle lane connections, streams %v", len(idle), streams)
	}
	off := NewEngine(Options{ForceTCP: true, LaneBytes: -1, Log: quietLog()})
	defer off.Close()
	mustOK(t, grantDo(off, ctx, []Op{{Peer: tp.peer, Offset: 0, Bufs: [][]byte{make([]byte, 10)}}}))
	if idle, streams := laneState(off, addr); len(idle) != 0 || !streams {
		t.Fatalf("lane off: %d idle lane connections, streams %v", len(idle), streams)
	}
}

// A refusal from the server (a range it finds outside its segment) comes
// back with the server's code, changes nothing, and leaves the connection
// in step: the next call reuses it.
func TestLaneRefusalKeepsTheConnection(t *testing.T) {
	const size = 1 << 20
	tp := newTCPPeer(t, size)
	e := NewEngine(Options{ForceTCP: true, Log: quietLog()})
	defer e.Close()
	ctx := context.Background()
	unknown := tp.peer
	unknown.Size = 0 // the server has to catch it
	before := append([]byte(nil), tp.seg.Bytes()...)
	data := pattern(5, 3000)
	errs := grantDo(e, ctx, []Op{
		{Peer: unknown, Offset: size - 10, Bufs: [][]byte{pattern(4, 100)}, Write: true},
		{Peer: unknown, Offset: 40, Bufs: [][]byte{data}, Write: true},
	})
	wantCode(t, errs[0], wire.ErrInvalidParams)
	if errs[1] != nil {
		t.Fatalf("the good op after a refused one: %v", errs[1])
	}
	copy(before[40:], data)
	if d := firstDiff(tp.seg.Bytes(), before); d != "" {
		t.Fatal(d)
	}
	idle, _ := laneState(e, tp.peer.TransferAddr)
	if len(idle) != 1 {
		t.Fatalf("%d idle lane connections after a refusal, want 1", len(idle))
	}
	got := make([]byte, len(data))
	mustOK(t, grantDo(e, ctx, []Op{{Peer: unknown, Offset: 40, Bufs: [][]byte{got}}}))
	if d := firstDiff(got, data); d != "" {
		t.Fatal(d)
	}
	if again, _ := laneState(e, tp.peer.TransferAddr); len(again) != 1 || again[0] != idle[0] {
		t.Fatal("the call after a refusal did not reuse the lane connection")
	}
}

// A peer that takes a request and never answers: the call waits until its
// context ends (an expiry the test triggers, not a time), then returns -800
// matching DeadlineExceeded, and the connection is closed, not kept.
func TestLaneSilentPeer(t *testing.T) {
	e := NewEngine(Options{ForceTCP: true, Log: quietLog()})
	defer e.Close()
	for _, write := range []bool{true, false} {
		hung, reading := hungServer(t)
		ctx := newDeadlineCtx()
		done := make(chan []error, 1)
		go func() {
			done <- grantDo(e, ctx, []Op{{Peer: hung, Offset: 0, Bufs: [][]byte{make([]byte, 4096)}, Write: write}})
		}()
		await(t, reading, "the silent peer to receive the request")
		select {
		case errs := <-done:
			t.Fatalf("the call returned with no answer and its context alive: %v", errs)
		default:
		}
		ctx.expire()
		errs := await(t, done, "the call to return once its context ended")
		wantCode(t, errs[0], wire.ErrTransferFail)
		if !errors.Is(errs[0], context.DeadlineExceeded) {
			t.Fatalf("%v does not match DeadlineExceeded", errs[0])
		}
		if idle, _ := laneState(e, hung.TransferAddr); len(idle) != 0 {
			t.Fatalf("a connection abandoned mid-call was kept (%d idle)", len(idle))
		}
	}
}

// The peer restarts at the same address while a lane connection sits
// idle: the next call notices the dead connection, dials anew, and lands.
func TestLaneSurvivesAPeerRestart(t *testing.T) {
	mp := newMovablePeer(t, "lane-restart", 1<<20, 21)
	p, addr := mp.peer, mp.peer.TransferAddr
	e := NewEngine(Options{ForceTCP: true, Log: quietLog()})
	defer e.Close()
	ctx := context.Background()
	mustOK(t, grantDo(e, ctx, []Op{{Peer: p, Offset: 0, Bufs: [][]byte{pattern(1, 100)}, Write: true}}))
	idle, _ := laneState(e, addr)
	if len(idle) != 1 {
		t.Fatalf("%d idle lane connections, want 1", len(idle))
	}
	mp.restart(t)
	data := pattern(2, 4096)
	mustOK(t, grantDo(e, ctx, []Op{{Peer: p, Offset: 10, Bufs: [][]byte{data}, Write: true}}))
	if d := firstDiff(mp.seg.Bytes()[10:10+len(data)], data); d != "" {
		t.Fatal(d)
	}
	if again, _ := laneState(e, addr); len(again) != 1 || again[0] == idle[0] {
		t.Fatal("the dead lane connection was not replaced")
	}
}

// Begin puts a read on the wire and returns; Wait brings its bytes. Ops
// the lane cannot take come back nil with nothing sent.
func TestBeginThenWait(t *testing.T) {
	tp := newTCPPeer(t, 1<<20)
	e := NewEngine(Options{ForceTCP: true, Log: quietLog()})
	defer e.Close()
	ctx := context.Background()
	data := pattern(31, 4096)
	copy(tp.seg.Bytes()[8192:], data)
	got := make([]byte, len(data))
	b := e.Begin(ctx, granted([]Op{{Peer: tp.peer, Offset: 8192, Bufs: [][]byte{got}}})[0])
	if b == nil {
		t.Fatal("Begin refused a 4 KiB read over TCP")
	}
	// Meanwhile, another call on the same engine (it takes another lane
	// connection: the first one is busy).
	other := pattern(32, 100)
	mustOK(t, grantDo(e, ctx, []Op{{Peer: tp.peer, Offset: 0, Bufs: [][]byte{other}, Write: true}}))
	if err := b.Wait(); err != nil {
		t.Fatal(err)
	}
	if d := firstDiff(got, data); d != "" {
		t.Fatal(d)
	}
	if d := firstDiff(tp.seg.Bytes()[:100], other); d != "" {
		t.Fatal(d)
	}
	// A refusal from the peer comes back from Wait with its code.
	unknown := tp.peer
	unknown.Size = 0
	b = e.Begin(ctx, granted([]Op{{Peer: unknown, Offset: 1<<20 - 10, Bufs: [][]byte{make([]byte, 100)}}})[0])
	if b == nil {
		t.Fatal("Begin refused a read only the server can judge")
	}
	wantCode(t, b.Wait(), wire.ErrInvalidParams)

	seg := localSegment(t, "begin-shm", 1<<20)
	shmE := NewEngine(Options{Log: quietLog()})
	defer shmE.Close()
	for name, c := range map[string]struct {
		e  *Engine
		op Op
	}{
		"shared memory":   {shmE, Op{Peer: shmPeer(seg), Offset: 0, Bufs: [][]byte{make([]byte, 10)}}},
		"past LaneBytes":  {e, Op{Peer: tp.peer, Offset: 0, Bufs: [][]byte{make([]byte, DefaultLaneBytes+1)}}},
		"outside segment": {e, Op{Peer: tp.peer, Offset: 1 << 20, Bufs: [][]byte{make([]byte, 10)}}},
		"no grant":        {e, Op{Peer: tp.peer, Offset: 0, Bufs: [][]byte{make([]byte, 10)}, Grant: []byte("short")}},
	} {
		if b := c.e.Begin(ctx, c.op); b != nil {
			b.Wait()
			t.Errorf("%s: Begin sent the op", name)
		}
	}
}

// A silent peer: Wait returns -800 once the context ends.
func TestBeginOnASilentPeer(t *testing.T) {
	e := NewEngine(Options{ForceTCP: true, Log: quietLog()})
	defer e.Close()
	hung, reading := hungServer(t)
	ctx := newDeadlineCtx()
	b := e.Begin(ctx, granted([]Op{{Peer: hung, Offset: 0, Bufs: [][]byte{make([]byte, 4096)}}})[0])
	if b == nil {
		t.Fatal("Begin refused the op")
	}
	await(t, reading, "the silent peer to receive the request")
	done := make(chan error, 1)
	go func() { done <- b.Wait() }()
	ctx.expire()
	err := await(t, done, "Wait to return once the context ended")
	wantCode(t, err, wire.ErrTransferFail)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%v does not match DeadlineExceeded", err)
	}
}

// scriptedPeer answers each call's requests (n of them, read whole
// first): a read with the bytes of pattern(offset), one at scriptedRefused
// or past it with ErrInvalidParams, a write (its payload drained) with an
// empty OK; in the order and the chunks that answer gives, then whatever
// extra follows them.
func scriptedPeer(t *testing.T, n int, answer func(replies [][]byte) [][]byte) Peer {
	t.Helper()
	return rawPeer(t, 0, func(c net.Conn) {
		for {
			replies := make([][]byte, n)
			for k := range n {
				var h [reqHdrSize]byte
				if _, err := io.ReadFull(c, h[:]); err != nil {
					return
				}
				if h[0] == opGrantedRead || h[0] == opGrantedWrite {
					if _, err := io.ReadFull(c, make([]byte, grant.Size)); err != nil {
						return
					}
				}
				id, off, size := le.Uint64(h[1:]), le.Uint64(h[9:]), le.Uint64(h[17:])
				switch {
				case h[0] == opWrite || h[0] == opGrantedWrite:
					if _, err := io.CopyN(io.Discard, c, int64(size)); err != nil {
						return
					}
					replies[k] = putRespHdr(nil, id, wire.OK, 0)
				case off >= scriptedRefused:
					replies[k] = putRespHdr(nil, id, wire.ErrInvalidParams, 0)
				default:
					replies[k] = append(putRespHdr(nil, id, wire.OK, size), pattern(off, int(size))...)
				}
			}
			for _, chunk := range answer(replies) {
				if _, err := c.Write(chunk); err != nil {
					return
				}
			}
		}
	})
}

// scriptedRefused is where scriptedPeer's segment ends, for reads.
const scriptedRefused = 32 << 20

// The lane reads a call's answers through a buffer: however they arrive
// (a byte at a time, split inside headers and payloads, out of order),
// every op gets its own bytes or code: payloads smaller and larger than
// the direct-read mark, more of them than the buffer holds, a refused
// read and a write among them; and the connection stays in step for the
// next call. Bytes past the last answer keep the call's results (each op
// was answered) but cost the connection.
func TestLaneReadsAnswersHoweverTheyArrive(t *testing.T) {
	sizes := []int{4096, 20, laneDirect + 3000, 1, 4096}
	for range 12 {
		sizes = append(sizes, 8000) // with the rest, more than the 64 KiB buffer
	}
	const refused, written = 2, 4 // ops: a read past the segment, a write
	joined := func(replies [][]byte) []byte { return bytes.Join(replies, nil) }
	cases := []struct {
		name   string
		answer func(replies [][]byte) [][]byte
		keeps  bool
	}{
		{"one write", func(r [][]byte) [][]byte { return [][]byte{joined(r)} }, true},
		{"a byte at a time", func(r [][]byte) [][]byte {
			var out [][]byte
			for _, b := range joined(r) {
				out = append(out, []byte{b})
			}
			return out
		}, true},
		{"odd chunks", func(r [][]byte) [][]byte {
			all := joined(r)
			var out [][]byte
			for len(all) > 0 {
				k := min(len(all), 7+len(out)*1237) // inside headers, then inside payloads
				out = append(out, all[:k])
				all = all[k:]
			}
			return out
		}, true},
		{"reversed", func(r [][]byte) [][]byte {
			out := slices.Clone(r)
			slices.Reverse(out)
			return out
		}, true},
		{"trailing bytes", func(r [][]byte) [][]byte {
			return [][]byte{append(joined(r), 0xEE)}
		}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			peer := scriptedPeer(t, len(sizes), tc.answer)
			e := NewEngine(Options{ForceTCP: true, Log: quietLog()})
			defer e.Close()
			for call := range 2 {
				ops := make([]Op, len(sizes))
				off := uint64(call * 1000)
				for i, n := range sizes {
					ops[i] = Op{Peer: peer, Offset: off, Bufs: [][]byte{make([]byte, n)}}
					off += uint64(n)
				}
				ops[refused].Offset = scriptedRefused
				ops[written].Write, ops[written].Bufs[0] = true, pattern(9, sizes[written])
				// A bound, so that a reader out of step fails the test instead of hanging it.
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				errs := e.Do(ctx, ops)
				cancel()
				for i, op := range ops {
					switch i {
					case refused:
						wantCode(t, errs[i], wire.ErrInvalidParams)
					case written:
						if errs[i] != nil {
							t.Fatalf("call %d, the write: %v", call, errs[i])
						}
					default:
						if errs[i] != nil {
							t.Fatalf("call %d, op %d: %v", call, i, errs[i])
						}
						if d := firstDiff(op.Bufs[0], pattern(op.Offset, sizes[i])); d != "" {
							t.Fatalf("call %d, op %d: %s", call, i, d)
						}
					}
				}
				idle, streams := laneState(e, peer.TransferAddr)
				if streams {
					t.Fatal("the calls took the streams, not the lane")
				}
				if kept := len(idle) == 1; kept != tc.keeps {
					t.Fatalf("call %d: %d idle lane connections after the call", call, len(idle))
				}
			}
		})
	}
}
