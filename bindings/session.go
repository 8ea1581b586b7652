// session.go exports ranged writes and reads: put and get sessions and
// get_into_ranges (client/session.go).

package main

/*
#include <stdint.h>
*/
import "C"

import (
	"encoding/json"

	"github.com/gostore/gostore/gostore/client"
	"github.com/gostore/gostore/gostore/wire"
)

// rangeParts turns the flattened (ptrs, sizes, offsets, nparts) arrays into
// each key's ranges: part j of key i is sizes[j] bytes at ptrs[j], offset
// offsets[j] in the object. Key i is bad when a part is beyond the
// arrays, null, wrapping, or (memRegistered) outside every registered host
// buffer; nothing is touched for it.
func rangeParts(c *client.Client, n int, ptrs, sizes, offsets *C.uint64_t, nparts *C.uint32_t, memFlags C.int) ([][]client.RangePart, []bool) {
	total := sum32(nparts, n)
	np, ps, ss, os := u32s(nparts, n), u64s(ptrs, total), u64s(sizes, total), u64s(offsets, total)
	out := make([][]client.RangePart, n)
	bad := make([]bool, n)
	next := 0
	for i := range n {
		if np == nil || (total > 0 && (ps == nil || ss == nil || os == nil)) || int(np[i]) > total-next {
			bad[i] = true
			continue
		}
		parts := make([]client.RangePart, 0, np[i])
		for j := next; j < next+int(np[i]); j++ {
			ptr, size := ps[j], ss[j]
			ok := size == 0 || (ptr != 0 && ptr+size >= ptr)
			if ok && size > 0 && memFlags&memRegistered != 0 {
				where, in := c.Buffers().MemoryOf(ptr, size)
				ok = in && where < 0
			}
			if !ok {
				logger.Warn("memory range rejected: null, wrapping, GPU memory, or straddling a registered buffer's edge",
					"key", i, "ptr", ptr, "size", size)
				bad[i] = true
				break
			}
			parts = append(parts, client.RangePart{Buf: mem(ptr, size), Off: os[j]})
		}
		next += int(np[i])
		if !bad[i] {
			out[i] = parts
		}
	}
	return out, bad
}

//export gs_put_session_start
func gs_put_session_start(h C.int64_t, n C.int, keys *C.char, keyLens *C.uint32_t, sizes *C.uint64_t,
	replicaNum, flags C.int, preferred *C.char, preferredLen C.int, results *C.int32_t) {
	cnt := int(n)
	res := i32s(results, cnt)
	defer guard("gs_put_session_start", fail32(res))
	c, ks, ok := clientAndKeys(h, keys, keyLens, cnt, func(code wire.Code) { fill32(res, code) })
	if !ok {
		return
	}
	cfg := replicaConfig(replicaNum, flags, preferred, preferredLen)
	for i, code := range c.Sessions().PutSessionStart(ks, u64s(sizes, cnt), cfg) {
		res[i] = int32(code)
	}
}

//export gs_put_session_write
func gs_put_session_write(h C.int64_t, n C.int, keys *C.char, keyLens *C.uint32_t,
	ptrs, sizes, offsets *C.uint64_t, nparts *C.uint32_t, zeroCopy C.int, results *C.int64_t) {
	perKeyRanges("gs_put_session_write", (*client.Sessions).PutSessionWrite,
		h, n, keys, keyLens, ptrs, sizes, offsets, nparts, zeroCopy, results)
}

// perKeyRanges serves the ranged calls with one result per key: the
// parts rangeParts refuses make their key -600.
func perKeyRanges(name string, call func(*client.Sessions, []string, [][]client.RangePart) []int64,
	h C.int64_t, n C.int, keys *C.char, keyLens *C.uint32_t,
	ptrs, sizes, offsets *C.uint64_t, nparts *C.uint32_t, zeroCopy C.int, results *C.int64_t) {
	cnt := int(n)
	res := i64s(results, cnt)
	defer guard(name, fail64(res))
	c, ks, ok := clientAndKeys(h, keys, keyLens, cnt, func(code wire.Code) { fill64(res, code) })
	if !ok {
		return
	}
	parts, bad := rangeParts(c, cnt, ptrs, sizes, offsets, nparts, zeroCopy)
	for i, r := range call(c.Sessions(), ks, parts) {
		res[i] = r
		if bad[i] {
			res[i] = int64(wire.ErrInvalidParams)
		}
	}
}

// gs_put_session_end publishes (revoke 0) or drops (revoke 1) the objects
// of keys' put sessions.
//
//export gs_put_session_end
func gs_put_session_end(h C.int64_t, n C.int, keys *C.char, keyLens *C.uint32_t, revoke C.int, results *C.int32_t) {
	cnt := int(n)
	res := i32s(results, cnt)
	defer guard("gs_put_session_end", fail32(res))
	c, ks, ok := clientAndKeys(h, keys, keyLens, cnt, func(code wire.Code) { fill32(res, code) })
	if !ok {
		return
	}
	end := c.Sessions().PutSessionEnd
	if revoke != 0 {
		end = c.Sessions().PutSessionRevoke
	}
	for i, code := range end(ks) {
		res[i] = int32(code)
	}
}

//export gs_get_session_start
func gs_get_session_start(h C.int64_t, n C.int, keys *C.char, keyLens *C.uint32_t, results *C.int32_t) {
	cnt := int(n)
	res := i32s(results, cnt)
	defer guard("gs_get_session_start", fail32(res))
	c, ks, ok := clientAndKeys(h, keys, keyLens, cnt, func(code wire.Code) { fill32(res, code) })
	if !ok {
		return
	}
	for i, code := range c.Sessions().GetSessionStart(ks) {
		res[i] = int32(code)
	}
}

