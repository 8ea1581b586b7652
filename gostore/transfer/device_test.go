package transfer

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/gostore/gostore/gostore/wire"
)

// fakeDevice is a FAKE DeviceMemory (no GPU here): host bytes reached only
// through CopyFrom/CopyTo, counting the copies, failing them on demand.
// gpu.Segment is the real one; tests/gpu drives it on a GPU.
type fakeDevice struct {
	mu     *sync.Mutex // shared by fakes over the same bytes (a "mapping")
	mem    []byte
	copies atomic.Int64
	broken atomic.Bool
	closed atomic.Bool
}

func (d *fakeDevice) Size() uint64 { return uint64(len(d.mem)) }

func (d *fakeDevice) CopyFrom(off uint64, src []byte) error {
	if d.broken.Load() {
		return errors.New("fake device: broken")
	}
	d.copies.Add(1)
	d.mu.Lock()
	copy(d.mem[off:], src)
	d.mu.Unlock()
	return nil
}

func (d *fakeDevice) CopyTo(dst []byte, off uint64) error {
	if d.broken.Load() {
		return errors.New("fake device: broken")
	}
	d.copies.Add(1)
	d.mu.Lock()
	copy(dst, d.mem[off:])
	d.mu.Unlock()
	return nil
}

// The fake's "device addresses" are host addresses: Go memory of the test.
func fakeDeviceBytes(addr, n uint64) []byte {
	return unsafe.Slice((*byte)(*(*unsafe.Pointer)(unsafe.Pointer(&addr))), n)
}

func (d *fakeDevice) CopyFromDevice(off, src, n uint64) error {
	return d.CopyFrom(off, fakeDeviceBytes(src, n))
}

func (d *fakeDevice) CopyToDevice(dst, off, n uint64) error {
	return d.CopyTo(fakeDeviceBytes(dst, n), off)
}

func (d *fakeDevice) Close() error {
	d.closed.Store(true)
	return nil
}

// fakeDriver is a FAKE Driver (no GPU here): "device memory" is Go memory
// of the test reached through its address, pinned memory is plain Go
// memory, and pins are only counted. open maps IPC handles (nil: refuse).
type fakeDriver struct {
	open         func(Peer) (DeviceMemory, error)
	pinned       atomic.Int64 // ranges pinned now
	refusePin    atomic.Bool
	failCopies   atomic.Bool
	deviceCopies atomic.Int64
	// refuseNewPinned: NewPinned fails, as the client's driver does on a
	// host without CUDA (a fake: this machine has none to test with)
	refuseNewPinned bool
}

type fakePinned struct{ mem []byte }

func (p *fakePinned) Bytes() []byte { return p.mem }
func (p *fakePinned) Close() error  { return nil }

func (d *fakeDriver) NewPinned(n uint64) (Pinned, error) {
	if d.refuseNewPinned {
		return nil, errors.New("fake driver: no device to pin memory with")
	}
	return &fakePinned{make([]byte, n)}, nil
}

func (d *fakeDriver) Pin(addr, size uint64) error {
	if d.refusePin.Load() {
		return errors.New("fake driver: pin refused")
	}
	d.pinned.Add(1)
	return nil
}

func (d *fakeDriver) Unpin(addr uint64) error {
	d.pinned.Add(-1)
	return nil
}

func (d *fakeDriver) CopyToHost(device int, host, dev, n uint64) error {
	if d.failCopies.Load() {
		return errors.New("fake driver: copy failed")
	}
	d.deviceCopies.Add(1)
	copy(fakeDeviceBytes(host, n), fakeDeviceBytes(dev, n))
	return nil
}

func (d *fakeDriver) CopyToDevice(device int, dev, host, n uint64) error {
	if d.failCopies.Load() {
		return errors.New("fake driver: copy failed")
	}
	d.deviceCopies.Add(1)
	copy(fakeDeviceBytes(dev, n), fakeDeviceBytes(host, n))
	return nil
}

func (d *fakeDriver) OpenPeer(p Peer) (DeviceMemory, error) {
	if d.open == nil {
		return nil, errors.New("fake driver: no IPC")
	}
	return d.open(p)
}

func newDevicePeer(t *testing.T, dev *fakeDevice) Peer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewDeviceServer(ln, dev, quietLog())
	go srv.Serve()
	t.Cleanup(func() { srv.Close() })
	nextSegID++
	serveGranted(srv, nextSegID)
	return Peer{SegID: nextSegID, HostID: "elsewhere", TransferAddr: ln.Addr().String(), Size: dev.Size(), Location: "cuda:0"}
}

