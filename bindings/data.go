// data.go exports the data path: put, get, exist, size and removal.

package main

/*
#include <stdint.h>
*/
import "C"

import (
	"fmt"
	"strings"

	"github.com/gostore/gostore/gostore/client"
	"github.com/gostore/gostore/gostore/gpu"
	"github.com/gostore/gostore/gostore/wire"
)

// Bits of the zero_copy argument of the data calls (bindings/ABI.md).
const (
	// memRegistered: the ranges are the caller's zero-copy memory: inside a
	// registered buffer, or memory it never registered (client.MemoryOf
	// says which ranges are refused).
	memRegistered = 1
	// memMayBeDevice: ranges not registered may be GPU memory; the driver
	// is asked about each (Python sets it for CUDA tensors).
	memMayBeDevice = 2
	// memInProcess: a range whose address carries processTag lies in the
	// memory of process memFlags>>processShift, at the address without
	// the tag: gostore-client passes its applications' own memory so, and
	// the engine moves it with process_vm_readv/writev.
	memInProcess = 4
	processShift = 8
	processTag   = 1 << 62
)

// objectParts is the memory of n objects, flattened as the ABI passes it:
// object i is the next nparts[i] (ptrs, sizes) entries.
type objectParts struct {
	ptrs, sizes []uint64
	nparts      []uint32
}

// cParts reads the caller's (ptrs, sizes, nparts) arrays for n objects.
func cParts(n int, ptrs, sizes *C.uint64_t, nparts *C.uint32_t) objectParts {
	total := sum32(nparts, n)
	return objectParts{ptrs: u64s(ptrs, total), sizes: u64s(sizes, total), nparts: u32s(nparts, n)}
}

// oneRange describes one object of one part, [ptr, ptr+size): the
// one-key calls' argument in the batch calls' form.
func oneRange(ptr, size C.uint64_t) objectParts {
	return objectParts{ptrs: []uint64{uint64(ptr)}, sizes: []uint64{uint64(size)}, nparts: []uint32{1}}
}

// scatter turns the flattened (ptrs, sizes, nparts) arrays into one scatter
// list per object. Object i is nil with bad[i] set when its description is
// invalid: parts beyond the arrays, a null address, or (memRegistered) a
// range outside every registered buffer. Nothing is touched for such
// objects. Parts in GPU memory are listed in dev[i] and left nil in the
// scatter list: no slice is ever formed over device memory.
func scatter(c *client.Client, n int, objs objectParts, memFlags C.int) ([][][]byte, []bool, [][]client.DevicePart) {
	np, ps, ss, total := objs.nparts, objs.ptrs, objs.sizes, len(objs.ptrs)
	out := make([][][]byte, n)
	bad := make([]bool, n)
	var dev [][]client.DevicePart
	next := 0
	if memFlags&memRegistered == 0 {
		if err := c.Buffers().CopyingAllowed(); err != nil {
			logger.Warn("copying call refused", "err", err)
			for i := range bad {
				bad[i] = true
			}
			return out, bad, nil
		}
	}
	if memFlags&memMayBeDevice != 0 && !gpu.Probe().Available {
		// Python handed CUDA memory, but this library cannot reach a
		// driver: never treat it as host memory.
		logger.Warn("GPU memory given but no CUDA driver is usable here; objects rejected", "reason", gpu.Probe().Reason)
		for i := range bad {
			bad[i] = true
		}
		return out, bad, nil
	}
	for i := 0; i < n; i++ {
		if np == nil || (total > 0 && (ps == nil || ss == nil)) {
			bad[i] = true
			continue
		}
		k := int(np[i])
		if k > total-next {
			bad[i] = true
			next = total
			continue
		}
		parts := make([][]byte, 0, k)
		for j := next; j < next+k; j++ {
			ptr, size := ps[j], ss[j]
			if size == 0 {
				continue
			}
			if ptr&processTag != 0 {
				part, ok := processPart(ptr, size, memFlags, len(parts))
				if !ok {
					logger.Warn("memory range of another process rejected: no process named, null or wrapping",
						"object", i, "ptr", ptr, "size", size)
					bad[i] = true
					continue
				}
				if dev == nil {
					dev = make([][]client.DevicePart, n)
				}
				dev[i] = append(dev[i], part)
				parts = append(parts, nil)
				continue
			}
			where, ok := -1, ptr != 0 && ptr+size >= ptr
			if ok && memFlags&memRegistered != 0 {
				where, ok = c.Buffers().MemoryOf(ptr, size)
			} else if ok && memFlags&memMayBeDevice != 0 {
				where = client.DeviceOf(ptr)
			}
			if !ok {
				logger.Warn("memory range rejected: null, wrapping, or straddling a registered buffer's edge",
					"object", i, "ptr", ptr, "size", size)
				bad[i] = true
				continue // never form a slice over memory we rejected
			}
			if where >= 0 {
				if dev == nil {
					dev = make([][]client.DevicePart, n)
				}
				dev[i] = append(dev[i], client.DevicePart{Index: len(parts), Ptr: ptr, Size: size, Device: where})
				parts = append(parts, nil)
				continue
			}
			parts = append(parts, mem(ptr, size))
		}
		next += k
		if !bad[i] {
			out[i] = parts
		} else if dev != nil {
			dev[i] = nil
		}
	}
	return out, bad, dev
}

