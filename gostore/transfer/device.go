// device.go defines how the Engine reaches memory it cannot slice:
// DeviceMemory (a segment only a driver copies), DevicePart (a caller's part
// on a GPU, or in another process), the Driver the client supplies, the IPC
// route's maps, and direct copies between such parts and a segment.

package transfer

import (
	"fmt"
	"log/slog"
	"unsafe"

	"github.com/gostore/gostore/gostore/wire"
)

// DeviceMemory is a segment whose bytes only a driver moves (gpu.Segment):
// the Server and the Engine copy through it instead of slicing memory.
type DeviceMemory interface {
	Size() uint64
	// CopyFrom writes src to [off, off+len(src)); CopyTo reads
	// [off, off+len(dst)) into dst.
	CopyFrom(off uint64, src []byte) error
	CopyTo(dst []byte, off uint64) error
	// CopyFromDevice / CopyToDevice move n bytes between the segment and
	// device memory at a raw address (a caller's GPU buffer): one copy on
	// the GPUs, the host never sees the bytes.
	CopyFromDevice(off, src, n uint64) error
	CopyToDevice(dst, off, n uint64) error
	Close() error
}

// DevicePart is a part of an op's caller memory this process cannot
// slice: part Index of the op's scatter list (a nil placeholder in
// Op.Bufs) is Size bytes at address Ptr on GPU Device or, when Pid is not
// 0, in the memory of process Pid (moved with process_vm_readv/writev,
// procmem.go; Device is then unused). An op lists its device parts in
// ascending Index order.
type DevicePart struct {
	Index  int
	Ptr    uint64
	Size   uint64
	Device int
	Pid    int
}

// String names where the part lives, for errors.
func (d DevicePart) String() string {
	if d.Pid != 0 {
		return fmt.Sprintf("process %d at %#x", d.Pid, d.Ptr)
	}
	return fmt.Sprintf("cuda:%d at %#x", d.Device, d.Ptr)
}

// toPart copies host, len(host) = d.Size bytes, onto part d.
func (e *Engine) toPart(d DevicePart, host []byte) error {
	if d.Pid != 0 {
		return copyProcess(d.Pid, d.Ptr, host, true)
	}
	return e.driver.CopyToDevice(d.Device, d.Ptr, addrOf(host), d.Size)
}

// fromPart copies part d into host, len(host) = d.Size bytes.
func (e *Engine) fromPart(d DevicePart, host []byte) error {
	if d.Pid != 0 {
		return copyProcess(d.Pid, d.Ptr, host, false)
	}
	return e.driver.CopyToHost(d.Device, addrOf(host), d.Ptr, d.Size)
}

// onGPU reports whether any of op's device parts is GPU memory.
func onGPU(op *Op) bool {
	for _, d := range op.Device {
		if d.Pid == 0 {
			return true
		}
	}
	return false
}

// Driver is what the Engine needs of a GPU driver. The client supplies one
// over gostore/gpu, so this package links no driver and tests can supply
// a fake.
type Driver interface {
	// NewPinned returns n bytes of page-locked host memory.
	NewPinned(n uint64) (Pinned, error)
	// Pin page-locks [addr, addr+size) of host memory; Unpin undoes it.
	Pin(addr, size uint64) error
	Unpin(addr uint64) error
	// CopyToHost / CopyToDevice move n bytes between host address host and
	// device address dev on GPU device.
	CopyToHost(device int, host, dev, n uint64) error
	CopyToDevice(device int, dev, host, n uint64) error
	// OpenPeer maps a same-host peer's GPU segment (Peer.IPC) here.
	OpenPeer(p Peer) (DeviceMemory, error)
}

// Pinned is page-locked host memory from Driver.NewPinned.
type Pinned interface {
	Bytes() []byte
	Close() error
}

// DeviceOpener maps a same-host peer's device segment into this process.
type DeviceOpener func(p Peer) (DeviceMemory, error)

// CopyDevice copies between the range of mem starting at off and the
// scatter list bufs: into mem when write, out of it otherwise. A range
// outside mem is an error and nothing is copied.
func CopyDevice(mem DeviceMemory, off uint64, bufs [][]byte, write bool) error {
	var total uint64
	for _, b := range bufs {
		total += uint64(len(b))
	}
	if !inRange(off, total, mem.Size()) {
		return wire.Errorf(wire.ErrInvalidParams, "range [%d,+%d) outside a device segment of %d bytes", off, total, mem.Size())
	}
	for _, b := range bufs {
		var err error
		if write {
			err = mem.CopyFrom(off, b)
		} else {
			err = mem.CopyTo(b, off)
		}
		if err != nil {
			return wire.Errorf(wire.ErrTransferFail, "device copy of %d bytes at %d: %v", len(b), off, err)
		}
		off += uint64(len(b))
	}
	return nil
}

// newIPCMaps opens same-host peers' GPU segments with open (nil: none can
// be opened; Route then never picks IPC).
func newIPCMaps(open DeviceOpener, log *slog.Logger) *peerMaps[DeviceMemory] {
	if open == nil {
		open = func(p Peer) (DeviceMemory, error) {
			return nil, transferErr("segment %d: no GPU driver to open it with", p.SegID)
		}
	}
	return newPeerMaps("open a same-host device segment", open, func(m DeviceMemory) { _ = m.Close() }, log)
}

