// peers.go defines the cache of segment descriptors the client has resolved.

package client

import (
	"bytes"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/gostore/gostore/gostore/transfer"
	"github.com/gostore/gostore/gostore/wire"
)

// peerCache maps master segment IDs to how to reach them. IDs are never
// reused by a master, so an entry never goes stale in meaning; it is dropped
// when a transfer to it fails so that the next use asks the master again.
// The own segment is an entry like the others: the engine routes it.
type peerCache struct {
	mu   sync.RWMutex
	byID map[uint64]transfer.Peer
	// descs is what the master said of each segment, for replica
	// descriptors: every one byID holds, and those a failed op dropped
	// from byID (forgetStale) since, whose engine state (mapping,
	// connections, UCX endpoint) prunePeers lets go once the master drops
	// the segment.
	descs  map[uint64]wire.SegmentDesc
	ownID  uint64 // this client's segment, 0 before its mount
	engine *transfer.Engine
}

func (p *peerCache) init(e *transfer.Engine) {
	p.byID = make(map[uint64]transfer.Peer)
	p.descs = make(map[uint64]wire.SegmentDesc)
	p.engine = e
}

// setOwn records this client's segment, mem its host memory or dev its GPU
// memory, and hands it to the engine.
func (p *peerCache) setOwn(d wire.SegmentDesc, mem []byte, dev transfer.DeviceMemory) {
	p.mu.Lock()
	p.byID[d.ID] = transfer.PeerFromDesc(d)
	p.descs[d.ID] = d
	p.ownID = d.ID
	p.mu.Unlock()
	p.engine.SetOwn(d.ID, mem, dev)
}

// isOwn reports whether id names this client's segment.
func (p *peerCache) isOwn(id uint64) bool { return p.engine.IsOwn(id) }

// local returns this client's segment memory if id names it and it is
// host memory.
func (p *peerCache) local(id uint64) []byte {
	if !p.engine.IsOwn(id) {
		return nil
	}
	peer, _ := p.get(id)
	mem, _ := p.engine.Mapping(peer)
	return mem
}

// desc returns what the master said of segment id, if it is cached.
func (p *peerCache) desc(id uint64) (wire.SegmentDesc, bool) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	d, ok := p.descs[id]
	return d, ok
}

func (p *peerCache) get(id uint64) (transfer.Peer, bool) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	peer, ok := p.byID[id]
	return peer, ok
}

// forgetStale forgets how to reach segment id if what is cached of it
// still carries the UCX desc ucx (none for a segment reached without
// UCX): another call may have cached the master's newer one. What the
// master said of the segment (descs) stays, for replica descriptors: a
// failed op changes none of its place or name, and a lookup of it after
// resolve must not come back empty; the next resolve replaces it, and
// prunePeers drops it once the segment is gone.
func (p *peerCache) forgetStale(id uint64, ucx []byte) {
	p.mu.Lock()
	if peer, ok := p.byID[id]; ok && bytes.Equal(peer.UCX, ucx) {
		delete(p.byID, id)
	}
	p.mu.Unlock()
}

func (p *peerCache) forget(id uint64) {
	p.mu.Lock()
	delete(p.byID, id)
	delete(p.descs, id)
	p.mu.Unlock()
}

// resolve returns how to reach each segment of ids, caching it, and asks
// the master once for all the ones not cached. IDs the master no longer
// knows are left out. Callers use what it returns, not the cache: another
// call whose op failed may drop a segment from the cache at any moment
// (opFailed), and a lookup there after resolve would then find nothing.
func (c *core) resolve(ctx context.Context, ids []uint64) (map[uint64]transfer.Peer, error) {
	// ids has one entry per replica: each segment is looked up, and asked
	// for, once.
	known := map[uint64]transfer.Peer{}
	var missing []uint64
	c.peers.mu.RLock()
	for _, id := range ids {
		if _, ok := known[id]; ok {
			continue
		}
		if p, ok := c.peers.byID[id]; ok {
			known[id] = p
		} else if !slices.Contains(missing, id) {
			missing = append(missing, id)
		}
	}
	c.peers.mu.RUnlock()
	if len(missing) == 0 {
		return known, nil
	}
	var resp wire.QuerySegmentsResp
	if err := c.master.Call(ctx, wire.OpQuerySegments, &wire.QuerySegmentsReq{IDs: missing}, &resp); err != nil {
		return known, err
	}
	c.peers.mu.Lock()
	for _, d := range resp.Segs {
		p := transfer.PeerFromDesc(d)
		c.peers.byID[d.ID] = p
		c.peers.descs[d.ID] = d
		known[d.ID] = p
	}
	c.peers.mu.Unlock()
	return known, nil
}

// peerPruneInterval is how often the heartbeat asks the master which of
// the cached segments, and of those a failed op dropped, it still knows
// (prunePeers).
const peerPruneInterval = 2 * time.Second

