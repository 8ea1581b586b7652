// server_test.go tests that the Server survives what a peer may send
// (garbage, truncated headers, bad ranges, huge lengths) and that it polls
// a looping client's connection.

package transfer

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/gostore/gostore/gostore/internal/blockconn"
	"github.com/gostore/gostore/gostore/internal/testbase"
	"github.com/gostore/gostore/gostore/wire"
)

func reqHdr(op byte, id, off, n uint64) []byte {
	h := make([]byte, reqHdrSize)
	h[0] = op
	binary.LittleEndian.PutUint64(h[1:], id)
	binary.LittleEndian.PutUint64(h[9:], off)
	binary.LittleEndian.PutUint64(h[17:], n)
	return h
}

type resp struct {
	id     uint64
	status wire.Code
	n      uint64
}

func readResp(t *testing.T, c net.Conn) resp {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var h [respHdrSize]byte
	if _, err := io.ReadFull(c, h[:]); err != nil {
		t.Fatalf("reading response: %v", err)
	}
	return resp{binary.LittleEndian.Uint64(h[0:]), wire.Code(int32(binary.LittleEndian.Uint32(h[8:]))), binary.LittleEndian.Uint64(h[12:])}
}

// expectClosed asserts the server closes c (EOF or reset) without sending
// anything but, optionally, responses.
func expectClosed(t *testing.T, c net.Conn, what string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.Copy(io.Discard, c); err != nil {
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatalf("%s: server kept the connection open", what)
		}
	}
}

func TestServerRobustness(t *testing.T) {
	const size = 1 << 20
	tp := newTCPPeer(t, size)
	addr := tp.peer.TransferAddr
	copy(tp.seg.Bytes(), pattern(5, size))
	before := append([]byte(nil), tp.seg.Bytes()...)
	dial := func() net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}

	// An engine connection opened before the attacks must survive them.
	e := NewEngine(Options{ForceTCP: true, StreamsPerPeer: 1, Log: quietLog()})
	defer e.Close()
	mustOK(t, grantDo(e, context.Background(), []Op{{Peer: tp.peer, Offset: 0, Bufs: [][]byte{make([]byte, 10)}}}))

	// Grants to read and write the whole segment, as the master mints them.
	far := time.Now().Add(time.Hour)
	rtok, wtok := tp.srv.Mint(0, size, false, far), tp.srv.Mint(0, size, true, far)
	rd := func(id, off, n uint64) []byte { return append(reqHdr(opGrantedRead, id, off, n), rtok...) }
	wr := func(id, off, n uint64) []byte { return append(reqHdr(opGrantedWrite, id, off, n), wtok...) }

	// Garbage: unknown op.
	c := dial()
	c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	expectClosed(t, c, "garbage")

	// A valid request followed by an unknown op: answered, then closed.
	c = dial()
	c.Write(append(rd(1, 0, 4), reqHdr(0x77, 2, 0, 0)...))
	if r := readResp(t, c); r.id != 1 || r.status != wire.OK || r.n != 4 {
		t.Fatalf("response %+v", r)
	}
	expectClosed(t, c, "unknown op after a good request")

	// Truncated header, then the peer half-closes.
	c = dial()
	c.Write(reqHdr(opWrite, 3, 0, 100)[:10])
	c.(*net.TCPConn).CloseWrite()
	expectClosed(t, c, "truncated header")

	// A grant cut short.
	c = dial()
	c.Write(wr(3, 0, 100)[:reqHdrSize+20])
	c.(*net.TCPConn).CloseWrite()
	expectClosed(t, c, "truncated grant")

	// Header announcing a write payload it never finishes. The payload goes
	// straight into the segment, so the bytes that did arrive land there
	// (the same bytes as before here); the rest stays untouched.
	c = dial()
	c.Write(wr(4, 0, 1000))
	c.Write(before[:10])
	c.(*net.TCPConn).CloseWrite()
	expectClosed(t, c, "truncated payload")

	// Huge length, out of range: refused, then closed, nothing written.
	c = dial()
	c.Write(wr(5, 0, 1<<62))
	c.Write(make([]byte, 4096))
	if r := readResp(t, c); r.id != 5 || r.status != wire.ErrInvalidParams || r.n != 0 {
		t.Fatalf("huge write: response %+v", r)
	}
	expectClosed(t, c, "huge write")

	// Small out-of-range write: refused, payload drained, connection usable.
	// Then overflowing read ranges, then a good read on the same connection.
	c = dial()
	payload := make([]byte, 64)
	msg := append(wr(6, size-10, 64), payload...)
	msg = append(msg, rd(7, ^uint64(0)-1, 4)...)
	msg = append(msg, rd(8, 8, ^uint64(0)-4)...)
	msg = append(msg, wr(9, ^uint64(0), 0)...)
	msg = append(msg, rd(10, 100, 16)...)
	c.Write(msg)
	for _, id := range []uint64{6, 7, 8, 9} {
		if r := readResp(t, c); r.id != id || r.status != wire.ErrInvalidParams || r.n != 0 {
			t.Fatalf("bad range %d: response %+v", id, r)
		}
	}
	if r := readResp(t, c); r.id != 10 || r.status != wire.OK || r.n != 16 {
		t.Fatalf("good read after bad ranges: response %+v", r)
	}
	got := make([]byte, 16)
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	if d := firstDiff(got, before[100:116]); d != "" {
		t.Fatalf("read after bad ranges: %s", d)
	}
	c.Close()

	// A peer that connects and vanishes.
	c = dial()
	c.Close()

	if d := firstDiff(tp.seg.Bytes(), before); d != "" {
		t.Fatalf("segment changed by refused requests: %s", d)
	}

	// The server still serves, on the old engine connection and new ones.
	for _, eng := range []*Engine{e, NewEngine(Options{ForceTCP: true, Log: quietLog()})} {
		data := pattern(6, 300000)
		mustOK(t, grantDo(eng, context.Background(), []Op{{Peer: tp.peer, Offset: 4321, Bufs: scatter(data, 1000, 100000), Write: true}}))
		back := make([]byte, len(data))
		mustOK(t, grantDo(eng, context.Background(), []Op{{Peer: tp.peer, Offset: 4321, Bufs: [][]byte{back}}}))
		if d := firstDiff(back, data); d != "" {
			t.Fatal(d)
		}
		if d := firstDiff(tp.seg.Bytes()[4321:4321+len(data)], data); d != "" {
			t.Fatal(d)
		}
		if eng != e {
			eng.Close()
		}
	}
}

