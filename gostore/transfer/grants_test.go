// grants_test.go attacks a real transfer server over raw TCP and through
// an engine: every request without a valid grant for its segment, range
// and direction is refused, logged, and changes no byte.

package transfer

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gostore/gostore/gostore/grant"
	"github.com/gostore/gostore/gostore/wire"
)

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// Raw requests to a real Server on loopback, host and device segment: a
// request is served only inside a valid grant for its segment, range and
// direction; everything else is refused with its code, the bytes stay as
// they were, the connection stays usable, and the server logs the first
// refusal of a burst with the remote and the range.
func TestServerRefusesWithoutGrant(t *testing.T) {
	for _, device := range []bool{false, true} {
		name := "host"
		if device {
			name = "device"
		}
		t.Run(name, func(t *testing.T) { testServerRefuses(t, device) })
	}
}

func testServerRefuses(t *testing.T, device bool) {
	const size = 1 << 20
	var logs syncBuf
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(&logs, nil))
	mem := pattern(21, size)
	var srv *Server
	var dev *fakeDevice
	if device {
		dev = &fakeDevice{mu: new(sync.Mutex), mem: mem}
		srv = NewDeviceServer(ln, dev, log)
	} else {
		srv = NewServer(ln, mem, log)
	}
	srv.SetSegID(5)
	go srv.Serve()
	defer srv.Close()
	snapshot := func() []byte {
		if dev != nil {
			dev.mu.Lock()
			defer dev.mu.Unlock()
		}
		return bytes.Clone(mem)
	}
	before := snapshot()

	far, past := time.Now().Add(time.Hour), time.Now().Add(-time.Second)
	mint := func(seg, off, n uint64, write bool, exp time.Time) []byte {
		k, _ := grant.NewKey(srv.GrantKey())
		return grant.Mint(nil, k, grant.Fields{SegID: seg, Offset: off, Length: n, Write: write, Expiry: exp.UnixNano()})
	}
	w := mint(5, 4096, 4096, true, far) // the one range the peer may write
	forged := bytes.Clone(w)
	forged[45] ^= 0x80
	widened := bytes.Clone(w)
	le.PutUint64(widened[24:], size) // the length changed, the MAC kept
	stranger, _ := grant.NewKey(bytes.Repeat([]byte{1}, grant.KeySize))
	otherKey := grant.Mint(nil, stranger, grant.Fields{SegID: 5, Length: size, Write: true, Expiry: far.UnixNano()})
	payload := bytes.Repeat([]byte{0xEE}, 4096)

	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	type req struct {
		name  string
		op    byte
		off   uint64
		n     uint64
		tok   []byte
		wantC wire.Code
	}
	reqs := []req{
		{"ungranted write (op 1)", opWrite, 4096, 4096, nil, wire.ErrIllegalClient},
		{"ungranted read (op 2)", opRead, 0, 4096, nil, wire.ErrIllegalClient},
		{"write outside its grant", opGrantedWrite, 0, 4096, w, wire.ErrIllegalClient},
		{"write straddling its grant's end", opGrantedWrite, 6000, 4096, w, wire.ErrIllegalClient},
		{"forged MAC", opGrantedWrite, 4096, 4096, forged, wire.ErrIllegalClient},
		{"length widened", opGrantedWrite, 0, 4096, widened, wire.ErrIllegalClient},
		{"another segment's key", opGrantedWrite, 0, 4096, otherKey, wire.ErrIllegalClient},
		{"expired", opGrantedWrite, 4096, 4096, mint(5, 4096, 4096, true, past), wire.ErrLeaseExpired},
		{"read grant used to write", opGrantedWrite, 0, 4096, mint(5, 0, size, false, far), wire.ErrIllegalClient},
		{"write grant used to read past its range", opGrantedRead, 4096, 8192, w, wire.ErrIllegalClient},
		{"grant for another segment id", opGrantedWrite, 4096, 4096, mint(6, 4096, 4096, true, far), wire.ErrIllegalClient},
		{"zero token", opGrantedWrite, 4096, 4096, make([]byte, grant.Size), wire.ErrIllegalClient},
	}
	var stream []byte
	for i, r := range reqs {
		stream = append(stream, reqHdr(r.op, uint64(i+1), r.off, r.n)...)
		stream = append(stream, r.tok...)
		if r.op == opWrite || r.op == opGrantedWrite {
			stream = append(stream, payload[:r.n]...)
		}
	}
	// Then what the grant allows, on the same connection: it is served.
	stream = append(append(append(stream, reqHdr(opGrantedWrite, 100, 4096, 4096)...), w...), payload...)
	stream = append(append(stream, reqHdr(opGrantedRead, 101, 0, 8192)...), mint(5, 0, size, false, far)...)
	stream = append(append(stream, reqHdr(opGrantedRead, 102, 4096, 4096)...), w...) // a write grant reads its range back
	if _, err := c.Write(stream); err != nil {
		t.Fatal(err)
	}
	for i, r := range reqs {
		got := readResp(t, c)
		if got.id != uint64(i+1) || got.status != r.wantC || got.n != 0 {
			t.Errorf("%s: answered %+v, want status %v and no payload", r.name, got, r.wantC)
		}
	}
	if got := readResp(t, c); got.id != 100 || got.status != wire.OK {
		t.Fatalf("the granted write: %+v", got)
	}
	if got := readResp(t, c); got.id != 101 || got.status != wire.OK || got.n != 8192 {
		t.Fatalf("the granted read: %+v", got)
	}
	back := make([]byte, 8192)
	if _, err := io.ReadFull(c, back); err != nil {
		t.Fatal(err)
	}
	want := bytes.Clone(before)
	copy(want[4096:8192], payload)
	if d := firstDiff(back, want[:8192]); d != "" {
		t.Fatalf("the granted read: %s", d)
	}
	if got := readResp(t, c); got.id != 102 || got.status != wire.OK || got.n != 4096 {
		t.Fatalf("the read back under the write grant: %+v", got)
	}
	if _, err := io.ReadFull(c, back[:4096]); err != nil {
		t.Fatal(err)
	}
	if d := firstDiff(back[:4096], payload[:4096]); d != "" {
		t.Fatalf("the read back under the write grant: %s", d)
	}
	if d := firstDiff(snapshot(), want); d != "" {
		t.Fatalf("the segment: %s (only the granted write may change it)", d)
	}

	// A refused write too long to drain closes the connection, untouched.
	c2, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	c2.Write(append(append(reqHdr(opGrantedWrite, 7, 0, maxDiscard+1), w...), payload...))
	if got := readResp(t, c2); got.id != 7 || got.status != wire.ErrInvalidParams {
		t.Fatalf("huge write: %+v", got)
	}
	expectClosed(t, c2, "huge write")
	if d := firstDiff(snapshot(), want); d != "" {
		t.Fatalf("the segment after the huge write: %s", d)
	}

	text := logs.String()
	if n := strings.Count(text, "request refused"); n != 1 {
		t.Errorf("%d lines for one burst of refusals, want 1:\n%s", n, text)
	}
	if !strings.Contains(text, "remote="+c.LocalAddr().String()) || !strings.Contains(text, "offset=4096 length=4096") {
		t.Errorf("the refusal's line does not name the remote and the range:\n%s", text)
	}
}

