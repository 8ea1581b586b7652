// route_test.go tests the routing of Do: the own segment, device parts
// on every route (with the FAKE driver of device_test.go: no GPU here),
// staging, Trim, and transports wrapped by a fake that fails, delays or
// drops ops.

package transfer

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/gostore/gostore/gostore/wire"
)

// devBuf is "device memory" for the fake driver: Go memory the test
// addresses by its pointer, never by a slice the engine sees. It is kept
// reachable in devMem: the engine holds only its address.
func devBuf(data []byte) (ptr uint64, mem []byte) {
	mem = append([]byte(nil), data...)
	devMem.Lock()
	devMem.bufs = append(devMem.bufs, mem)
	devMem.Unlock()
	return uint64(uintptr(unsafe.Pointer(&mem[0]))), mem
}

var devMem struct {
	sync.Mutex
	bufs [][]byte
}

// mixedOp is an op whose middle part (of three) is on a "GPU".
func mixedOp(p Peer, off uint64, v []byte, write bool) (Op, []byte) {
	a, b := len(v)/3, 2*len(v)/3
	src := v[a:b]
	if !write {
		src = make([]byte, b-a)
	}
	ptr, mem := devBuf(src)
	head, tail := v[:a], v[b:]
	if !write {
		head, tail = make([]byte, a), make([]byte, len(v)-b)
	}
	return Op{Peer: p, Offset: off, Bufs: [][]byte{head, nil, tail},
		Device: []DevicePart{{Index: 1, Ptr: ptr, Size: uint64(b - a)}}, Write: write}, mem
}

// joinMixed reassembles what a read op received.
func joinMixed(op Op, dev []byte) []byte {
	return append(append(append([]byte(nil), op.Bufs[0]...), dev...), op.Bufs[2]...)
}

// Device parts reach every route: straight into a page-locked mapping
// (shared memory, the own segment), GPU to GPU into an IPC segment, and
// staged through the bounces over TCP. Bytes are checked in the segment
// and back.
func TestDevicePartsEveryRoute(t *testing.T) {
	const size = 4 << 20
	shmSeg := localSegment(t, "dev-shm", size)
	ownSeg := localSegment(t, "dev-own", size)
	tcp := newTCPPeer(t, size)
	ipcDev := &fakeDevice{mu: new(sync.Mutex), mem: make([]byte, size)}
	ipc := newDevicePeer(t, ipcDev)
	ipc.HostID, ipc.IPC = HostID(), []byte("h")
	ipcMapped := &fakeDevice{mu: ipcDev.mu, mem: ipcDev.mem}

	drv := &fakeDriver{open: func(Peer) (DeviceMemory, error) { return ipcMapped, nil }}
	e := NewEngine(Options{Log: quietLog(), Driver: drv, BounceBytes: 1 << 20})
	defer e.Close()
	nextSegID++
	own := Peer{SegID: nextSegID, HostID: HostID(), Size: size}
	e.SetOwn(own.SegID, ownSeg.Bytes(), nil)

	routes := []struct {
		peer   Peer
		route  Route
		mem    []byte
		staged bool
	}{
		{own, RouteOwn, ownSeg.Bytes(), false},
		{shmPeer(shmSeg), RouteShm, shmSeg.Bytes(), false},
		{ipc, RouteIPC, ipcDev.mem, false},
		{tcp.peer, RouteTCP, tcp.seg.Bytes(), true},
	}
	for i, r := range routes {
		if got := e.Route(r.peer); got != r.route {
			t.Fatalf("route %d: %v, want %v", i, got, r.route)
		}
		v := pattern(uint64(40+i), 3<<20+i) // larger than the arena: a loan of its own
		before := e.StagedParts()
		w, _ := mixedOp(r.peer, 4096, v, true)
		mustOK(t, grantDo(e, context.Background(), []Op{w}))
		if d := firstDiff(r.mem[4096:4096+len(v)], v); d != "" {
			t.Fatalf("%v: segment after a mixed write: %s", r.route, d)
		}
		rd, dev := mixedOp(r.peer, 4096, v, false)
		mustOK(t, grantDo(e, context.Background(), []Op{rd}))
		if d := firstDiff(joinMixed(rd, dev), v); d != "" {
			t.Fatalf("%v: mixed read back: %s", r.route, d)
		}
		if staged := e.StagedParts() > before; staged != r.staged {
			t.Fatalf("%v: staged %v, want %v", r.route, staged, r.staged)
		}
	}
	if drv.pinned.Load() != 2 { // the own segment and the shared mapping
		t.Fatalf("%d ranges pinned, want 2", drv.pinned.Load())
	}
	e.Close()
	if drv.pinned.Load() != 0 {
		t.Fatalf("%d ranges still pinned after Close", drv.pinned.Load())
	}
}