// processPart is the part at tagged address ptr in the process the flags
// name (memInProcess), as part index of its object; false when the flags
// name none or the range is null or wraps.
func processPart(ptr, size uint64, memFlags C.int, index int) (client.DevicePart, bool) {
	addr, pid := ptr&^processTag, int(memFlags>>processShift)
	if memFlags&memInProcess == 0 || pid <= 0 || addr == 0 || addr+size < addr {
		return client.DevicePart{}, false
	}
	return client.DevicePart{Index: index, Ptr: addr, Size: size, Pid: pid}, true
}

// guard turns a panic in an exported call into a logged internal error with
// every result set to fail: a bug must never take the Python process down,
// nor report success. Exports with a single result use recoverTo.
func guard(name string, fail func()) {
	if p := recover(); p != nil {
		logger.Error("internal error in exported call; results set to INTERNAL_ERROR", "call", name, "panic", p)
		fail()
	}
}

func fail32(res []int32) func() { return func() { fill32(res, wire.ErrInternal) } }

func fail64(res []int64) func() { return func() { fill64(res, wire.ErrInternal) } }

func sum32(p *C.uint32_t, n int) int {
	t := 0
	for _, v := range u32s(p, n) {
		t += int(v)
	}
	return t
}

func replicaConfig(replicaNum, flags C.int, preferred *C.char, preferredLen C.int) wire.ReplicaConfig {
	return wire.ReplicaConfig{
		ReplicaNum: int(replicaNum),
		SoftPin:    flags&1 != 0,
		HardPin:    flags&2 != 0,
		SameNode:   flags&4 != 0,
		Preferred:  splitNonEmpty(goString(preferred, preferredLen), "\n"),
	}
}

//export gs_put_batch
func gs_put_batch(h C.int64_t, n C.int, keys *C.char, keyLens *C.uint32_t,
	ptrs, sizes *C.uint64_t, nparts *C.uint32_t, zeroCopy C.int,
	replicaNum, flags C.int, preferred *C.char, preferredLen C.int, results *C.int32_t) {
	write(false, h, n, keys, keyLens, ptrs, sizes, nparts, zeroCopy, replicaNum, flags, preferred, preferredLen, results)
}

//export gs_upsert_batch
func gs_upsert_batch(h C.int64_t, n C.int, keys *C.char, keyLens *C.uint32_t,
	ptrs, sizes *C.uint64_t, nparts *C.uint32_t, zeroCopy C.int,
	replicaNum, flags C.int, preferred *C.char, preferredLen C.int, results *C.int32_t) {
	write(true, h, n, keys, keyLens, ptrs, sizes, nparts, zeroCopy, replicaNum, flags, preferred, preferredLen, results)
}

