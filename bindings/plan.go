// plan.go exports the plan API (gostore.NanoKVCache): join, open, write,
// commit, locate, reads, remove, eviction and stats. Plans and metas cross
// as fixed arrays of uint64 (see planFields and metaFields).

package main

/*
#include <stdint.h>
*/
import "C"

import (
	"encoding/binary"
	"encoding/json"

	"github.com/gostore/gostore/gostore/grant"
	"github.com/gostore/gostore/gostore/planclient"
	"github.com/gostore/gostore/gostore/wire"
)

// Layout of the uint64 arrays describing a WritePlan and an ObjMeta.
const (
	planFields = 10 // key_hash, dst_rank, seg_id, header_off, payload_base, page_bytes, n_pages, bytes_total, epoch, writable address (0: none)
	// metaFields: key_hash, owner_rank, seg_id, header_off, payload_off,
	// bytes_total, page_bytes, n_pages, epoch, then the read grant's
	// grant.Size bytes as grantWords words (all zero: none).
	metaFields = 9 + grantWords
	grantWords = grant.Size / 8
)

//export gs_plan_join
func gs_plan_join(h C.int64_t) (ret C.int64_t) {
	defer recoverTo("gs_plan_join", &ret)
	c := clientOf(h)
	if c == nil {
		return C.int64_t(wire.ErrInternal)
	}
	rank, err := c.Plans().Join()
	if err != nil {
		return C.int64_t(wire.CodeOf(err))
	}
	return C.int64_t(rank)
}

// gs_plan_members writes [{"rank","segment","size","used"}...] as JSON.
//
//export gs_plan_members
func gs_plan_members(h C.int64_t, out *C.char, capacity C.int) (ret C.int) {
	defer recoverTo("gs_plan_members", &ret)
	c := clientOf(h)
	if c == nil {
		return C.int(wire.ErrInternal)
	}
	members, err := c.Plans().Members(true)
	if err != nil {
		return C.int(wire.CodeOf(err))
	}
	type member struct {
		Rank    int    `json:"rank"`
		Segment string `json:"segment"`
		Size    uint64 `json:"size"`
		Used    uint64 `json:"used"`
	}
	list := make([]member, len(members))
	for i, m := range members {
		list[i] = member{m.Rank, m.Seg.Name, m.Seg.Size, m.Used}
	}
	b, _ := json.Marshal(list)
	return putString(string(b), out, capacity)
}

// gs_plan_open opens a write plan for key on the member of rank prefRank
// (>= 0), the segment named prefSeg (non-empty), or hash(key) % world; it
// fills out[planFields]. 0 or negative.
//
//export gs_plan_open
func gs_plan_open(h C.int64_t, key *C.char, keyLen C.int, bytes C.uint64_t, pageBytes C.uint32_t,
	prefRank C.int64_t, prefSeg *C.char, prefSegLen C.int, lowWatermark C.double, out *C.uint64_t) (ret C.int) {
	defer recoverTo("gs_plan_open", &ret)
	c := clientOf(h)
	o := u64s(out, planFields)
	if c == nil || o == nil {
		return C.int(wire.ErrInternal)
	}
	k := goString(key, keyLen)
	owner, err := c.Plans().Owner(k, int(prefRank), goString(prefSeg, prefSegLen))
	if err != nil {
		return C.int(wire.CodeOf(err))
	}
	p, err := c.Plans().OpenForWrite(k, uint64(bytes), uint32(pageBytes), owner, float64(lowWatermark))
	if err != nil {
		logger.Warn("open_for_write failed", "key", k, "bytes", uint64(bytes), "err", err)
		return C.int(wire.CodeOf(err))
	}
	w := uint64(0)
	if b := p.Writable(); len(b) > 0 {
		w = addr(b)
	}
	copy(o, []uint64{p.KeyHash, uint64(int64(p.DstRank)), p.SegID, p.HeaderOff, p.Payload,
		uint64(p.PageBytes), uint64(p.NPages), p.Bytes, p.Epoch, w})
	return 0
}

