// tasks.go exports replica tasks.

package main

/*
#include <stdint.h>
*/
import "C"

import (
	"encoding/json"

	"github.com/gostore/gostore/gostore/wire"
)

//export gs_create_copy_task
func gs_create_copy_task(h C.int64_t, key *C.char, keyLen C.int, targets *C.char, targetsLen C.int, idOut *C.char, idCap C.int) (ret C.int) {
	defer recoverTo("gs_create_copy_task", &ret)
	c := clientOf(h)
	if c == nil {
		return C.int(wire.ErrInternal)
	}
	id, err := c.Tasks().CreateCopyTask(goString(key, keyLen), splitNonEmpty(goString(targets, targetsLen), "\n"))
	if err != nil {
		return C.int(wire.CodeOf(err))
	}
	return putString(id, idOut, idCap)
}

//export gs_create_move_task
func gs_create_move_task(h C.int64_t, key *C.char, keyLen C.int, source *C.char, sourceLen C.int, target *C.char, targetLen C.int, idOut *C.char, idCap C.int) (ret C.int) {
	defer recoverTo("gs_create_move_task", &ret)
	c := clientOf(h)
	if c == nil {
		return C.int(wire.ErrInternal)
	}
	id, err := c.Tasks().CreateMoveTask(goString(key, keyLen), goString(source, sourceLen), goString(target, targetLen))
	if err != nil {
		return C.int(wire.CodeOf(err))
	}
	return putString(id, idOut, idCap)
}

// gs_query_task writes {"id","key","kind","status","error"} as JSON.
//
//export gs_query_task
func gs_query_task(h C.int64_t, id *C.char, idLen C.int, out *C.char, capacity C.int) (ret C.int) {
	defer recoverTo("gs_query_task", &ret)
	c := clientOf(h)
	if c == nil {
		return C.int(wire.ErrInternal)
	}
	info, err := c.Tasks().QueryTask(goString(id, idLen))
	if err != nil {
		return C.int(wire.CodeOf(err))
	}
	kind := map[wire.TaskKind]string{wire.TaskCopy: "copy", wire.TaskMove: "move"}[info.Kind]
	b, _ := json.Marshal(map[string]string{"id": info.ID, "key": info.Key, "kind": kind, "status": info.Status, "error": info.Error})
	return putString(string(b), out, capacity)
}