// write serves gs_put_batch and gs_upsert_batch.
func write(upsert bool, h C.int64_t, n C.int, keys *C.char, keyLens *C.uint32_t,
	ptrs, sizes *C.uint64_t, nparts *C.uint32_t, zeroCopy C.int,
	replicaNum, flags C.int, preferred *C.char, preferredLen C.int, results *C.int32_t) {
	cnt := int(n)
	res := i32s(results, cnt)
	defer guard("gs_put_batch/gs_upsert_batch", fail32(res))
	c, ks, ok := clientAndKeys(h, keys, keyLens, cnt, func(code wire.Code) { fill32(res, code) })
	if !ok {
		return
	}
	writeItems(upsert, c, ks, cParts(cnt, ptrs, sizes, nparts), zeroCopy,
		replicaConfig(replicaNum, flags, preferred, preferredLen), res)
}

// gs_put_one is gs_put_batch (upsert 0) or gs_upsert_batch (1) for one
// key and one source range, its result returned: what put_from and
// upsert_from call, without the arrays.
//
//export gs_put_one
func gs_put_one(h C.int64_t, key *C.char, keyLen C.int, ptr, size C.uint64_t, zeroCopy C.int,
	replicaNum, flags C.int, preferred *C.char, preferredLen C.int, upsert C.int) (ret C.int) {
	defer recoverTo("gs_put_one", &ret)
	c := clientOf(h)
	if c == nil {
		return C.int(wire.ErrInternal)
	}
	if keyLen < 0 {
		return C.int(wire.ErrInvalidParams)
	}
	res := []int32{0}
	writeItems(upsert != 0, c, []string{goString(key, keyLen)}, oneRange(ptr, size), zeroCopy,
		replicaConfig(replicaNum, flags, preferred, preferredLen), res)
	return C.int(res[0])
}

// writeItems puts (or upserts) the objects of keys ks from the parts objs
// lists; res[i] is object i's code.
func writeItems(upsert bool, c *client.Client, ks []string, objs objectParts, memFlags C.int,
	cfg wire.ReplicaConfig, res []int32) {
	cnt := len(ks)
	bufs, bad, dev := scatter(c, cnt, objs, memFlags)
	items := make([]client.PutItem, 0, cnt)
	var itemDev [][]client.DevicePart
	idx := make([]int, 0, cnt)
	for i := range cnt {
		if bad[i] {
			res[i] = int32(wire.ErrInvalidParams)
			continue
		}
		items = append(items, client.PutItem{Key: ks[i], Parts: bufs[i]})
		if dev != nil {
			itemDev = append(itemDev, dev[i])
		}
		idx = append(idx, i)
	}
	codes := c.Writes().PutBatchDevice(items, itemDev, cfg, upsert)
	for j, code := range codes {
		res[idx[j]] = int32(code)
	}
}

//export gs_get_start
func gs_get_start(h C.int64_t, n C.int, keys *C.char, keyLens *C.uint32_t, sizesOut *C.int64_t) (ret C.int64_t) {
	defer recoverTo("gs_get_start", &ret)
	c := clientOf(h)
	if c == nil {
		return C.int64_t(wire.ErrInternal)
	}
	ks, ok := keyList(keys, keyLens, int(n))
	if !ok {
		return C.int64_t(wire.ErrInvalidParams)
	}
	p, err := c.Reads().GetStart(ks)
	if err != nil {
		return C.int64_t(wire.CodeOf(err))
	}
	copy(i64s(sizesOut, int(n)), p.Sizes())
	return C.int64_t(newHandle(p))
}

//export gs_get_finish
func gs_get_finish(h C.int64_t, pending C.int64_t, ptrs, sizes *C.uint64_t, nparts *C.uint32_t, zeroCopy C.int, results *C.int64_t) {
	p, ok := lookup[*client.Pending](pending)
	if !ok {
		logger.Error("gs_get_finish: unknown pending get", "handle", int64(pending))
		return
	}
	handles.Delete(int64(pending))
	n := len(p.Sizes())
	res := i64s(results, n)
	defer guard("gs_get_finish", fail64(res))
	c := clientOf(h)
	if c == nil {
		fill64(res, wire.ErrInternal)
		return
	}
	finish(c, p, n, cParts(n, ptrs, sizes, nparts), zeroCopy, res)
}

