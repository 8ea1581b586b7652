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

func (it PutItem) size() uint64 {
	var n uint64
	for _, p := range it.Parts {
		n += uint64(len(p))
	}
	return n
}

// PutBatch stores each item with one PutStart and one PutEnd for the whole
// batch. Result i is OK (also when the key already existed: put never
// overwrites) or the item's error code. Invalid items (empty key or value)
// get -600 and do not stop the others.
func (c *Client) PutBatch(items []PutItem, cfg wire.ReplicaConfig) []wire.Code {
	out := make([]wire.Code, len(items))
	if err := c.checkOpen(); err != nil {
		return fill(out, wire.CodeOf(err))
	}
	ctx, cancel := c.ctx()
	defer cancel()

	// Phase 1: ask the master where to write the valid items.
	idx := make([]int, 0, len(items))
	req := wire.PutStartReq{ClientID: c.id, Config: cfg, HostID: transfer.HostID()}
	for i, it := range items {
		size := it.size()
		if it.Key == "" || size == 0 {
			c.log.Warn("put rejected: empty key or value", "key", it.Key, "size", size)
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
	var resp wire.PutStartResp
	if err := c.master.Call(ctx, wire.OpPutStart, &req, &resp); err != nil || len(resp.Results) != len(idx) {
		c.log.Warn("PutStart failed", "keys", len(idx), "err", err)
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
		writing[i] = true
		for _, rep := range r.Replicas {
			if mem := c.peers.local(rep.SegID); mem != nil {
				if !copyInto(mem, rep.Offset, items[i].Parts) {
					out[i] = wire.ErrInvalidParams
				}
				continue
			}
			peer, ok := c.peers.get(rep.SegID)
			if !ok {
				c.log.Warn("put: replica on an unknown segment", "key", items[i].Key, "segment", rep.SegID, "err", resolveErr)
				out[i] = wire.ErrSegmentNotFound
				continue
			}
			ops = append(ops, transfer.Op{Peer: peer, Offset: rep.Offset, Bufs: items[i].Parts, Write: true})
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
	var done, revoke []string
	var doneIdx []int
	for i, w := range writing {
		if !w {
			continue
		}
		if out[i] == wire.OK {
			done = append(done, items[i].Key)
			doneIdx = append(doneIdx, i)
		} else {
			revoke = append(revoke, items[i].Key)
		}
	}
	c.finishPuts(ctx, done, doneIdx, revoke, out)
	return out
}

// finishPuts sends PutEnd and PutRevoke concurrently.
func (c *Client) finishPuts(ctx context.Context, done []string, doneIdx []int, revoke []string, out []wire.Code) {
	var wg sync.WaitGroup
	if len(revoke) > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var r wire.CodesResp
			if err := c.master.Call(ctx, wire.OpPutRevoke, &wire.KeysReq{ClientID: c.id, Keys: revoke}, &r); err != nil {
				c.log.Warn("PutRevoke failed; the master reclaims the space later", "keys", len(revoke), "err", err)
			}
		}()
	}
	if len(done) > 0 {
		var r wire.CodesResp
		err := c.master.Call(ctx, wire.OpPutEnd, &wire.KeysReq{ClientID: c.id, Keys: done}, &r)
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

// copyInto copies parts contiguously into mem at off; false if out of range.
func copyInto(mem []byte, off uint64, parts [][]byte) bool {
	for _, p := range parts {
		if off > uint64(len(mem)) || uint64(len(p)) > uint64(len(mem))-off {
			return false
		}
		off += uint64(copy(mem[off:], p))
	}
	return true
}

// copyOut fills parts from mem at off; false if out of range.
func copyOut(mem []byte, off uint64, parts [][]byte) bool {
	for _, p := range parts {
		if off > uint64(len(mem)) || uint64(len(p)) > uint64(len(mem))-off {
			return false
		}
		off += uint64(copy(p, mem[off:]))
	}
	return true
}

func fill(out []wire.Code, c wire.Code) []wire.Code {
	for i := range out {
		out[i] = c
	}
	return out
}