// The engine's side: an op without a grant, or with one for another
// range, fails with the server's code; a large op cut into slices carries
// its grant with every slice (and the server verifies it once per
// connection); a grant of the wrong size is refused before anything
// moves.
func TestEngineSendsGrants(t *testing.T) {
	tp := newTCPPeer(t, 8<<20)
	before := bytes.Clone(tp.seg.Bytes())
	e := NewEngine(Options{ForceTCP: true, SliceSize: 64 << 10, Log: quietLog()})
	defer e.Close()
	ctx := context.Background()
	data := pattern(4, 3<<20+7)
	wantCode(t, e.Do(ctx, []Op{{Peer: tp.peer, Offset: 0, Bufs: [][]byte{data}, Write: true}})[0], wire.ErrIllegalClient)
	g := tp.srv.Mint(1<<20, uint64(len(data)), true, time.Now().Add(time.Hour))
	wantCode(t, e.Do(ctx, []Op{{Peer: tp.peer, Offset: 0, Bufs: [][]byte{data}, Write: true, Grant: g}})[0], wire.ErrIllegalClient)
	wantCode(t, e.Do(ctx, []Op{{Peer: tp.peer, Offset: 1<<20 - 1, Bufs: [][]byte{make([]byte, 10)}, Grant: g}})[0], wire.ErrIllegalClient)
	wantCode(t, e.Do(ctx, []Op{{Peer: tp.peer, Offset: 1 << 20, Bufs: [][]byte{data}, Write: true, Grant: g[:10]}})[0], wire.ErrInvalidParams)
	// A grant edited to cover more passes the engine's check (it cannot
	// tell), and every slice is refused by the server.
	wide := bytes.Clone(g)
	le.PutUint64(wide[16:], 0)
	le.PutUint64(wide[24:], 8<<20)
	wantCode(t, e.Do(ctx, []Op{{Peer: tp.peer, Offset: 0, Bufs: [][]byte{data}, Write: true, Grant: wide}})[0], wire.ErrIllegalClient)
	if d := firstDiff(tp.seg.Bytes(), before); d != "" {
		t.Fatalf("refused ops changed the segment: %s", d)
	}
	mustOK(t, e.Do(ctx, []Op{{Peer: tp.peer, Offset: 1 << 20, Bufs: scatter(data, 100000, 7), Write: true, Grant: g}}))
	if d := firstDiff(tp.seg.Bytes()[1<<20:1<<20+len(data)], data); d != "" {
		t.Fatal(d)
	}
	back := make([]byte, len(data)) // the write's grant reads its range back
	mustOK(t, e.Do(ctx, []Op{{Peer: tp.peer, Offset: 1 << 20, Bufs: [][]byte{back}, Grant: g}}))
	if d := firstDiff(back, data); d != "" {
		t.Fatalf("read back under the write grant: %s", d)
	}
}