// prunePeers forgets the segments the master no longer knows, cached or
// dropped from the cache by a failed op (the engine may still hold
// them): a dead or departed peer's, dropped after client_ttl or its
// unmount. A same-host peer's memory is mapped into this process, and no
// transfer fails over shared memory to tell us it is gone: without this,
// each peer that ever left kept its whole segment allocated here. The own
// segment is never forgotten. An error (the master unreachable) prunes
// nothing.
func (c *core) prunePeers(ctx context.Context) {
	c.peers.mu.RLock()
	ids := make([]uint64, 0, len(c.peers.descs)) // the cached segments and those a failed op dropped
	for id := range c.peers.descs {
		if id != c.peers.ownID {
			ids = append(ids, id)
		}
	}
	c.peers.mu.RUnlock()
	if len(ids) == 0 {
		return
	}
	var resp wire.QuerySegmentsResp
	if err := c.master.Call(ctx, wire.OpQuerySegments, &wire.QuerySegmentsReq{IDs: ids}, &resp); err != nil {
		return
	}
	known := make(map[uint64]bool, len(resp.Segs))
	for _, d := range resp.Segs {
		known[d.ID] = true
	}
	for _, id := range ids {
		if !known[id] {
			c.log.Debug("forgetting a segment the master dropped", "segment", id)
			c.segmentGone(id)
		}
	}
}

// opFailed drops what an op's final failure in transfer (after
// doRefreshing's one retry) shows to be unusable, and only that: the
// segment's cached desc, if it is still the one the op carried (another
// call may have cached the master's newer one), so that the next use asks
// the master again. The engine keeps its connections and endpoints: the
// one that failed is already gone (a broken TCP stream drops itself from
// its pool; the UCX worker drops an endpoint that failed or stalled), and
// the others may carry other calls' transfers at this moment. Forget
// would cut those short: it closes the whole connection pool to the
// peer's transfer server, and force-closes the segment's UCX endpoint and
// clears the worker's record of a peer it took as gone (see ucx.GoneFor),
// so the next call would stall on it again. An op the engine refused (a
// bad range, bad device parts, a grant) says nothing about the segment.
// The own segment stays.
func (c *core) opFailed(op *transfer.Op, err error) {
	if wire.CodeOf(err) != wire.ErrTransferFail || c.peers.isOwn(op.Peer.SegID) {
		return
	}
	c.peers.forgetStale(op.Peer.SegID, op.Peer.UCX)
}

// segmentGone forgets a segment the master no longer knows, here and in
// the engine (its mapping, connections and UCX endpoint).
func (c *core) segmentGone(id uint64) {
	if c.peers.isOwn(id) {
		return
	}
	c.peers.forget(id)
	c.engine.Forget(id)
}

// doRefreshing runs ops with do and then, once, each op that failed over
// the UCX route because the desc it carried is stale: its owner remounted
// the segment (the heartbeat's remount after a master restart or
// failover keeps the segment's id but exposes the memory afresh, so the
// old desc's canary or worker refuses every op). Such an op's segment is
// forgotten and asked of the master again, and the op goes once more to
// the desc the master now gives, when that desc differs from the one that
// failed; the same desc means the owner is dead or unreachable, not
// remounted, and the error stands. Only the route changes: the op's
// segment, offset and grant are the master's answer that the caller
// holds, so a retry reads or writes the same range of the same object.
// A second failure is returned as it is, for the caller (opFailed), and
// ops[k] is left as last tried (the new desc after a retry), so opFailed
// drops the desc that failed last. A nil do is the engine's Do.
func (c *core) doRefreshing(ctx context.Context, ops []transfer.Op, do func([]transfer.Op) []error) []error {
	if do == nil {
		do = func(ops []transfer.Op) []error { return c.engine.Do(ctx, ops) }
	}
	errs := do(ops)
	var stale []int
	var ids []uint64
	for k, err := range errs {
		op := &ops[k]
		if wire.CodeOf(err) != wire.ErrTransferFail || len(op.Peer.UCX) == 0 ||
			c.engine.Route(op.Peer) != transfer.RouteUCX {
			continue
		}
		// Only the cached desc goes: the UCX worker already dropped the
		// failed endpoint, and the engine's Forget would drop the
		// segment's current one too, cutting short the ops that other
		// calls are retrying on it.
		c.peers.forgetStale(op.Peer.SegID, op.Peer.UCX)
		if !slices.Contains(ids, op.Peer.SegID) {
			ids = append(ids, op.Peer.SegID)
		}
		stale = append(stale, k)
	}
	if len(stale) == 0 {
		return errs
	}
	known, _ := c.resolve(ctx, ids) // a segment the master no longer knows is not retried
	again := make([]transfer.Op, 0, len(stale))
	at := make([]int, 0, len(stale))
	for _, k := range stale {
		peer, ok := known[ops[k].Peer.SegID]
		if !ok || bytes.Equal(peer.UCX, ops[k].Peer.UCX) {
			continue
		}
		op := ops[k]
		op.Peer = peer
		again = append(again, op)
		at = append(at, k)
	}
	if len(again) == 0 {
		return errs
	}
	c.log.Info("transfer: a segment's UCX descriptor was stale (its owner remounted it); retrying once with the master's new one",
		"segments", ids, "ops", len(again))
	for j, err := range do(again) {
		errs[at[j]] = err
		ops[at[j]].Peer = again[j].Peer
	}
	return errs
}
