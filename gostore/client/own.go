// own.go defines ownSegment: the segment setup contributes
// (global_segment_size), its transfer server, and its mount at the master.

package client

import (
	"context"
	"net"
	"time"

	"github.com/gostore/gostore/gostore/gpu"
	"github.com/gostore/gostore/gostore/transfer"
	"github.com/gostore/gostore/gostore/wire"
)

// ownSegment is the segment this client contributes at setup (host
// memory, or a GPU's), the transfer server that serves it, its UCX
// exposure, and its mount at the master (at setup, taking over a dead
// predecessor's name, and again whenever the master forgot it). The
// segment and server are set once by New. Locks: exposure's (segExposure,
// ucx.go), held by each mount from the expose to the master's answer and
// by the revoke Close makes before the memory goes.
type ownSegment struct {
	*core
	seg    *transfer.LocalSegment // nil for a pure consumer or a GPU segment
	devSeg *gpu.Segment           // the segment when it lives on a GPU
	server *transfer.Server
	// exposure is the segment's UCX exposure (ucx.go): its lock orders
	// each mount against the revoke before the memory goes.
	exposure segExposure
}

// newSegment creates the contributed memory, host or GPU, and the
// transfer server that serves it on ln.
func (c *ownSegment) newSegment(ln net.Listener) error {
	size := c.cfg.GlobalSegmentSize
	dev, _ := parseLocation(c.cfg.SegmentLocation)
	if dev < 0 {
		var err error
		if c.seg, err = transfer.NewLocalSegment(c.hostname, size); err != nil {
			return wire.Errorf(wire.ErrInternal, "segment of %d bytes: %v", size, err)
		}
		c.server = c.serving(transfer.NewServer(ln, c.seg.Bytes(), c.log))
		return nil
	}
	if info := gpu.Probe(); !info.Available {
		return wire.Errorf(wire.ErrInvalidParams, "segment_location cuda:%d: %s", dev, info.Reason)
	}
	var err error
	if c.devSeg, err = gpu.NewSegment(dev, size); err != nil {
		return wire.Errorf(wire.ErrInvalidParams, "a segment of %d bytes on cuda:%d: %v", size, dev, err)
	}
	c.server = c.serving(transfer.NewDeviceServer(ln, c.devSeg, c.log))
	return nil
}

// takeoverWait bounds how long setup asks again for a segment name that
// the master says another client holds: a predecessor of the same name
// that died (SIGKILL, a pod restart) was heard from at most a ping
// interval before; the master hands its segment over once it has been
// silent for its takeover silence (1 s by default). A live holder keeps
// the name and setup fails with -102.
const takeoverWait = 3 * time.Second

// mountTakingOver is setup's mount: a name the master says is held is
// asked for again until takeoverWait passes. This client has bound the
// name's host:port, so a holder on this host is dead; the master judges
// by the holder's silence.
func (c *ownSegment) mountTakingOver(ctx context.Context) error {
	deadline := time.Now().Add(takeoverWait)
	for {
		err := c.mountQuiet(ctx)
		if err == nil || wire.CodeOf(err) != wire.ErrSegmentAlreadyExists || time.Now().After(deadline) {
			if err != nil {
				c.log.Error("mount segment failed", "name", c.hostname, "err", err)
			}
			return err
		}
		select {
		case <-ctx.Done():
			c.log.Error("mount segment failed", "name", c.hostname, "err", err)
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (c *ownSegment) mount(ctx context.Context) error {
	err := c.mountQuiet(ctx)
	if err != nil {
		c.log.Error("mount segment failed", "name", c.hostname, "err", err)
	}
	return err
}

// mountQuiet mounts the segment; the caller logs a failure.
func (c *ownSegment) mountQuiet(ctx context.Context) error {
	var mem []byte
	var dev transfer.DeviceMemory
	describe := func() (wire.SegmentDesc, error) {
		desc := wire.SegmentDesc{
			Name: c.hostname, ClientID: c.id, HostID: transfer.HostID(),
			TransferAddr: c.server.Addr().String(), Offload: c.ssd != nil && !c.ssd.Unmounted(),
		}
		if c.devSeg != nil {
			h, err := c.devSeg.Handle()
			if err != nil {
				return desc, wire.Errorf(wire.ErrInternal, "IPC handle of the GPU segment: %v", err)
			}
			desc.Size, desc.Location, desc.IPC = c.devSeg.Size(), location(c.devSeg.Device()), h[:]
			if d := c.devSeg.Device(); d < len(gpu.Probe().Devices) {
				desc.GPUPCI = gpu.Probe().Devices[d].PCI
			}
			dev = c.devSeg
			desc.Base = c.devSeg.Base()
		} else {
			desc.Size, desc.ShmPath = c.seg.Size(), c.seg.ShmPath()
			mem = c.seg.Bytes()
			desc.Base = uint64(addrOf(mem))
		}
		return desc, nil
	}
	return c.exposure.mount(c.ucx, c.devSeg != nil, c.log, describe, func(desc wire.SegmentDesc) error {
		// A remount may bring a new id, which the master's grants name
		// before the answer arrives here: the server takes grants for
		// any id of this segment (its key is this segment's alone) until
		// it knows.
		c.server.SetSegID(0)
		var resp wire.MountResp
		if err := c.master.Call(ctx, wire.OpMountSegment, &wire.MountReq{Seg: desc, GrantKey: c.server.GrantKey()}, &resp); err != nil {
			return err
		}
		desc.ID = resp.SegID
		c.server.SetSegID(desc.ID)
		c.peers.setOwn(desc, mem, dev)
		return nil
	})
}
