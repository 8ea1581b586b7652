// gpu.go exports the GPU and topology introspection: gostore.gpu_info()
// and gostore.topology().

package main

/*
#include <stdint.h>
*/
import "C"

import (
	"encoding/json"

	"github.com/gostore/gostore/gostore/client"
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

// gs_device_copy copies n bytes from src to dst where at least one of them
// is GPU memory, with the CUDA driver: how Python reads a tensor header out
// of device memory and places a tensor read to the host onto a device,
// never touching device memory itself. 0, -600 when neither side is device
// memory (or n is 0), -800 when the driver fails.
//
//export gs_device_copy
func gs_device_copy(dst, src, n C.uint64_t) (ret C.int) {
	defer recoverTo("gs_device_copy", &ret)
	dev := client.DeviceOf(uint64(dst))
	if dev < 0 {
		dev = client.DeviceOf(uint64(src))
	}
	if dev < 0 || n == 0 || dst == 0 || src == 0 {
		logger.Warn("gs_device_copy: neither side is device memory", "dst", uint64(dst), "src", uint64(src), "n", uint64(n))
		return C.int(wire.ErrInvalidParams)
	}
	if err := gpu.Copy(dev, uint64(dst), uint64(src), uint64(n)); err != nil {
		logger.Warn("gs_device_copy failed", "err", err)
		return C.int(wire.ErrTransferFail)
	}
	return 0
}

// gs_transport_info writes what setup decided about the transport as JSON
// (client.TransportInfo): bytes, -10 when cap is too small, negative
// without a set-up store.
//
//export gs_transport_info
func gs_transport_info(h C.int64_t, out *C.char, capacity C.int) (ret C.int) {
	defer recoverTo("gs_transport_info", &ret)
	c := clientOf(h)
	if c == nil {
		return C.int(wire.ErrInternal)
	}
	b, _ := json.Marshal(c.Transport())
	return putString(string(b), out, capacity)
}
