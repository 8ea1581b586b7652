// ucx_test.go tests the UCX route with the real UCX (the host's libucp)
// over its tcp transport on loopback: an owner context exposing a
// LocalSegment, and an initiator Engine with a worker of its own context.

package transfer

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/gostore/gostore/gostore/grant"
	"github.com/gostore/gostore/gostore/ucx"
	"github.com/gostore/gostore/gostore/wire"
)

// ucxOwner is a segment exposed with UCX by a context of its own: another
// process's, as far as the initiator can tell.
type ucxOwner struct {
	ctx  *ucx.Context
	seg  *LocalSegment
	x    *ucx.Exposure
	peer Peer
}

func needUCX(t testing.TB) {
	t.Helper()
	if info := ucx.Probe(); !info.Available {
		t.Skipf("UCX unavailable: %s", info.Reason)
	}
}

func ucxContext(t testing.TB) *ucx.Context {
	t.Helper()
	c, err := ucx.NewContext(ucx.ContextOptions{Transports: "tcp"})
	if err != nil {
		t.Fatalf("NewContext: %v", err)
	}
	t.Cleanup(c.Close) // after what the test made on it (cleanups run last first)
	return c
}

func newUCXOwner(t testing.TB, size uint64) *ucxOwner {
	t.Helper()
	o := &ucxOwner{ctx: ucxContext(t), seg: localSegment(t, t.Name(), size)}
	nextSegID++
	o.peer = Peer{SegID: nextSegID, HostID: "elsewhere", Size: size}
	o.expose(t)
	return o
}

// expose exposes the segment afresh (as a remount does): a new Desc.
func (o *ucxOwner) expose(t testing.TB) {
	t.Helper()
	x, err := o.ctx.Expose(uintptr(unsafe.Pointer(&o.seg.Bytes()[0])), o.seg.Size(), ucx.MemHost)
	if err != nil {
		t.Fatalf("Expose: %v", err)
	}
	t.Cleanup(x.Close)
	o.x, o.peer.UCX = x, x.Desc()
}

// ucxEngine is an initiator Engine with a UCX worker of its own context.
func ucxEngine(t testing.TB, opt Options) *Engine {
	t.Helper()
	w, err := ucxContext(t).NewWorker()
	if err != nil {
		t.Fatalf("NewWorker: %v", err)
	}
	opt.UCX, opt.Log = w, quietLog()
	e := NewEngine(opt)
	t.Cleanup(func() { e.Close(); w.Close() })
	return e
}

// ucxKey stands for the owners' grant keys, as the master would sign.
var ucxKey, _ = grant.NewKey(bytes.Repeat([]byte{7}, grant.KeySize))

func ucxGrant(p Peer, off, n uint64, write bool, expiry time.Time) []byte {
	return grant.Mint(nil, ucxKey, grant.Fields{SegID: p.SegID, Offset: off, Length: n, Write: write, Expiry: expiry.UnixNano()})
}

// ucxDo is e.Do with every op that has no grant given one for exactly its
// range and direction, as the master mints them.
func ucxDo(e *Engine, ops ...Op) []error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range ops {
		if ops[i].Grant == nil {
			n, _ := opLen(&ops[i])
			ops[i].Grant = ucxGrant(ops[i].Peer, ops[i].Offset, n, ops[i].Write, time.Now().Add(time.Hour))
		}
	}
	return e.Do(ctx, ops)
}