// A client that answers a server reply with garbage (a response with an
// unknown id) breaks only its own connection.
func TestClientRejectsBadResponses(t *testing.T) {
	peer := rawPeer(t, 0, func(c net.Conn) {
		h := make([]byte, reqHdrSize)
		if _, err := io.ReadFull(c, h); err != nil {
			return
		}
		// Claim success for a different request, with a payload.
		var r [respHdrSize]byte
		binary.LittleEndian.PutUint64(r[0:], 999)
		binary.LittleEndian.PutUint64(r[12:], 1<<40)
		c.Write(r[:])
		io.Copy(io.Discard, c)
	})
	e := NewEngine(Options{ForceTCP: true, Log: quietLog()})
	defer e.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	buf := make([]byte, 100)
	errs := grantDo(e, ctx, []Op{{Peer: peer, Bufs: [][]byte{buf}}})
	wantCode(t, errs[0], wire.ErrTransferFail)
	if ctx.Err() != nil {
		t.Fatal("hung until the deadline")
	}
}

// The server polls a hot connection for its next request (SetSpin,
// blockconn.Polled): small reads in a loop are served by the poll, with
// their bytes right; SetSpin(0) never polls.
func TestServerPollsForALoopingClient(t *testing.T) {
	for _, spin := range []time.Duration{time.Second, 0} {
		tp := newTCPPeer(t, 1<<20)
		tp.srv.SetSpin(spin) // before any connection: each reads it at accept
		e := NewEngine(Options{ForceTCP: true, Log: quietLog()})
		want := pattern(uint64(spin)+5, 4096)
		mustOK(t, grantDo(e, context.Background(), []Op{{Peer: tp.peer, Offset: 0, Bufs: [][]byte{want}, Write: true}}))
		testbase.ServedByPolls(t, spin > 0, 100, blockconn.SharedGate().Counts, func(i int) {
			got := make([]byte, 4096)
			mustOK(t, grantDo(e, context.Background(), []Op{{Peer: tp.peer, Offset: 0, Bufs: [][]byte{got}}}))
			if d := firstDiff(got, want); d != "" {
				t.Fatalf("spin %v read %d: %s", spin, i, d)
			}
		})
		e.Close()
	}
}