// gs_plan_write copies size bytes at ptr (memory Python owns) into the
// open plan of key at offset off: the path for owners not mapped here.
//
//export gs_plan_write
func gs_plan_write(h C.int64_t, key *C.char, keyLen C.int, off, ptr, size C.uint64_t) (ret C.int) {
	defer recoverTo("gs_plan_write", &ret)
	c := clientOf(h)
	if c == nil {
		return C.int(wire.ErrInternal)
	}
	p := c.Plans().OpenPlan(goString(key, keyLen))
	if p == nil {
		return C.int(wire.ErrObjectNotFound)
	}
	if ptr == 0 || uint64(ptr)+uint64(size) < uint64(ptr) {
		return C.int(wire.ErrInvalidParams)
	}
	if err := c.Plans().Write(p, uint64(off), mem(uint64(ptr), uint64(size))); err != nil {
		return C.int(wire.CodeOf(err))
	}
	return 0
}

//export gs_plan_commit
func gs_plan_commit(h C.int64_t, key *C.char, keyLen C.int) (ret C.int) {
	defer recoverTo("gs_plan_commit", &ret)
	c := clientOf(h)
	if c == nil {
		return C.int(wire.ErrInternal)
	}
	if err := c.Plans().Commit(goString(key, keyLen)); err != nil {
		return C.int(wire.CodeOf(err))
	}
	return 0
}

func putMeta(o []uint64, m *planclient.ObjMeta) {
	copy(o, []uint64{m.KeyHash, uint64(int64(m.OwnerRank)), m.SegID, m.HeaderOff, m.PayloadOff,
		m.Bytes, uint64(m.PageBytes), uint64(m.NPages), m.Epoch})
	g := o[9:metaFields]
	clear(g)
	if len(m.Grant) == grant.Size {
		for i := range g {
			g[i] = binary.LittleEndian.Uint64(m.Grant[8*i:])
		}
	}
}

func getMeta(o []uint64) *planclient.ObjMeta {
	m := &planclient.ObjMeta{KeyHash: o[0], OwnerRank: int(int64(o[1])), SegID: o[2], HeaderOff: o[3],
		PayloadOff: o[4], Bytes: o[5], PageBytes: uint32(o[6]), NPages: uint32(o[7]), Epoch: o[8]}
	for _, w := range o[9:metaFields] {
		if w != 0 {
			m.Grant = make([]byte, grant.Size)
			for i, w := range o[9:metaFields] {
				binary.LittleEndian.PutUint64(m.Grant[8*i:], w)
			}
			break
		}
	}
	return m
}

// gs_plan_flush returns once the master has heard of every commit this
// process made (commits publish the header at once, the master later).
//
//export gs_plan_flush
func gs_plan_flush(h C.int64_t) (ret C.int) {
	defer recoverTo("gs_plan_flush", &ret)
	c := clientOf(h)
	if c == nil {
		return C.int(wire.ErrInternal)
	}
	c.Plans().FlushCommits()
	return 0
}

// gs_plan_locate fills out[metaFields] for key's READY object: 0, -703
// before its commit, -704 for an unknown key, or another negative code.
//
//export gs_plan_locate
func gs_plan_locate(h C.int64_t, key *C.char, keyLen C.int, out *C.uint64_t) (ret C.int) {
	defer recoverTo("gs_plan_locate", &ret)
	c := clientOf(h)
	o := u64s(out, metaFields)
	if c == nil || o == nil {
		return C.int(wire.ErrInternal)
	}
	m, err := c.Plans().Locate(goString(key, keyLen))
	if err != nil {
		return C.int(wire.CodeOf(err))
	}
	putMeta(o, m)
	return 0
}

