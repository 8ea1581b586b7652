// peers.go defines the cache of segment descriptors the client has resolved.

package client

import (
	"context"
	"sync"

	"github.com/gostore/gostore/gostore/transfer"
	"github.com/gostore/gostore/gostore/wire"
)

// peerCache maps master segment IDs to how to reach them. IDs are never
// reused by a master, so an entry never goes stale in meaning; it is dropped
// when a transfer to it fails so that the next use asks the master again.
type peerCache struct {
	mu     sync.RWMutex
	byID   map[uint64]transfer.Peer
	ownID  uint64
	own    []byte                // this client's segment memory, copied to directly
	ownDev transfer.DeviceMemory // or its GPU segment, copied to by the driver
}

func (p *peerCache) init() { p.byID = make(map[uint64]transfer.Peer) }

func (p *peerCache) setOwn(d wire.SegmentDesc, mem []byte, dev transfer.DeviceMemory) {
	p.mu.Lock()
	p.ownID, p.own, p.ownDev = d.ID, mem, dev
	p.byID[d.ID] = transfer.PeerFromDesc(d)
	p.mu.Unlock()
}

// isOwn reports whether id names this client's segment.
func (p *peerCache) isOwn(id uint64) bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return id == p.ownID && id != 0
}

// local returns this client's segment memory if id names it and it is
// host memory.
func (p *peerCache) local(id uint64) []byte {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if id == p.ownID && id != 0 {
		return p.own
	}
	return nil
}

// copyLocal copies between bufs and [off, ...) of this client's segment
// when id names it (into it when write); ok false when id is another's.
func (p *peerCache) copyLocal(id, off uint64, bufs [][]byte, write bool) (ok bool, err error) {
	p.mu.RLock()
	own, mem, dev := id == p.ownID && id != 0, p.own, p.ownDev
	p.mu.RUnlock()
	switch {
	case !own:
		return false, nil
	case dev != nil:
		return true, transfer.CopyDevice(dev, off, bufs, write)
	default:
		return true, transfer.CopyScatter(mem, off, bufs, write)
	}
}

func (p *peerCache) get(id uint64) (transfer.Peer, bool) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	peer, ok := p.byID[id]
	return peer, ok
}

func (p *peerCache) forget(id uint64) {
	p.mu.Lock()
	delete(p.byID, id)
	p.mu.Unlock()
}

// resolve makes sure every ID in ids is cached, asking the master once for
// all the unknown ones. IDs the master no longer knows stay unresolved.
func (c *Client) resolve(ctx context.Context, ids []uint64) error {
	var missing []uint64
	c.peers.mu.RLock()
	for _, id := range ids {
		if _, ok := c.peers.byID[id]; !ok {
			missing = append(missing, id)
		}
	}
	c.peers.mu.RUnlock()
	if len(missing) == 0 {
		return nil
	}
	var resp wire.QuerySegmentsResp
	if err := c.master.Call(ctx, wire.OpQuerySegments, &wire.QuerySegmentsReq{IDs: missing}, &resp); err != nil {
		return err
	}
	c.peers.mu.Lock()
	for _, d := range resp.Segs {
		c.peers.byID[d.ID] = transfer.PeerFromDesc(d)
	}
	c.peers.mu.Unlock()
	return nil
}

// copyLocal is peerCache.copyLocal, with the registered buffers among
// bufs page-locked first when the own segment is on a GPU.
func (c *Client) copyLocal(id, off uint64, bufs [][]byte, write bool) (ok bool, err error) {
	c.peers.mu.RLock()
	onGPU := id == c.peers.ownID && id != 0 && c.peers.ownDev != nil
	c.peers.mu.RUnlock()
	if onGPU {
		for _, b := range bufs {
			c.pinRegistered(b)
		}
	}
	return c.peers.copyLocal(id, off, bufs, write)
}

// failed forgets a segment after a transfer to it failed.
func (c *Client) failed(id uint64) {
	if c.peers.isOwn(id) {
		return
	}
	c.peers.forget(id)
	c.engine.Forget(id)
}
