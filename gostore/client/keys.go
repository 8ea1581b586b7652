// keys.go defines Keys: the calls about objects that move no bytes
// (exist, size, remove, replica descriptors and clears).

package client

import (
	"github.com/gostore/gostore/gostore/wire"
)

// Keys asks the master about objects and removes them; it moves no bytes
// and owns no state. It takes no lock of its own: a call reads only core
// (its checkOpen, ctx and the master's connection) and, for sizes and
// replica descriptors, looks objects up through Reads.
type Keys struct {
	*core
	reads *Reads
}

// Exist returns 1 (exists, lease granted), 0 (missing) or a negative code.
func (c *Keys) Exist(keys []string) []int32 {
	out := make([]int32, len(keys))
	if err := c.checkOpen(); err != nil {
		return wire.Fill(out, int32(wire.CodeOf(err)))
	}
	ctx, cancel := c.ctx()
	defer cancel()
	var resp wire.CodesResp
	if err := c.master.Call(ctx, wire.OpExist, &wire.KeysReq{ClientID: c.id, Keys: keys}, &resp); err != nil || len(resp.Codes) != len(keys) {
		code := wire.CodeOf(err)
		if err == nil {
			code = wire.ErrRPCFail
		}
		return wire.Fill(out, int32(code))
	}
	for i, code := range resp.Codes {
		switch code {
		case wire.OK:
			out[i] = 1
		case wire.ErrObjectNotFound:
			out[i] = 0
		default:
			out[i] = int32(code)
		}
	}
	return out
}

// GetSize returns the object's size (granting a lease) or a negative code.
func (c *Keys) GetSize(key string) int64 {
	p, err := c.reads.getStart([]string{key}, false)
	if err != nil {
		return int64(wire.CodeOf(err))
	}
	return p.Sizes()[0]
}

// Remove deletes keys; see master.Core.Remove for the codes.
func (c *Keys) Remove(keys []string, force bool) []wire.Code {
	out := make([]wire.Code, len(keys))
	if err := c.checkOpen(); err != nil {
		return wire.Fill(out, wire.CodeOf(err))
	}
	ctx, cancel := c.ctx()
	defer cancel()
	var resp wire.CodesResp
	if err := c.master.Call(ctx, wire.OpRemove, &wire.RemoveReq{Keys: keys, Force: force}, &resp); err != nil || len(resp.Codes) != len(keys) {
		code := wire.CodeOf(err)
		if err == nil {
			code = wire.ErrRPCFail
		}
		return wire.Fill(out, code)
	}
	return resp.Codes
}

// RemoveByRegex removes the keys pattern matches (search semantics).
func (c *Keys) RemoveByRegex(pattern string, force bool) (int64, error) {
	return c.count(wire.OpRemoveByRegex, &wire.RemoveByRegexReq{Pattern: pattern, Force: force})
}

// RemoveAll removes every removable object.
func (c *Keys) RemoveAll(force bool) (int64, error) {
	return c.count(wire.OpRemoveAll, &wire.RemoveAllReq{Force: force})
}

func (c *Keys) count(op wire.Op, req any) (int64, error) {
	if err := c.checkOpen(); err != nil {
		return 0, err
	}
	ctx, cancel := c.ctx()
	defer cancel()
	var resp wire.CountResp
	if err := c.master.Call(ctx, op, req, &resp); err != nil {
		return 0, err
	}
	return resp.N, nil
}

// ReplicaDesc is one replica of an object as Mooncake's replica
// descriptors report it.
type ReplicaDesc struct {
	// Disk: a copy on a client's SSD tier (Endpoint is the tier's);
	// otherwise a memory replica Size bytes at Address in the memory of
	// the client whose segment is named Endpoint.
	Disk     bool   `json:"disk"`
	Address  uint64 `json:"address"`
	Size     uint64 `json:"size"`
	Endpoint string `json:"endpoint"`
}

// ReplicaDescs describes each key's replicas, memory ones first (one
// lookup for the batch, granting leases as a get does). codes[i] is OK or
// the lookup's code for key i (-704 missing).
func (c *Keys) ReplicaDescs(keys []string) (descs [][]ReplicaDesc, codes []wire.Code) {
	descs, codes = make([][]ReplicaDesc, len(keys)), make([]wire.Code, len(keys))
	p, err := c.reads.getStart(keys, false)
	if err != nil {
		return descs, wire.Fill(codes, wire.CodeOf(err))
	}
	var ids []uint64
	for _, r := range p.res {
		for _, rep := range r.Replicas {
			ids = append(ids, rep.SegID)
		}
	}
	ctx, cancel := c.ctx()
	defer cancel()
	_, _ = c.resolve(ctx, ids) // a segment the master forgot meanwhile is left out
	for i, r := range p.res {
		codes[i] = r.Code
		if r.Code != wire.OK {
			continue
		}
		for _, rep := range r.Replicas {
			if d, ok := c.peers.desc(rep.SegID); ok {
				descs[i] = append(descs[i], ReplicaDesc{Address: d.Base + rep.Offset, Size: r.Size, Endpoint: d.Name})
			}
		}
		if r.Disk != "" {
			descs[i] = append(descs[i], ReplicaDesc{Disk: true, Size: r.Size, Endpoint: r.Disk})
		}
	}
	return descs, codes
}

// ReplicaClear drops replicas of objects this client wrote: each whole
// (segment "") or those on the named segment; the keys cleared. Objects
// with a running lease, still being written, or written by another client
// are left alone (see master.Core.ReplicaClear).
func (c *Keys) ReplicaClear(keys []string, segment string) ([]string, error) {
	if err := c.checkOpen(); err != nil {
		return nil, err
	}
	ctx, cancel := c.ctx()
	defer cancel()
	var resp wire.KeysResp
	if err := c.master.Call(ctx, wire.OpReplicaClear, &wire.ReplicaClearReq{ClientID: c.id, Keys: keys, Segment: segment}, &resp); err != nil {
		return nil, err
	}
	return resp.Keys, nil
}