// A mapping that cannot be page-locked still takes device parts, staged;
// a driver that fails a copy fails the op with ErrTransferFail; device
// parts without a driver, or naming a host part, are refused up front
// and nothing is written.
func TestDevicePartsRefusedAndStaged(t *testing.T) {
	seg := localSegment(t, "dev-nopin", 1<<20)
	p := shmPeer(seg)
	drv := &fakeDriver{}
	drv.refusePin.Store(true)
	e := NewEngine(Options{Log: quietLog(), Driver: drv})
	defer e.Close()
	v := pattern(5, 30000)
	w, _ := mixedOp(p, 0, v, true)
	mustOK(t, grantDo(e, context.Background(), []Op{w}))
	rd, dev := mixedOp(p, 0, v, false)
	mustOK(t, grantDo(e, context.Background(), []Op{rd}))
	if d := firstDiff(joinMixed(rd, dev), v); d != "" || e.StagedParts() != 2 {
		t.Fatalf("unpinnable mapping: %s, staged parts %d", d, e.StagedParts())
	}

	drv.failCopies.Store(true)
	w, _ = mixedOp(p, 0, pattern(6, 30000), true)
	wantCode(t, grantDo(e, context.Background(), []Op{w})[0], wire.ErrTransferFail)
	drv.failCopies.Store(false)

	noDriver := NewEngine(Options{Log: quietLog()})
	defer noDriver.Close()
	clear(seg.Bytes())
	w, _ = mixedOp(p, 0, v, true)
	wantCode(t, grantDo(noDriver, context.Background(), []Op{w})[0], wire.ErrInvalidParams)
	bad := w
	bad.Device = []DevicePart{{Index: 0, Ptr: w.Device[0].Ptr, Size: 10}} // part 0 is host memory
	wantCode(t, grantDo(e, context.Background(), []Op{bad})[0], wire.ErrInvalidParams)
	for _, b := range seg.Bytes()[:len(v)] {
		if b != 0 {
			t.Fatal("a refused op wrote the segment")
		}
	}
}

// Staged hands fn host memory standing for the device parts and puts
// what fn read onto the GPU; an error from fn leaves the device alone.
func TestStaged(t *testing.T) {
	e := NewEngine(Options{Log: quietLog(), Driver: &fakeDriver{}})
	defer e.Close()
	v := pattern(7, 9000)
	ok, okDev := mixedOp(Peer{}, 0, v, false)
	failed, failedDev := mixedOp(Peer{}, 0, v, false)
	errs := e.Staged([]Op{ok, failed}, func(host []Op) []error {
		if len(host) != 2 || len(host[0].Device) != 0 || host[0].Bufs[1] == nil {
			t.Fatalf("fn got %d ops, device parts %d", len(host), len(host[0].Device))
		}
		CopyScatter(v, 0, host[0].Bufs, false)
		CopyScatter(v, 0, host[1].Bufs, false)
		return []error{nil, wire.Errorf(wire.ErrObjectNotFound, "gone")}
	})
	if errs[0] != nil || wire.CodeOf(errs[1]) != wire.ErrObjectNotFound {
		t.Fatalf("errors %v", errs)
	}
	if d := firstDiff(joinMixed(ok, okDev), v); d != "" {
		t.Fatalf("staged read: %s", d)
	}
	for _, b := range failedDev {
		if b != 0 {
			t.Fatal("a failed staged read wrote the device part")
		}
	}
}