//export gs_get_session_read
func gs_get_session_read(h C.int64_t, n C.int, keys *C.char, keyLens *C.uint32_t,
	ptrs, sizes, offsets *C.uint64_t, nparts *C.uint32_t, zeroCopy C.int, results *C.int64_t) {
	perKeyRanges("gs_get_session_read", (*client.Sessions).GetSessionRead,
		h, n, keys, keyLens, ptrs, sizes, offsets, nparts, zeroCopy, results)
}

//export gs_get_session_end
func gs_get_session_end(h C.int64_t, n C.int, keys *C.char, keyLens *C.uint32_t) (ret C.int) {
	defer recoverTo("gs_get_session_end", &ret)
	c, ks, ok := clientAndKeys(h, keys, keyLens, int(n), func(code wire.Code) { ret = C.int(code) })
	if !ok {
		return ret
	}
	c.Sessions().GetSessionEnd(ks)
	return 0
}

// gs_get_ranges reads byte ranges of objects without a session: results
// has one entry per part (sum of nparts).
//
//export gs_get_ranges
func gs_get_ranges(h C.int64_t, n C.int, keys *C.char, keyLens *C.uint32_t,
	ptrs, sizes, offsets *C.uint64_t, nparts *C.uint32_t, zeroCopy C.int, results *C.int64_t) {
	cnt := int(n)
	res := i64s(results, sum32(nparts, cnt))
	defer guard("gs_get_ranges", fail64(res))
	c, ks, ok := clientAndKeys(h, keys, keyLens, cnt, func(code wire.Code) { fill64(res, code) })
	if !ok {
		return
	}
	parts, bad := rangeParts(c, cnt, ptrs, sizes, offsets, nparts, zeroCopy)
	got := c.Sessions().GetRanges(ks, parts)
	np := u32s(nparts, cnt)
	at := 0
	for i := range cnt {
		for k := range int(np[i]) {
			if bad[i] || k >= len(got[i]) {
				res[at+k] = int64(wire.ErrInvalidParams)
			} else {
				res[at+k] = got[i][k]
			}
		}
		at += int(np[i])
	}
}

// clientAndKeys resolves the handle and the key list; on failure it calls
// fail with -1 (no client) or -600 (bad keys) and returns ok false.
func clientAndKeys(h C.int64_t, keys *C.char, keyLens *C.uint32_t, n int, fail func(wire.Code)) (*client.Client, []string, bool) {
	c := clientOf(h)
	if c == nil {
		fail(wire.ErrInternal)
		return nil, nil, false
	}
	ks, ok := keyList(keys, keyLens, n)
	if !ok {
		fail(wire.ErrInvalidParams)
		return nil, nil, false
	}
	return c, ks, true
}

func fill32(res []int32, code wire.Code) {
	for i := range res {
		res[i] = int32(code)
	}
}

func fill64(res []int64, code wire.Code) {
	for i := range res {
		res[i] = int64(code)
	}
}

// gs_replica_descs writes, as JSON, one {"code", "replicas"} entry per key
// (client.ReplicaDesc fields) into out; the length written, or -10 when
// cap is too small (call again with more).
//
//export gs_replica_descs
func gs_replica_descs(h C.int64_t, n C.int, keys *C.char, keyLens *C.uint32_t, out *C.char, capacity C.int) (ret C.int) {
	defer recoverTo("gs_replica_descs", &ret)
	c, ks, ok := clientAndKeys(h, keys, keyLens, int(n), func(code wire.Code) { ret = C.int(code) })
	if !ok {
		return ret
	}
	descs, codes := c.Keys().ReplicaDescs(ks)
	type entry struct {
		Code     int                  `json:"code"`
		Replicas []client.ReplicaDesc `json:"replicas"`
	}
	entries := make([]entry, len(ks))
	for i := range ks {
		entries[i] = entry{Code: int(codes[i]), Replicas: descs[i]}
	}
	doc, err := json.Marshal(entries)
	if err != nil {
		return C.int(wire.ErrInternal)
	}
	return putString(string(doc), out, capacity)
}

// gs_disk_read_count is how many batches of objects this client has read
// from SSD tiers (Mooncake's get_offload_rpc_read_count).
//
//export gs_disk_read_count
func gs_disk_read_count(h C.int64_t) (ret C.int64_t) {
	defer recoverTo("gs_disk_read_count", &ret)
	c := clientOf(h)
	if c == nil {
		return C.int64_t(wire.ErrInternal)
	}
	return C.int64_t(c.Reads().DiskReads())
}

// gs_replica_clear drops replicas of objects this client wrote (all of
// each, or those on the segment named by segment) and sets cleared[i] to 1
// for each key it cleared, 0 for the others: the number cleared, or a
// negative code. The answer is per key, sized by the caller, because the
// call cannot be repeated to fetch a longer one: the first call already
// cleared the keys.
//
//export gs_replica_clear
func gs_replica_clear(h C.int64_t, n C.int, keys *C.char, keyLens *C.uint32_t, segment *C.char, segLen C.int,
	cleared *C.int32_t) (ret C.int) {
	defer recoverTo("gs_replica_clear", &ret)
	c, ks, ok := clientAndKeys(h, keys, keyLens, int(n), func(code wire.Code) { ret = C.int(code) })
	if !ok {
		return ret
	}
	done, err := c.Keys().ReplicaClear(ks, goString(segment, segLen))
	if err != nil {
		return C.int(wire.CodeOf(err))
	}
	// done is the cleared keys in the order sent: a subsequence of ks.
	flags := i32s(cleared, len(ks))
	next := 0
	for i, k := range ks {
		flags[i] = 0
		if next < len(done) && done[next] == k {
			flags[i] = 1
			next++
		}
	}
	return C.int(next)
}
