// put.go defines the put pipeline: PutStart, transfers, PutEnd/PutRevoke.
package client

import (
	"context"
	"sync"

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
	var resp wire.PutStartResp
	if err := c.master.Call(ctx, start, &req, &resp); err != nil || len(resp.Results) != len(idx) {
		c.log.Warn("write start failed", "op", start.String(), "keys", len(idx), "err", err)
		code := wire.CodeOf(err)
		if err == nil {
			code = wire.ErrRPCFail
		}
		for _, i := range idx {
			out[i] = code
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
