// put.go defines the put pipeline: PutStart, transfers, PutEnd/PutRevoke.
package client

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gostore/gostore/gostore/transfer"
	"github.com/gostore/gostore/gostore/wire"
)

// PutItem is one object to store: the concatenation of Parts. The caller
// owns Parts and keeps them valid until PutBatch returns.
type PutItem struct {
	Key   string
	Parts [][]byte
}

func (it PutItem) size() uint64 { return capacity(it.Parts) }

// PutBatch stores each item with one PutStart and one PutEnd for the whole
// batch. Result i is OK (also when the key already existed: put never
// overwrites) or the item's error code. Invalid items (empty key or value)
// get -600 and do not stop the others.
func (c *Client) PutBatch(items []PutItem, cfg wire.ReplicaConfig) []wire.Code {
	return c.write(wire.OpPutStart, items, cfg, nil)
}

// UpsertBatch inserts or replaces each item (see master.Core.UpsertStart):
// the same pipeline as PutBatch with UpsertStart as its first phase.
func (c *Client) UpsertBatch(items []PutItem, cfg wire.ReplicaConfig) []wire.Code {
	return c.write(wire.OpUpsertStart, items, cfg, nil)
}

// write runs the three-phase write pipeline with start (PutStart or
// UpsertStart) as its first phase. m carries the items' device parts (nil
// when there are none).
func (c *Client) write(start wire.Op, items []PutItem, cfg wire.ReplicaConfig, m *mixedCall) []wire.Code {
	out := make([]wire.Code, len(items))
	leave, err := c.enter()
	if err != nil {
		m.release()
		return wire.Fill(out, wire.CodeOf(err))
	}
	defer leave()
	defer m.release() // the bounces go back before Close may take the pool
	ctx, cancel := c.ctx()
	defer cancel()

	// Phase 1: ask the master where to write the valid items.
	idx := make([]int, 0, len(items))
	req := wire.PutStartReq{ClientID: c.id, Config: cfg, HostID: transfer.HostID()}
	for i, it := range items {
		size := it.size() + m.devBytes(i)
		if it.Key == "" || size == 0 {
			c.log.Warn("write rejected: empty key or value", "op", start.String(), "key", it.Key, "size", size)
			out[i] = wire.ErrInvalidParams
			continue
		}
		idx = append(idx, i)
		req.Keys = append(req.Keys, it.Key)
		req.Sizes = append(req.Sizes, size)
	}
	if len(idx) == 0 {
		return out
	}
	if start == wire.OpUpsertStart {
		// This client's finished reads must not make its own upsert busy.
		c.readsDone.flush(c.master, c.id, c.log)
	}
	resp, err := c.startWrite(ctx, start, &req)
	if err != nil {
		c.log.Warn("write start failed", "op", start.String(), "keys", len(idx), "err", err)
		for _, i := range idx {
			out[i] = wire.CodeOf(err)
		}
		return out
	}

	// Phase 2: write every replica straight from the caller's buffers.
	var ids []uint64
	for _, r := range resp.Results {
		for _, rep := range r.Replicas {
			ids = append(ids, rep.SegID)
		}
	}
	resolveErr := c.resolve(ctx, ids)
	var ops []transfer.Op
	var opItem []int // ops[k] writes items[opItem[k]]
	var opSeg []uint64
	writing := make([]bool, len(items))
	epochs := make([]uint64, len(items))
	for j, r := range resp.Results {
		i := idx[j]
		switch r.Code {
		case wire.OK:
		case wire.ErrObjectAlreadyExists:
			continue // put does not overwrite; the contract calls this success
		default:
			out[i] = r.Code
			continue
		}
		writing[i], epochs[i] = true, r.Epoch
		for _, rep := range r.Replicas {
			parts := items[i].Parts
			if m.has(i) {
				ok, err := m.direct(i, rep.SegID, rep.Offset, parts, 0, true)
				if !ok {
					parts, err = m.hostParts(i, parts, true)
				}
				if err != nil {
					c.log.Warn("put: device memory", "key", items[i].Key, "segment", rep.SegID, "err", err)
					out[i] = wire.CodeOf(err)
				}
				if ok || err != nil {
					continue
				}
			}
			if ok, err := c.copyLocal(rep.SegID, rep.Offset, parts, true); ok {
				if err != nil {
					c.log.Warn("put: copy into the own segment failed", "key", items[i].Key, "err", err)
					out[i] = wire.CodeOf(err)
				}
				continue
			}
			peer, ok := c.peers.get(rep.SegID)
			if !ok {
				c.log.Warn("put: replica on an unknown segment", "key", items[i].Key, "segment", rep.SegID, "err", resolveErr)
				out[i] = wire.ErrSegmentNotFound
				continue
			}
			ops = append(ops, transfer.Op{Peer: peer, Offset: rep.Offset, Bufs: parts, Write: true})
			opItem = append(opItem, i)
			opSeg = append(opSeg, rep.SegID)
		}
	}
	if len(ops) > 0 {
		for k, err := range c.engine.Do(ctx, ops) {
			if err != nil {
				i := opItem[k]
				c.log.Warn("put: transfer failed", "key", items[i].Key, "segment", opSeg[k], "err", err)
				out[i] = wire.CodeOf(err)
				c.failed(opSeg[k])
			}
		}
	}

	// Phase 3: publish what was written, revoke what was not.
	done := wire.KeysReq{ClientID: c.id}
	revoke := wire.KeysReq{ClientID: c.id}
	var doneIdx []int
	for i, w := range writing {
		switch {
		case !w:
		case out[i] == wire.OK:
			done.Keys, done.Epochs = append(done.Keys, items[i].Key), append(done.Epochs, epochs[i])
			doneIdx = append(doneIdx, i)
		default:
			revoke.Keys, revoke.Epochs = append(revoke.Keys, items[i].Key), append(revoke.Epochs, epochs[i])
		}
	}
	c.finishWrites(ctx, &done, doneIdx, &revoke, out)
	return out
}