// A GPU segment served over TCP: payloads larger than the server's staging
// chunk, scatter lists, and ranges outside it.
func TestDeviceSegmentOverTCP(t *testing.T) {
	dev := &fakeDevice{mu: new(sync.Mutex), mem: make([]byte, 8<<20)}
	peer := newDevicePeer(t, dev)
	e := NewEngine(Options{Log: quietLog()})
	defer e.Close()
	if e.Route(peer).String() != "tcp" {
		t.Fatalf("a device segment elsewhere goes %s", e.Route(peer))
	}
	v := pattern(7, 3<<20+123)
	mustOK(t, grantDo(e, context.Background(), []Op{{Peer: peer, Offset: 4096, Bufs: scatter(v, 1<<20, 77), Write: true}}))
	dev.mu.Lock()
	d := firstDiff(dev.mem[4096:4096+len(v)], v)
	dev.mu.Unlock()
	if d != "" {
		t.Fatal(d)
	}
	back := make([]byte, len(v))
	mustOK(t, grantDo(e, context.Background(), []Op{{Peer: peer, Offset: 4096, Bufs: scatter(back, 999, 1<<20)}}))
	if d := firstDiff(back, v); d != "" {
		t.Fatal(d)
	}
	peer.Size = 0 // let the server judge the range
	wantCode(t, grantDo(e, context.Background(), []Op{{Peer: peer, Offset: 8<<20 - 10, Bufs: [][]byte{make([]byte, 20)}}})[0], wire.ErrInvalidParams)
	// A device that fails its copies fails the op, never hands out bytes.
	dev.broken.Store(true)
	if err := grantDo(e, context.Background(), []Op{{Peer: peer, Offset: 0, Bufs: [][]byte{make([]byte, 4096)}}})[0]; err == nil {
		t.Fatal("a read from a failing device succeeded")
	}
}

// A same-host GPU segment is opened once through the engine's opener (its
// IPC handle) and copied to directly; a segment that cannot be opened falls
// back to TCP; Forget closes the mapping.
func TestDeviceSegmentOverIPC(t *testing.T) {
	dev := &fakeDevice{mu: new(sync.Mutex), mem: make([]byte, 4<<20)}
	peer := newDevicePeer(t, dev)
	peer.HostID, peer.IPC = HostID(), []byte("handle")
	var opened atomic.Int64
	mapped := &fakeDevice{mu: dev.mu, mem: dev.mem} // the "mapping" of the same bytes
	e := NewEngine(Options{Log: quietLog(), Driver: &fakeDriver{open: func(p Peer) (DeviceMemory, error) {
		opened.Add(1)
		if string(p.IPC) != "handle" {
			return nil, errors.New("fake opener: unknown handle")
		}
		return mapped, nil
	}}})
	defer e.Close()
	if e.Route(peer).String() != "ipc" {
		t.Fatalf("a same-host device segment goes %s", e.Route(peer))
	}
	v := pattern(9, 1<<20+5)
	for range 3 {
		mustOK(t, grantDo(e, context.Background(), []Op{{Peer: peer, Offset: 100, Bufs: scatter(v, 4096, 333), Write: true}}))
	}
	back := make([]byte, len(v))
	mustOK(t, grantDo(e, context.Background(), []Op{{Peer: peer, Offset: 100, Bufs: [][]byte{back}}}))
	if d := firstDiff(back, v); d != "" || opened.Load() != 1 || mapped.copies.Load() == 0 || dev.copies.Load() != 0 {
		t.Fatalf("ipc: %s, opened %d, mapped copies %d, server copies %d", d, opened.Load(), mapped.copies.Load(), dev.copies.Load())
	}
	e.Forget(peer.SegID)
	if !mapped.closed.Load() {
		t.Fatal("Forget left the device mapping open")
	}
	// An IPC handle that cannot be opened: the same op goes over TCP.
	bad := peer
	bad.SegID, bad.IPC = peer.SegID+5000, []byte("stale")
	mustOK(t, grantDo(e, context.Background(), []Op{{Peer: bad, Offset: 0, Bufs: [][]byte{v[:4096]}, Write: true}}))
	if e.Route(bad).String() != "tcp" || dev.copies.Load() == 0 {
		t.Fatalf("after a failed open: path %s, server copies %d", e.Route(bad), dev.copies.Load())
	}
}