func finish(c *client.Client, p *client.Pending, n int, objs objectParts, memFlags C.int, res []int64) {
	dests, bad, dev := scatter(c, n, objs, memFlags)
	out := c.Reads().GetFinishDevice(p, dests, dev)
	for i := range res {
		if bad[i] {
			res[i] = int64(wire.ErrInvalidParams)
		} else {
			res[i] = out[i]
		}
	}
}

// gs_get_places fills, for each object of get pending that this client
// reads from host memory on this host (client.Places), its segment's id,
// its offset in it, its size and its lease in milliseconds (0s for the
// others), and writes one "<segment id> <segment size> <memfd path>\n"
// line per segment named to paths. It returns the bytes written, or -10
// when they pass capacity (nothing is left to the caller then). The
// objects placed are then the caller's to copy: gs_get_finish given no
// parts for one counts it read.
//
//export gs_get_places
func gs_get_places(h C.int64_t, pending C.int64_t, segIDs, offsets, sizes, leases *C.uint64_t, paths *C.char,
	capacity C.int) (ret C.int) {
	defer recoverTo("gs_get_places", &ret)
	p, ok := lookup[*client.Pending](pending)
	c := clientOf(h)
	if !ok || c == nil || segIDs == nil || offsets == nil || sizes == nil || leases == nil {
		return C.int(wire.ErrInvalidParams)
	}
	n := len(p.Sizes())
	ids, offs, objSizes, leaseMS := u64s(segIDs, n), u64s(offsets, n), u64s(sizes, n), u64s(leases, n)
	places := c.Reads().Places(p)
	var doc strings.Builder
	named := map[uint64]bool{}
	for i, pl := range places {
		ids[i], offs[i], objSizes[i], leaseMS[i] = pl.SegID, pl.Offset, pl.Size, pl.LeaseMS
		if pl.Path != "" && !named[pl.SegID] {
			named[pl.SegID] = true
			fmt.Fprintf(&doc, "%d %d %s\n", pl.SegID, pl.SegSize, pl.Path)
		}
	}
	written := putString(doc.String(), paths, capacity)
	if written < 0 {
		clear(ids)
		return written
	}
	p.LeaveToCaller(places)
	return written
}

//export gs_get_packed
func gs_get_packed(h C.int64_t, n C.int, keys *C.char, keyLens *C.uint32_t, scratch, capacity C.uint64_t,
	memFlags C.int, sizesOut, results *C.int64_t) (ret C.int64_t) {
	cnt := int(n)
	res := i64s(results, cnt)
	defer guard("gs_get_packed", func() { fill64(res, wire.ErrInternal); ret = C.int64_t(wire.ErrInternal) })
	c := clientOf(h)
	if c == nil {
		return C.int64_t(wire.ErrInternal)
	}
	ks, ok := keyList(keys, keyLens, cnt)
	if !ok || sizesOut == nil || results == nil || (scratch == 0 && capacity > 0) {
		return C.int64_t(wire.ErrInvalidParams)
	}
	p, err := c.Reads().GetStart(ks)
	if err != nil {
		return C.int64_t(wire.CodeOf(err))
	}
	sizes := p.Sizes()
	copy(i64s(sizesOut, cnt), sizes)
	offsets, fits := p.Packed(uint64(capacity))
	if !fits {
		return C.int64_t(newHandle(p))
	}
	// One part per object found, at its offset in scratch (a tagged
	// address stays tagged: offsets are far below the tag's bit).
	objs := objectParts{nparts: make([]uint32, cnt)}
	for i, size := range sizes {
		if size > 0 {
			objs.ptrs = append(objs.ptrs, uint64(scratch)+offsets[i])
			objs.sizes = append(objs.sizes, uint64(size))
			objs.nparts[i] = 1
		}
	}
	finish(c, p, cnt, objs, memFlags, res)
	return 0
}