// Scattered writes and reads, single and a batch of 32, and device parts
// (staged: this UCX has no CUDA; a FAKE driver stands for the GPU) move
// over RouteUCX, every byte checked in the owner's memory and back.
func TestUCXRouteMovesBytes(t *testing.T) {
	needUCX(t)
	const size = 32 << 20
	o := newUCXOwner(t, size)
	e := ucxEngine(t, Options{Driver: &fakeDriver{}, BounceBytes: 1 << 20})
	if r := e.Route(o.peer); r != RouteUCX {
		t.Fatalf("route %v, want ucx", r)
	}
	mem := o.seg.Bytes()

	v := pattern(1, 5<<20+3)
	mustOK(t, ucxDo(e, Op{Peer: o.peer, Offset: 4096, Bufs: scatter(v, 100000, 7, 1<<20), Write: true}))
	if d := firstDiff(mem[4096:4096+len(v)], v); d != "" {
		t.Fatalf("segment after a write: %s", d)
	}
	back := make([]byte, len(v))
	mustOK(t, ucxDo(e, Op{Peer: o.peer, Offset: 4096, Bufs: scatter(back, 4096, 33)}))
	if d := firstDiff(back, v); d != "" {
		t.Fatalf("read back: %s", d)
	}

	const n, each = 32, 64 << 10
	var writes, reads []Op
	outs := make([][]byte, n)
	for i := range n {
		off := uint64(8<<20 + i*each)
		writes = append(writes, Op{Peer: o.peer, Offset: off, Bufs: scatter(pattern(uint64(10+i), each), 5000), Write: true})
		outs[i] = make([]byte, each)
		reads = append(reads, Op{Peer: o.peer, Offset: off, Bufs: [][]byte{outs[i]}})
	}
	mustOK(t, ucxDo(e, writes...))
	mustOK(t, ucxDo(e, reads...))
	for i := range n {
		want := pattern(uint64(10+i), each)
		if d := firstDiff(mem[8<<20+i*each:][:each], want); d != "" {
			t.Fatalf("batch op %d in the segment: %s", i, d)
		}
		if d := firstDiff(outs[i], want); d != "" {
			t.Fatalf("batch op %d read back: %s", i, d)
		}
	}

	dv := pattern(2, 3<<20)
	before := e.StagedParts()
	w, _ := mixedOp(o.peer, 16<<20, dv, true)
	mustOK(t, ucxDo(e, w))
	if d := firstDiff(mem[16<<20:][:len(dv)], dv); d != "" {
		t.Fatalf("segment after a mixed write: %s", d)
	}
	rd, dev := mixedOp(o.peer, 16<<20, dv, false)
	mustOK(t, ucxDo(e, rd))
	if d := firstDiff(joinMixed(rd, dev), dv); d != "" {
		t.Fatalf("mixed read back: %s", d)
	}
	if e.StagedParts() != before+2 {
		t.Fatalf("%d device parts staged, want 2", e.StagedParts()-before)
	}
	if got := e.RouteOps(RouteUCX); got != 2+2*n+2 {
		t.Fatalf("RouteOps(ucx) = %d, want %d", got, 2+2*n+2)
	}
	if got := e.RouteOps(RouteTCP); got != 0 {
		t.Fatalf("RouteOps(tcp) = %d, want 0", got)
	}
}

// Route picks UCX for a peer with a UCX desc on another host, or on this
// one with ForceUCX; a same-host peer stays on shared memory otherwise,
// and a peer without a desc (or an engine without a worker) on TCP.
func TestUCXRouteRules(t *testing.T) {
	needUCX(t)
	o := newUCXOwner(t, 1<<20)
	e := ucxEngine(t, Options{})
	forced := ucxEngine(t, Options{ForceUCX: true})
	plain := NewEngine(Options{Log: quietLog()})
	defer plain.Close()
	same := o.peer
	same.HostID, same.ShmPath = HostID(), o.seg.ShmPath()
	noDesc := o.peer
	noDesc.UCX = nil
	for _, c := range []struct {
		e    *Engine
		p    Peer
		want Route
	}{
		{e, o.peer, RouteUCX}, {e, same, RouteShm}, {e, noDesc, RouteTCP},
		{forced, same, RouteUCX}, {forced, o.peer, RouteUCX},
		{plain, o.peer, RouteTCP}, {plain, same, RouteShm},
	} {
		if got := c.e.Route(c.p); got != c.want {
			t.Errorf("peer on host %q with %d bytes of UCX desc: %v, want %v", c.p.HostID, len(c.p.UCX), got, c.want)
		}
	}
	if !(RouteShm.Cost() < RouteUCX.Cost() && RouteUCX.Cost() < RouteTCP.Cost()) || RouteUCX.String() != "ucx" {
		t.Fatalf("ucx costs %d between shm %d and tcp %d, named %q", RouteUCX.Cost(), RouteShm.Cost(), RouteTCP.Cost(), RouteUCX)
	}
	v := pattern(3, 100000)
	mustOK(t, ucxDo(forced, Op{Peer: same, Offset: 0, Bufs: [][]byte{v}, Write: true}))
	if d := firstDiff(o.seg.Bytes()[:len(v)], v); d != "" || forced.RouteOps(RouteUCX) != 1 {
		t.Fatalf("forced same-host write: %s, %d ops over ucx", d, forced.RouteOps(RouteUCX))
	}
}

