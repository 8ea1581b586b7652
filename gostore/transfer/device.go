// device.go defines DeviceMemory, segment memory on a GPU that host code
// cannot address, and the Engine's IPC path: a same-host peer's device
// segment opened from its IPC handle and copied to by the driver.

package transfer

import (
	"log/slog"

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

// DeviceOpener maps a same-host peer's device segment (Peer.IPC) into this
// process. The client supplies it (gostore/gpu), so this package needs no
// driver.
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

// newIPCMaps opens same-host peers' GPU segments with open.
func newIPCMaps(open DeviceOpener, log *slog.Logger) *peerMaps[DeviceMemory] {
	return newPeerMaps("open a same-host device segment", open, func(m DeviceMemory) { _ = m.Close() }, log)
}