func TestTrim(t *testing.T) {
	a, b := make([]byte, 10), make([]byte, 20)
	for _, tc := range []struct {
		name    string
		bufs    [][]byte
		dev     []DevicePart
		size    uint64
		lens    []int
		devSize []uint64
		devIdx  []int
		code    wire.Code
	}{
		{"host exact", [][]byte{a, b}, nil, 30, []int{10, 20}, nil, nil, wire.OK},
		{"host prefix", [][]byte{a, b}, nil, 15, []int{10, 5}, nil, nil, wire.OK},
		{"device cut", [][]byte{a, nil, b}, []DevicePart{{Index: 1, Size: 100}}, 50, []int{10, 0}, []uint64{40}, []int{1}, wire.OK},
		{"device dropped", [][]byte{a, nil}, []DevicePart{{Index: 1, Size: 8}}, 10, []int{10}, nil, nil, wire.OK},
		{"too small", [][]byte{a}, nil, 11, nil, nil, nil, wire.ErrInvalidParams},
		{"device on a host part", [][]byte{a}, []DevicePart{{Index: 0, Size: 1}}, 1, nil, nil, nil, wire.ErrInvalidParams},
		{"device out of order", [][]byte{nil, nil}, []DevicePart{{Index: 1, Size: 1}, {Index: 0, Size: 1}}, 1, nil, nil, nil, wire.ErrInvalidParams},
	} {
		bufs, dev, err := Trim(tc.bufs, tc.dev, tc.size)
		if wire.CodeOf(err) != tc.code {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if err != nil {
			continue
		}
		if len(bufs) != len(tc.lens) || len(dev) != len(tc.devSize) {
			t.Fatalf("%s: %d parts, %d device parts", tc.name, len(bufs), len(dev))
		}
		for k, n := range tc.lens {
			if len(bufs[k]) != n {
				t.Fatalf("%s: part %d of %d bytes, want %d", tc.name, k, len(bufs[k]), n)
			}
		}
		for k, n := range tc.devSize {
			if dev[k].Size != n || dev[k].Index != tc.devIdx[k] || bufs[dev[k].Index] != nil {
				t.Fatalf("%s: device part %+v", tc.name, dev[k])
			}
		}
	}
}

// faultyTransport is a FAKE in front of a real route: it fails, delays or
// drops (hands back to TCP) the ops whose segment is listed.
type faultyTransport struct {
	inner Transport
	mu    sync.Mutex
	fail  map[uint64]error
	delay map[uint64]time.Duration
	drop  map[uint64]bool
	seen  atomic.Int64
}

func (f *faultyTransport) Start(ctx context.Context, ops []Op, idx []int, errs []error) func() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	var pass, dropped []int
	for _, i := range idx {
		f.seen.Add(1)
		seg := ops[i].Peer.SegID
		switch {
		case f.fail[seg] != nil:
			errs[i] = f.fail[seg]
		case f.drop[seg]:
			dropped = append(dropped, i)
		case f.delay[seg] > 0:
			select {
			case <-time.After(f.delay[seg]):
				pass = append(pass, i)
			case <-ctx.Done():
				errs[i] = ctxErr(ctx)
			}
		default:
			pass = append(pass, i)
		}
	}
	wait := f.inner.Start(ctx, ops, pass, errs)
	return func() []int { return append(wait(), dropped...) }
}

// Do reports a failing transport's errors per op and runs the others; an
// op a local route drops goes over TCP; one held past the deadline ends
// with ErrTransferFail that matches context.DeadlineExceeded.
func TestFakeTransport(t *testing.T) {
	seg := localSegment(t, "faulty", 1<<20)
	shm := shmPeer(seg)
	// The same segment served over TCP too, so a dropped op can land.
	ln := newTCPPeer(t, 1<<20)
	broken, slow, dropped := shm, shm, shm
	broken.SegID, slow.SegID, dropped.SegID = shm.SegID+1, shm.SegID+2, shm.SegID+3
	dropped.TransferAddr = ln.peer.TransferAddr
	fake := &faultyTransport{
		fail:  map[uint64]error{broken.SegID: wire.Errorf(wire.ErrTransferFail, "fake: link down")},
		delay: map[uint64]time.Duration{slow.SegID: time.Hour},
		drop:  map[uint64]bool{dropped.SegID: true},
	}
	e := NewEngine(Options{Log: quietLog(), Wrap: func(r Route, t Transport) Transport {
		if r == RouteShm {
			fake.inner = t
			return fake
		}
		return t
	}})
	defer e.Close()
	v := pattern(3, 8192)
	errs := grantDo(e, context.Background(), []Op{
		{Peer: shm, Offset: 0, Bufs: [][]byte{v}, Write: true},
		{Peer: broken, Offset: 0, Bufs: [][]byte{v}, Write: true},
		{Peer: dropped, Offset: 8192, Bufs: [][]byte{v}, Write: true},
	})
	if errs[0] != nil || wire.CodeOf(errs[1]) != wire.ErrTransferFail || errs[2] != nil {
		t.Fatalf("errors %v", errs)
	}
	if d := firstDiff(seg.Bytes()[:8192], v); d != "" {
		t.Fatalf("the healthy op: %s", d)
	}
	if d := firstDiff(ln.seg.Bytes()[8192:16384], v); d != "" {
		t.Fatalf("the dropped op did not go over TCP: %s", d)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := grantDo(e, ctx, []Op{{Peer: slow, Offset: 0, Bufs: [][]byte{v}, Write: true}})[0]
	if wire.CodeOf(err) != wire.ErrTransferFail || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("held op: %v", err)
	}
	if fake.seen.Load() != 4 {
		t.Fatalf("the fake saw %d ops, want 4", fake.seen.Load())
	}
}