// Ops the route cannot serve are refused with the contract's codes before
// anything moves: outside the segment or the exposure (a Peer of unknown
// size) or with a damaged desc ErrInvalidParams; without a grant, outside
// it, or with another segment's ErrIllegalClient, with an expired one
// ErrLeaseExpired, as the TCP route's server answers.
func TestUCXRouteRefusals(t *testing.T) {
	needUCX(t)
	const size = 1 << 20
	o := newUCXOwner(t, size)
	e := ucxEngine(t, Options{})
	v := pattern(4, 8192)
	check := func(what string, op Op, code wire.Code) {
		t.Helper()
		clear(o.seg.Bytes())
		wantCode(t, ucxDo(e, op)[0], code)
		if !bytes.Equal(o.seg.Bytes(), make([]byte, size)) {
			t.Fatalf("%s: the refused op wrote the segment", what)
		}
	}
	check("past the end", Op{Peer: o.peer, Offset: size - 4096, Bufs: [][]byte{v}, Write: true}, wire.ErrInvalidParams)
	unsized := o.peer
	unsized.Size = 0
	check("past the exposure", Op{Peer: unsized, Offset: size - 4096, Bufs: [][]byte{v}, Write: true}, wire.ErrInvalidParams)
	hour := time.Now().Add(time.Hour)
	g := ucxGrant(o.peer, 0, 4096, true, hour)
	check("past the grant", Op{Peer: o.peer, Offset: 0, Bufs: [][]byte{v}, Write: true, Grant: g}, wire.ErrIllegalClient)
	check("a write on a read grant", Op{Peer: o.peer, Bufs: [][]byte{v}, Write: true, Grant: ucxGrant(o.peer, 0, 8192, false, hour)},
		wire.ErrIllegalClient)
	other := o.peer
	other.SegID++
	check("another segment's grant", Op{Peer: o.peer, Bufs: [][]byte{v}, Write: true, Grant: ucxGrant(other, 0, 8192, true, hour)},
		wire.ErrIllegalClient)
	check("an expired grant", Op{Peer: o.peer, Bufs: [][]byte{v}, Write: true, Grant: ucxGrant(o.peer, 0, 8192, true, time.Now().Add(-time.Second))},
		wire.ErrLeaseExpired)
	// No grant: no server stands behind the route to refuse it, so the
	// engine does (the TCP route's server would: ErrIllegalClient).
	clear(o.seg.Bytes())
	wantCode(t, e.Do(context.Background(), []Op{{Peer: o.peer, Bufs: [][]byte{v}, Write: true}})[0], wire.ErrIllegalClient)
	if !bytes.Equal(o.seg.Bytes(), make([]byte, size)) {
		t.Fatal("an op without a grant wrote the segment")
	}
	bad := o.peer
	bad.UCX = append([]byte(nil), o.peer.UCX...)
	bad.UCX[len(bad.UCX)/2] ^= 0xff
	check("a damaged desc", Op{Peer: bad, Offset: 0, Bufs: [][]byte{v}, Write: true}, wire.ErrInvalidParams)
	// Inside its grant, the op goes.
	mustOK(t, ucxDo(e, Op{Peer: o.peer, Offset: 0, Bufs: [][]byte{v[:4096]}, Write: true, Grant: g}))
	if d := firstDiff(o.seg.Bytes()[:4096], v[:4096]); d != "" {
		t.Fatal(d)
	}
}

