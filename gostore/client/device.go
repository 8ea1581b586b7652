// device.go lets callers hand the data path GPU memory: objects whose parts
// live on a device (DevicePart) and the Driver through which the transfer
// engine moves them (gostore/gpu). Where such a part goes, GPU to GPU or
// staged through pinned host memory, is the engine's decision.

package client

import (
	"github.com/gostore/gostore/gostore/gpu"
	"github.com/gostore/gostore/gostore/transfer"
	"github.com/gostore/gostore/gostore/wire"
)

// DevicePart is a piece of a caller's object in GPU memory: part Index of
// the object's scatter list (left nil there) is Size bytes at device
// address Ptr on GPU Device.
type DevicePart = transfer.DevicePart

// DeviceOf returns the GPU holding ptr, or -1 for host memory (and always
// -1 without a CUDA driver).
func DeviceOf(ptr uint64) int {
	if k, dev := gpu.PointerKind(ptr); k == gpu.DeviceMem {
		return dev
	}
	return -1
}

// gpuDriver is the Driver the transfer engine reaches GPUs through: the
// CUDA driver, loaded by gostore/gpu on first use.
type gpuDriver struct{}

func (gpuDriver) NewPinned(n uint64) (transfer.Pinned, error) { return gpu.NewPinned(n) }
func (gpuDriver) Pin(addr, size uint64) error                 { return gpu.Pin(addr, size) }
func (gpuDriver) Unpin(addr uint64) error                     { return gpu.Unpin(addr) }

func (gpuDriver) CopyToHost(device int, host, dev, n uint64) error {
	return gpu.CopyToHost(device, host, dev, n)
}

func (gpuDriver) CopyToDevice(device int, dev, host, n uint64) error {
	return gpu.CopyToDevice(device, dev, host, n)
}

func (gpuDriver) OpenPeer(p transfer.Peer) (transfer.DeviceMemory, error) { return openPeerDevice(p) }

func hostAddr(b []byte) uint64 { return uint64(addrOf(b)) }

// PutBatchDevice is PutBatch (upsert: UpsertBatch) for items whose parts
// may be device memory: dev[i] lists item i's, left nil in its Parts.
func (c *Writes) PutBatchDevice(items []PutItem, dev [][]DevicePart, cfg wire.ReplicaConfig, upsert bool) []wire.Code {
	start := wire.OpPutStart
	if upsert {
		start = wire.OpUpsertStart
	}
	for i := range items {
		if i < len(dev) {
			items[i].Device = dev[i]
		}
	}
	return c.write(start, items, cfg)
}

// GetFinishDevice is GetFinish for destinations whose parts may be device
// memory: dev[i] lists object i's, left nil in dests[i].
func (c *Reads) GetFinishDevice(p *Pending, dests [][][]byte, dev [][]DevicePart) []int64 {
	leave, err := c.enter()
	if err != nil {
		c.ends.endReads(p)
		return wire.Fill(make([]int64, len(p.res)), int64(wire.CodeOf(err)))
	}
	defer leave()
	return c.finish(p, dests, dev)
}