// gs_plan_read copies key's READY payload to dst (capacity bytes, memory
// Python owns): bytes copied or negative.
//
//export gs_plan_read
func gs_plan_read(h C.int64_t, key *C.char, keyLen C.int, dst, capacity C.uint64_t) (ret C.int64_t) {
	defer recoverTo("gs_plan_read", &ret)
	c := clientOf(h)
	if c == nil {
		return C.int64_t(wire.ErrInternal)
	}
	if dst == 0 && capacity > 0 {
		return C.int64_t(wire.ErrInvalidParams)
	}
	n, err := c.Plans().Read(goString(key, keyLen), mem(uint64(dst), uint64(capacity)))
	if err != nil {
		return C.int64_t(wire.CodeOf(err))
	}
	return C.int64_t(n)
}

// gs_plan_read_at copies the object meta[metaFields] describes to dst
// straight from its owner, without the master: bytes or negative.
//
//export gs_plan_read_at
func gs_plan_read_at(h C.int64_t, meta *C.uint64_t, dst, capacity C.uint64_t) (ret C.int64_t) {
	defer recoverTo("gs_plan_read_at", &ret)
	c := clientOf(h)
	m := u64s(meta, metaFields)
	if c == nil || m == nil {
		return C.int64_t(wire.ErrInternal)
	}
	if dst == 0 && capacity > 0 {
		return C.int64_t(wire.ErrInvalidParams)
	}
	n, err := c.Plans().ReadAt(getMeta(m), mem(uint64(dst), uint64(capacity)))
	if err != nil {
		return C.int64_t(wire.CodeOf(err))
	}
	return C.int64_t(n)
}

//export gs_plan_remove
func gs_plan_remove(h C.int64_t, key *C.char, keyLen C.int) (ret C.int) {
	defer recoverTo("gs_plan_remove", &ret)
	c := clientOf(h)
	if c == nil {
		return C.int(wire.ErrInternal)
	}
	if err := c.Plans().Remove(goString(key, keyLen)); err != nil {
		return C.int(wire.CodeOf(err))
	}
	return 0
}

// gs_plan_evict_until evicts until the pool's usage is below ratio: the
// objects evicted (usage left in *usage) or negative.
//
//export gs_plan_evict_until
func gs_plan_evict_until(h C.int64_t, ratio C.double, usage *C.double) (ret C.int64_t) {
	defer recoverTo("gs_plan_evict_until", &ret)
	c := clientOf(h)
	if c == nil {
		return C.int64_t(wire.ErrInternal)
	}
	n, u, err := c.Plans().EvictUntil(float64(ratio))
	if err != nil {
		return C.int64_t(wire.CodeOf(err))
	}
	if usage != nil {
		*usage = C.double(u)
	}
	return C.int64_t(n)
}

// gs_plan_stats writes this process's plan counters as a JSON object.
//
//export gs_plan_stats
func gs_plan_stats(h C.int64_t, out *C.char, capacity C.int) (ret C.int) {
	defer recoverTo("gs_plan_stats", &ret)
	c := clientOf(h)
	if c == nil {
		return C.int(wire.ErrInternal)
	}
	st, rank, open := c.Plans().Stats()
	b, _ := json.Marshal(map[string]int64{
		"rank": int64(rank), "open_plans": int64(open),
		"opened": st.Opened.Load(), "committed": st.Committed.Load(), "aborted": st.Aborted.Load(),
		"reads": st.Reads.Load(), "read_misses": st.ReadMisses.Load(), "removed": st.Removed.Load(),
		"bytes_tx": st.BytesWritten.Load(), "bytes_rx": st.BytesRead.Load(),
		"stale_reads": st.StaleReads.Load(), "not_ready": st.NotReady.Load(),
		"cas_failures": st.CASFailures.Load(), "oom": st.NoRoom.Load(),
		"commit_failures": st.CommitFailures.Load(), "evictions": st.Evictions.Load(),
	})
	return putString(string(b), out, capacity)
}