// An exposure closed (the owner unmounted, or remounted with a fresh one)
// fails ops that hold its desc: an error, never bytes, and nothing of the
// caller's buffer written. The new exposure of the same segment is reached
// after Forget, on a new endpoint; so is the old segment after Forget.
func TestUCXRouteClosedExposureAndForget(t *testing.T) {
	needUCX(t)
	const size = 1 << 20
	o := newUCXOwner(t, size)
	e := ucxEngine(t, Options{})
	v := pattern(5, 65536)
	copy(o.seg.Bytes(), v)
	got := make([]byte, len(v))
	mustOK(t, ucxDo(e, Op{Peer: o.peer, Bufs: [][]byte{got}}))
	if d := firstDiff(got, v); d != "" {
		t.Fatal(d)
	}
	old := o.peer
	o.x.Close()
	clear(got)
	start := time.Now()
	err := ucxDo(e, Op{Peer: old, Bufs: [][]byte{got}})[0]
	wantCode(t, err, wire.ErrTransferFail)
	if !bytes.Equal(got, make([]byte, len(got))) {
		t.Fatal("a read of a closed exposure brought bytes")
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("the failure took %v", took)
	}
	e.Forget(old.SegID)
	o.expose(t)
	mustOK(t, ucxDo(e, Op{Peer: o.peer, Bufs: [][]byte{got}}))
	if d := firstDiff(got, v); d != "" {
		t.Fatalf("after Forget and a fresh exposure: %s", d)
	}
	e.Forget(o.peer.SegID)
	w := pattern(6, 4096)
	mustOK(t, ucxDo(e, Op{Peer: o.peer, Bufs: [][]byte{w}, Write: true}))
	if d := firstDiff(o.seg.Bytes()[:4096], w); d != "" {
		t.Fatalf("after Forget, reconnected: %s", d)
	}
}

// Device parts go to UCX as GPU pointers only where its context has CUDA
// and the part is GPU memory (not another process's); the conversion
// puts each in its placeholder. (No CUDA here: the direct path itself is
// only compiled; the staged one is TestUCXRouteMovesBytes's.)
func TestUCXDeviceParts(t *testing.T) {
	op := Op{Bufs: [][]byte{[]byte("ab"), nil, []byte("c")}, Device: []DevicePart{{Index: 1, Ptr: 0x7000, Size: 64}}}
	withCUDA, without := &Engine{ucxCUDA: true}, &Engine{}
	if !withCUDA.ucxDirect(&op) || without.ucxDirect(&op) {
		t.Fatalf("direct with CUDA %v, without %v", withCUDA.ucxDirect(&op), without.ucxDirect(&op))
	}
	parts := ucxParts(&op)
	if len(parts) != 3 || string(parts[0].Host) != "ab" || parts[1].Host != nil || parts[1].Dev != 0x7000 || parts[1].Len != 64 ||
		string(parts[2].Host) != "c" {
		t.Fatalf("parts %+v", parts)
	}
	op.Device[0].Pid = 42
	if withCUDA.ucxDirect(&op) {
		t.Fatal("a part in another process's memory went to UCX as a GPU pointer")
	}
}

const ucxChildEnv = "GOSTORE_TRANSFER_UCX_CHILD"

