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
	mu    sync.RWMutex
	byID  map[uint64]transfer.Peer
	ownID uint64
	own   []byte // this client's segment memory, copied to directly
}

func (p *peerCache) init() { p.byID = make(map[uint64]transfer.Peer) }

func (p *peerCache) setOwn(d wire.SegmentDesc, mem []byte) {
	p.mu.Lock()
	p.ownID, p.own = d.ID, mem
	p.byID[d.ID] = transfer.PeerFromDesc(d)
	p.mu.Unlock()
}

// local returns this client's segment memory if id names it.
func (p *peerCache) local(id uint64) []byte {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if id == p.ownID && id != 0 {
		return p.own
	}
	return nil
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

// failed forgets a segment after a transfer to it failed.
func (c *Client) failed(id uint64) {
	if c.peers.local(id) != nil {
		return
	}
	c.peers.forget(id)
	c.engine.Forget(id)
}