//export gs_get_abort
func gs_get_abort(h C.int64_t, pending C.int64_t) {
	defer recoverTo("gs_get_abort", nil)
	p, ok := lookup[*client.Pending](pending)
	if !ok {
		return
	}
	handles.Delete(int64(pending))
	if c := clientOf(h); c != nil {
		c.Reads().Abort(p)
	}
}

//export gs_get_into_batch
func gs_get_into_batch(h C.int64_t, n C.int, keys *C.char, keyLens *C.uint32_t,
	ptrs, sizes *C.uint64_t, nparts *C.uint32_t, zeroCopy C.int, results *C.int64_t) {
	cnt := int(n)
	res := i64s(results, cnt)
	defer guard("gs_get_into_batch", fail64(res))
	c := clientOf(h)
	ks, ok := keyList(keys, keyLens, cnt)
	if c == nil || !ok {
		for i := range res {
			res[i] = int64(wire.ErrInvalidParams)
		}
		return
	}
	getInto(c, ks, cParts(cnt, ptrs, sizes, nparts), zeroCopy, res)
}

// gs_get_into_one is gs_get_into_batch for one key and one destination
// range, its result returned: what get_into calls, without the arrays.
//
//export gs_get_into_one
func gs_get_into_one(h C.int64_t, key *C.char, keyLen C.int, ptr, size C.uint64_t, zeroCopy C.int) (ret C.int64_t) {
	defer recoverTo("gs_get_into_one", &ret)
	c := clientOf(h)
	if c == nil || keyLen < 0 {
		return C.int64_t(wire.ErrInvalidParams)
	}
	res := []int64{0}
	getInto(c, []string{goString(key, keyLen)}, oneRange(ptr, size), zeroCopy, res)
	return C.int64_t(res[0])
}

// getInto reads the objects of keys ks into the parts objs lists (results
// in res): one lookup and one read, or for one object into host memory a
// read from where the client last found it while it asks the master
// (client/spots.go).
func getInto(c *client.Client, ks []string, objs objectParts, memFlags C.int, res []int64) {
	if len(ks) == 1 {
		dests, bad, dev := scatter(c, 1, objs, memFlags)
		if !bad[0] && (len(dev) == 0 || len(dev[0]) == 0) {
			res[0] = c.Reads().GetIntoOne(ks[0], dests[0])
			return
		}
	}
	p, err := c.Reads().GetStart(ks)
	if err != nil {
		for i := range res {
			res[i] = int64(wire.CodeOf(err))
		}
		return
	}
	finish(c, p, len(ks), objs, memFlags, res)
}

//export gs_get_buffers
func gs_get_buffers(h C.int64_t, n C.int, keys *C.char, keyLens *C.uint32_t, ptrsOut *C.uint64_t, sizesOut *C.int64_t) {
	cnt := int(n)
	ps, ss := u64s(ptrsOut, cnt), i64s(sizesOut, cnt)
	defer guard("gs_get_buffers", fail64(ss))
	c := clientOf(h)
	ks, ok := keyList(keys, keyLens, cnt)
	if c == nil || !ok {
		for i := range ss {
			ss[i], ps[i] = int64(wire.ErrInvalidParams), 0
		}
		return
	}
	if err := c.Buffers().CopyingAllowed(); err != nil {
		logger.Warn("copying call refused", "err", err)
		for i := range ss {
			ss[i], ps[i] = int64(wire.CodeOf(err)), 0
		}
		return
	}
	bufs, codes := c.Reads().GetBuffers(ks)
	for i := range cnt {
		ps[i], ss[i] = addr(bufs[i]), codes[i]
	}
}

//export gs_free_buffer
func gs_free_buffer(h C.int64_t, ptr C.uint64_t) {
	defer recoverTo("gs_free_buffer", nil)
	s, ok := lookup[*store](h)
	if !ok {
		return
	}
	if c := s.client.Load(); c != nil {
		if err := c.Reads().FreeBuffer(uintptr(ptr)); err != nil {
			logger.Warn("free_buffer rejected", "err", err)
		}
	}
}

