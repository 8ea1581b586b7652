// gpu.go exports the GPU and topology introspection: gostore.gpu_info()
// and gostore.topology().
package main

/*
#include <stdint.h>
*/
import "C"

import (
	"encoding/json"

	"github.com/gostore/gostore/gostore/gpu"
	"github.com/gostore/gostore/gostore/topology"
	"github.com/gostore/gostore/gostore/wire"
)

// gs_gpu_info writes gpu.Probe()'s Info as JSON: bytes, or -10 when cap is
// too small. It never fails for want of a driver.
//
//export gs_gpu_info
func gs_gpu_info(out *C.char, capacity C.int) (ret C.int) {
	defer recoverTo("gs_gpu_info", &ret)
	b, _ := json.Marshal(gpu.Probe())
	return putString(string(b), out, capacity)
}

// gs_topology writes the topology matrix of the sysfs tree at root ("":
// /sys, asking NVML for GPUs; another root is read alone) as JSON.
//
//export gs_topology
func gs_topology(root *C.char, rootLen C.int, out *C.char, capacity C.int) (ret C.int) {
	defer recoverTo("gs_topology", &ret)
	r := goString(root, rootLen)
	var gpus topology.GPUSource
	if r == "" {
		gpus = topology.NVMLGPUs
	}
	t, err := topology.Discover(r, gpus)
	if err != nil {
		logger.Warn("topology discovery failed", "root", r, "err", err)
		return C.int(wire.ErrInvalidParams)
	}
	return putString(string(t.Matrix().JSON()), out, capacity)
}