// finishWrites sends PutEnd and PutRevoke concurrently.
func (c *Client) finishWrites(ctx context.Context, done *wire.KeysReq, doneIdx []int, revoke *wire.KeysReq, out []wire.Code) {
	var wg sync.WaitGroup
	if len(revoke.Keys) > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var r wire.CodesResp
			if err := c.master.Call(ctx, wire.OpPutRevoke, revoke, &r); err != nil {
				c.log.Warn("PutRevoke failed; the master reclaims the space later", "keys", len(revoke.Keys), "err", err)
			}
		}()
	}
	if len(done.Keys) > 0 {
		var r wire.CodesResp
		err := c.master.Call(ctx, wire.OpPutEnd, done, &r)
		for k, i := range doneIdx {
			switch {
			case err != nil:
				out[i] = wire.CodeOf(err)
			case k < len(r.Codes):
				out[i] = r.Codes[k]
			default:
				out[i] = wire.ErrRPCFail
			}
		}
	}
	wg.Wait()
}

// Backoff between the attempts of a put waiting for room: the first comes
// soon (an eviction pass runs every master tick), later ones no faster than
// a tick.
const (
	spaceRetryFirst = 2 * time.Millisecond
	spaceRetryMax   = 100 * time.Millisecond
)

// startWrite asks the master for room (PutStart or UpsertStart). Keys it
// refuses for lack of space while saying room is on its way (eviction is
// freeing it, or objects wait for their disk copies) are asked for again
// until Config.PutSpaceWait passes; keys refused before an eviction pass
// looked are asked for again until one has. The first refusal of a burst
// is logged with the master's reason.
func (c *Client) startWrite(ctx context.Context, start wire.Op, req *wire.PutStartReq) (*wire.PutStartResp, error) {
	var resp wire.PutStartResp
	if err := c.master.Call(ctx, start, req, &resp); err != nil {
		return nil, err
	}
	if len(resp.Results) != len(req.Keys) {
		return nil, wire.Errorf(wire.ErrRPCFail, "%s answered %d results for %d keys", start, len(resp.Results), len(req.Keys))
	}
	began := time.Now()
	deadline := began.Add(c.cfg.PutSpaceWait)
	backoff := spaceRetryFirst
	var firstPass []uint64 // the master's pass count at each key's first refusal
	for c.cfg.PutSpaceWait > 0 {
		var again []int
		for j, r := range resp.Results {
			ns := r.NoSpace
			if r.Code != wire.ErrNoAvailableHandle || ns == nil {
				continue
			}
			if firstPass == nil {
				firstPass = make([]uint64, len(resp.Results))
				for k, r := range resp.Results {
					if r.NoSpace != nil {
						firstPass[k] = r.NoSpace.Passes
					}
				}
			}
			if ns.Space == wire.SpaceComing || ns.Space == wire.SpaceUnknown && ns.Passes == firstPass[j] {
				again = append(again, j)
			}
		}
		left := time.Until(deadline)
		if len(again) == 0 || left <= 0 {
			break
		}
		if c.ssd != nil {
			// Room may be waiting for this client's own tier to persist
			// objects: run its offload heartbeat now, not at the next ping.
			c.ssd.kick()
		}
		t := time.NewTimer(min(backoff, left))
		select {
		case <-t.C:
		case <-ctx.Done():
		case <-c.stop:
		}
		t.Stop()
		if ctx.Err() != nil || c.closed.Load() {
			break
		}
		backoff = min(2*backoff, spaceRetryMax)
		sub := wire.PutStartReq{ClientID: req.ClientID, Config: req.Config, HostID: req.HostID}
		for _, j := range again {
			sub.Keys, sub.Sizes = append(sub.Keys, req.Keys[j]), append(sub.Sizes, req.Sizes[j])
		}
		var r wire.PutStartResp
		if err := c.master.Call(ctx, start, &sub, &r); err != nil || len(r.Results) != len(again) {
			break // the refusals stand
		}
		for k, j := range again {
			resp.Results[j] = r.Results[k]
		}
	}
	c.noSpace.note(c.log, start, req, resp.Results, time.Since(began))
	return &resp, nil
}