//export gs_exist_batch
func gs_exist_batch(h C.int64_t, n C.int, keys *C.char, keyLens *C.uint32_t, results *C.int32_t) {
	res := i32s(results, int(n))
	defer guard("gs_exist_batch", fail32(res))
	c := clientOf(h)
	ks, ok := keyList(keys, keyLens, int(n))
	if c == nil || !ok {
		for i := range res {
			res[i] = int32(wire.ErrInvalidParams)
		}
		return
	}
	copy(res, c.Keys().Exist(ks))
}

//export gs_get_size
func gs_get_size(h C.int64_t, key *C.char, keyLen C.int) (ret C.int64_t) {
	defer recoverTo("gs_get_size", &ret)
	c := clientOf(h)
	if c == nil {
		return C.int64_t(wire.ErrInternal)
	}
	return C.int64_t(c.Keys().GetSize(goString(key, keyLen)))
}

//export gs_remove_batch
func gs_remove_batch(h C.int64_t, n C.int, keys *C.char, keyLens *C.uint32_t, force C.int, results *C.int32_t) {
	res := i32s(results, int(n))
	defer guard("gs_remove_batch", fail32(res))
	c := clientOf(h)
	ks, ok := keyList(keys, keyLens, int(n))
	if c == nil || !ok {
		for i := range res {
			res[i] = int32(wire.ErrInvalidParams)
		}
		return
	}
	for i, code := range c.Keys().Remove(ks, force != 0) {
		res[i] = int32(code)
	}
}

//export gs_remove_by_regex
func gs_remove_by_regex(h C.int64_t, pattern *C.char, n C.int, force C.int) (ret C.int64_t) {
	defer recoverTo("gs_remove_by_regex", &ret)
	c := clientOf(h)
	if c == nil {
		return C.int64_t(wire.ErrInternal)
	}
	removed, err := c.Keys().RemoveByRegex(goString(pattern, n), force != 0)
	if err != nil {
		logger.Warn("remove_by_regex failed", "err", err)
		return C.int64_t(wire.CodeOf(err))
	}
	return C.int64_t(removed)
}

//export gs_remove_all
func gs_remove_all(h C.int64_t, force C.int) (ret C.int64_t) {
	defer recoverTo("gs_remove_all", &ret)
	c := clientOf(h)
	if c == nil {
		return C.int64_t(wire.ErrInternal)
	}
	removed, err := c.Keys().RemoveAll(force != 0)
	if err != nil {
		return C.int64_t(wire.CodeOf(err))
	}
	return C.int64_t(removed)
}

// gs_get_one reads one object with a single call when it fits in scratch
// (cap bytes of caller memory): it returns 0 and the size in *size_out. A
// larger object returns a pending handle (> 0) with its size in *size_out,
// to be finished with gs_get_finish (or gs_get_abort) into memory of that
// size; a miss or error returns the negative code. One RPC either way.
//
//export gs_get_one
func gs_get_one(h C.int64_t, key *C.char, keyLen C.int, scratch, capacity C.uint64_t, sizeOut *C.int64_t) (ret C.int64_t) {
	defer recoverTo("gs_get_one", &ret)
	c := clientOf(h)
	if c == nil {
		return C.int64_t(wire.ErrInternal)
	}
	if sizeOut == nil || (scratch == 0 && capacity > 0) {
		return C.int64_t(wire.ErrInvalidParams)
	}
	if err := c.Buffers().CopyingAllowed(); err != nil {
		logger.Warn("copying call refused", "err", err)
		return C.int64_t(wire.CodeOf(err))
	}
	p, got := c.Reads().GetOneStart(goString(key, keyLen), mem(uint64(scratch), uint64(capacity)))
	switch {
	case p != nil: // larger than scratch: the caller finishes it
		*sizeOut = C.int64_t(got)
		return C.int64_t(newHandle(p))
	case got < 0:
		*sizeOut = C.int64_t(got)
		return C.int64_t(got)
	}
	*sizeOut = C.int64_t(got)
	return 0
}
