// segments.go exports the segments mounted at run time (mount_segment,
// allocate_and_mount_segment and their unmounts), unmount_local_disk_segment
// and init_all.

package main

/*
#include <stdint.h>
*/
import "C"

import (
	"encoding/json"
	"time"

	"github.com/gostore/gostore/gostore/client"
	"github.com/gostore/gostore/gostore/wire"
)

// graceOf turns seconds into a duration, capped so it cannot overflow.
func graceOf(seconds C.uint64_t) time.Duration {
	const maxSeconds = 100 * 365 * 24 * 3600
	return time.Duration(min(uint64(seconds), maxSeconds)) * time.Second
}

// putIDs writes ids as a JSON array: its length, or -10 when capacity is
// too small.
func putIDs(ids []string, out *C.char, capacity C.int) C.int {
	if ids == nil {
		ids = []string{}
	}
	b, _ := json.Marshal(ids)
	n := putString(string(b), out, capacity)
	if n < 0 {
		logger.Error("segment ids do not fit the caller's buffer", "ids", ids, "capacity", int(capacity))
	}
	return n
}

//export gs_mount_segment
func gs_mount_segment(h C.int64_t, path *C.char, pathLen C.int, offset, size C.uint64_t,
	protocol *C.char, protocolLen C.int, location *C.char, locationLen C.int, out *C.char, capacity C.int) (ret C.int) {
	defer recoverTo("gs_mount_segment", &ret)
	c := clientOf(h)
	if c == nil {
		return C.int(wire.ErrInternal)
	}
	ids, err := c.Segments().MountFile(goString(path, pathLen), uint64(offset), uint64(size),
		goString(protocol, protocolLen), goString(location, locationLen))
	if err != nil {
		return C.int(wire.CodeOf(err))
	}
	return putIDs(ids, out, capacity)
}

//export gs_allocate_segment
func gs_allocate_segment(h C.int64_t, size C.uint64_t, protocol *C.char, protocolLen C.int,
	location *C.char, locationLen C.int, allocated *C.uint64_t, out *C.char, capacity C.int) (ret C.int) {
	defer recoverTo("gs_allocate_segment", &ret)
	c := clientOf(h)
	if c == nil {
		return C.int(wire.ErrInternal)
	}
	ids, n, err := c.Segments().AllocateAndMount(uint64(size), goString(protocol, protocolLen), goString(location, locationLen))
	if err != nil {
		return C.int(wire.CodeOf(err))
	}
	*allocated = C.uint64_t(n)
	return putIDs(ids, out, capacity)
}

//export gs_unmount_segments
func gs_unmount_segments(h C.int64_t, ids *C.char, idsLen C.int, graceSeconds C.uint64_t, allocated C.int) (ret C.int) {
	defer recoverTo("gs_unmount_segments", &ret)
	c := clientOf(h)
	if c == nil {
		return C.int(wire.ErrInternal)
	}
	var list []string
	if err := json.Unmarshal([]byte(goString(ids, idsLen)), &list); err != nil {
		logger.Error("unmount: the segment ids are not a JSON list of strings", "err", err)
		return C.int(wire.ErrInvalidParams)
	}
	return C.int(wire.CodeOf(c.Segments().UnmountSegments(list, graceOf(graceSeconds), allocated != 0)))
}

//export gs_unmount_local_disk
func gs_unmount_local_disk(h C.int64_t, graceSeconds C.uint64_t) (ret C.int) {
	defer recoverTo("gs_unmount_local_disk", &ret)
	c := clientOf(h)
	if c == nil {
		return C.int(wire.ErrInternal)
	}
	return C.int(wire.CodeOf(c.Segments().UnmountLocalDisk(graceOf(graceSeconds))))
}

//export gs_init_all
func gs_init_all(h C.int64_t, protocol *C.char, protocolLen C.int, device *C.char, deviceLen C.int, size C.uint64_t) (ret C.int) {
	defer recoverTo("gs_init_all", &ret)
	s, ok := lookup[*store](h)
	if !ok {
		return C.int(wire.ErrInvalidParams)
	}
	refreshEnv()
	cfg := client.InitAllConfig(goString(protocol, protocolLen), goString(device, deviceLen), uint64(size))
	return setupStore(s, cfg, setupEdge{})
}