// noSpaceLog logs the first put of a burst refused for space, with the
// master's reason, and how many more were refused once one succeeds.
type noSpaceLog struct {
	burst   atomic.Bool // inBurst, read without the lock by every put
	mu      sync.Mutex
	inBurst bool
	more    int
}

func (l *noSpaceLog) note(log interface {
	Warn(string, ...any)
	Info(string, ...any)
}, op wire.Op, req *wire.PutStartReq, results []wire.PutStartResult, waited time.Duration) {
	first, refused, stored := -1, 0, false
	for j, r := range results {
		switch r.Code {
		case wire.ErrNoAvailableHandle:
			refused++
			if first < 0 {
				first = j
			}
		case wire.OK:
			stored = true
		}
	}
	if first < 0 && (!stored || !l.burst.Load()) {
		return // nothing refused, and no burst to end: the common put
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	defer func() { l.burst.Store(l.inBurst) }()
	if stored && l.inBurst && first < 0 {
		if l.more > 0 {
			log.Info("puts find space again", "refused_since_logged", l.more)
		}
		l.inBurst, l.more = false, 0
	}
	if first < 0 {
		return
	}
	if l.inBurst {
		l.more += refused
		return
	}
	l.inBurst, l.more = true, refused-1
	log.Warn("no space for a put (-200 NO_AVAILABLE_HANDLE); later refusals are counted, not logged, until a put finds space",
		"op", op.String(), "key", req.Keys[first], "size", req.Sizes[first], "reason", why(results[first]),
		"waited", waited.Round(time.Millisecond), "refused_in_batch", refused)
}

// why is a refusal's reason, as the master gave it.
func why(r wire.PutStartResult) string {
	if r.NoSpace == nil {
		return "the master gave none"
	}
	return r.NoSpace.Why
}