// An owner process killed while ops on its segment are in flight over
// UCX's tcp: they fail (ErrTransferFail) well before their ctx ends, never
// hang, and later ops on its desc fail too.
func TestUCXRoutePeerKilled(t *testing.T) {
	needUCX(t)
	const size = 32 << 20
	cmd := exec.Command(os.Args[0], "-test.run=^TestUCXRouteChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), ucxChildEnv+"=1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe() // the child lives until it is killed or this closes
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	r := bufio.NewReader(stdout)
	var p Peer
	for p.UCX == nil {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("child said nothing useful: %v", err)
		}
		if f := strings.Fields(line); len(f) == 2 && f[0] == "UCXDESC" {
			nextSegID++
			p = Peer{SegID: nextSegID, HostID: "elsewhere", Size: size}
			if p.UCX, err = hex.DecodeString(f[1]); err != nil {
				t.Fatal(err)
			}
		}
	}
	e := ucxEngine(t, Options{})
	bufs := make([][]byte, 4)
	for i := range bufs {
		bufs[i] = make([]byte, size/4)
	}
	batch := func() []Op {
		ops := make([]Op, len(bufs))
		for i := range ops {
			ops[i] = Op{Peer: p, Offset: uint64(i * size / 4), Bufs: [][]byte{bufs[i]}}
		}
		return ops
	}
	mustOK(t, ucxDo(e, batch()...))
	if d := firstDiff(bufs[1][:4096], pattern(79, size)[size/4:][:4096]); d != "" {
		t.Fatalf("the child's bytes: %s", d)
	}
	failed := make(chan error, 1)
	go func() {
		for {
			for _, err := range ucxDo(e, batch()...) {
				if err != nil {
					failed <- err
					return
				}
			}
		}
	}()
	time.Sleep(20 * time.Millisecond) // some batches in flight
	killed := time.Now()
	cmd.Process.Kill()
	cmd.Wait()
	select {
	case err := <-failed:
		wantCode(t, err, wire.ErrTransferFail)
		if errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("the failure was the ctx's end, %v after the kill: %v", time.Since(killed), err)
		}
	case <-time.After(25 * time.Second):
		t.Fatal("ops on a killed owner's segment still running 25 s after the kill")
	}
	start := time.Now()
	wantCode(t, ucxDo(e, batch()[0])[0], wire.ErrTransferFail)
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("an op on the dead owner's desc took %v to fail", took)
	}
}

// TestUCXRouteChild is the owner process of TestUCXRoutePeerKilled.
func TestUCXRouteChild(t *testing.T) {
	if os.Getenv(ucxChildEnv) != "1" {
		t.Skip("runs as the child of TestUCXRoutePeerKilled")
	}
	o := newUCXOwner(t, 32<<20)
	copy(o.seg.Bytes(), pattern(79, 32<<20))
	fmt.Printf("UCXDESC %s\n", hex.EncodeToString(o.peer.UCX))
	io.Copy(io.Discard, os.Stdin) // until the parent closes it, or kills this process
}

// Begin over UCX posts a read of at most ucxBeginBytes under its grant and
// Wait brings the owner's bytes (counted in RouteOps as Do counts); a
// larger op, or one whose grant does not cover it, is not begun.
func TestUCXBegin(t *testing.T) {
	needUCX(t)
	o := newUCXOwner(t, 4<<20)
	e := ucxEngine(t, Options{})
	v := pattern(3, ucxBeginBytes)
	copy(o.seg.Bytes()[8192:], v)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	read := func(off, n uint64, g []byte) (*Begun, []byte) {
		got := make([]byte, n)
		return e.Begin(ctx, Op{Peer: o.peer, Offset: off, Bufs: [][]byte{got}, Grant: g}), got
	}
	for _, n := range []uint64{4096, ucxBeginBytes} {
		b, got := read(8192, n, ucxGrant(o.peer, 8192, n, false, time.Now().Add(time.Hour)))
		if b == nil {
			t.Fatalf("%d bytes: not begun", n)
		}
		if err := b.Wait(); err != nil {
			t.Fatalf("%d bytes: %v", n, err)
		}
		if d := firstDiff(got, v[:n]); d != "" {
			t.Fatalf("%d bytes: %s", n, d)
		}
	}
	if got := e.RouteOps(RouteUCX); got != 2 {
		t.Fatalf("RouteOps(ucx) = %d, want 2", got)
	}
	hour := time.Now().Add(time.Hour)
	for name, g := range map[string][]byte{
		"more than ucxBeginBytes": ucxGrant(o.peer, 0, ucxBeginBytes+1, false, hour),
		"an expired grant":        ucxGrant(o.peer, 0, 4096, false, time.Now().Add(-time.Second)),
		"another segment's grant": ucxGrant(Peer{SegID: o.peer.SegID + 1}, 0, 4096, false, hour),
		"no grant":                nil,
	} {
		n := uint64(4096)
		if name == "more than ucxBeginBytes" {
			n = ucxBeginBytes + 1
		}
		if b, _ := read(0, n, g); b != nil {
			b.Wait()
			t.Errorf("%s: begun", name)
		}
	}
	if got := e.RouteOps(RouteUCX); got != 2 {
		t.Fatalf("RouteOps(ucx) = %d after the refused ones, want 2", got)
	}
}