// checkDevice validates op's device parts: a driver to move those on a
// GPU, each naming a distinct nil placeholder of Bufs, in ascending order.
func (e *Engine) checkDevice(op *Op) error {
	if len(op.Device) == 0 {
		return nil
	}
	if e.driver == nil && onGPU(op) {
		return wire.Errorf(wire.ErrInvalidParams, "device memory given, but no GPU driver is usable here")
	}
	last := -1
	for _, d := range op.Device {
		if d.Index <= last || d.Index >= len(op.Bufs) || op.Bufs[d.Index] != nil {
			return wire.Errorf(wire.ErrInvalidParams, "device part %d of a %d-part object", d.Index, len(op.Bufs))
		}
		last = d.Index
	}
	return nil
}

// copyMixed moves op, host and device parts, straight between the
// caller's memory and a segment the driver reaches: GPU memory (dev) or,
// when dev is nil, host memory (host), page-locked when op has GPU parts.
// One copy per part, none through the bounces, but for a part in another
// process's memory and a GPU segment: the host is between them.
func (e *Engine) copyMixed(host []byte, dev DeviceMemory, op *Op) error {
	size := uint64(len(host))
	if dev != nil {
		size = dev.Size()
	}
	total, _ := opLen(op)
	if !inRange(op.Offset, total, size) {
		return wire.Errorf(wire.ErrInvalidParams, "range [%d,+%d) outside segment %d of %d bytes",
			op.Offset, total, op.Peer.SegID, size)
	}
	off, next := op.Offset, 0 // next: the first device part not yet reached
	for k, b := range op.Bufs {
		var err error
		n := uint64(len(b))
		onDevice := next < len(op.Device) && op.Device[next].Index == k
		switch {
		case onDevice:
			d := op.Device[next]
			next++
			n = d.Size
			switch {
			case n == 0:
			case dev != nil && d.Pid != 0:
				err = e.processViaHost(dev, off, d, op.Write)
			case dev != nil && op.Write:
				err = dev.CopyFromDevice(off, d.Ptr, n)
			case dev != nil:
				err = dev.CopyToDevice(d.Ptr, off, n)
			case op.Write:
				err = e.fromPart(d, host[off:off+n])
			default:
				err = e.toPart(d, host[off:off+n])
			}
		case dev == nil:
			copyPart(host[off:], b, op.Write)
		default:
			e.beforeDeviceCopy(b)
			if op.Write {
				err = dev.CopyFrom(off, b)
			} else {
				err = dev.CopyTo(b, off)
			}
		}
		if err != nil {
			return wire.Errorf(wire.ErrTransferFail, "segment %d at %d: %v", op.Peer.SegID, off, err)
		}
		off += n
	}
	return nil
}

// processViaHost moves part d, in another process's memory, to or from
// [off, off+d.Size) of GPU segment dev through a bounce.
func (e *Engine) processViaHost(dev DeviceMemory, off uint64, d DevicePart, write bool) error {
	b := e.bounces.get(d.Size)
	defer e.bounces.put(b)
	if write {
		if err := e.fromPart(d, b.mem); err != nil {
			return err
		}
		return dev.CopyFrom(off, b.mem)
	}
	if err := dev.CopyTo(b.mem, off); err != nil {
		return err
	}
	return e.toPart(d, b.mem)
}

// addrOf is the address of b's first byte (b not empty).
func addrOf(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }

// Trim returns the prefix of a caller's scatter list (host parts bufs and
// device parts dev, laid out as in Op) that covers exactly size bytes: a
// read fills only the object's bytes of a larger destination. It fails
// with ErrInvalidParams when the list holds fewer bytes or dev does not
// name distinct nil placeholders of bufs in ascending order.
func Trim(bufs [][]byte, dev []DevicePart, size uint64) ([][]byte, []DevicePart, error) {
	last := -1
	for _, d := range dev {
		if d.Index <= last || d.Index >= len(bufs) || bufs[d.Index] != nil {
			return nil, nil, wire.Errorf(wire.ErrInvalidParams, "device part %d of a %d-part destination", d.Index, len(bufs))
		}
		last = d.Index
	}
	outB := make([][]byte, 0, len(bufs))
	var outD []DevicePart
	left, next := size, 0
	for k, b := range bufs {
		if left == 0 {
			break
		}
		if next < len(dev) && dev[next].Index == k {
			d := dev[next]
			next++
			d.Size = min(d.Size, left)
			d.Index = len(outB)
			left -= d.Size
			outB = append(outB, nil)
			outD = append(outD, d)
			continue
		}
		n := min(uint64(len(b)), left)
		outB = append(outB, b[:n])
		left -= n
	}
	if left > 0 {
		return nil, nil, wire.Errorf(wire.ErrInvalidParams, "destination smaller than the object's %d bytes", size)
	}
	return outB, outD, nil
}
