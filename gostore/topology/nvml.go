package topology

import (
	"fmt"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// NVMLGPUs asks NVML for the GPUs' PCI bus ids, by CUDA-default index
// (PCI order). Without libnvidia-ml (no driver) it returns an error and
// Discover falls back to sysfs: go-nvml opens the library at Init and
// reports ERROR_LIBRARY_NOT_FOUND cleanly when it is missing.
func NVMLGPUs() (ids []string, err error) {
	defer func() {
		if p := recover(); p != nil { // a broken driver must not take the process down
			ids, err = nil, fmt.Errorf("nvml: %v", p)
		}
	}()
	if ret := nvml.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("nvml: %s", nvml.ErrorString(ret))
	}
	defer nvml.Shutdown()
	n, ret := nvml.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("nvml: device count: %s", nvml.ErrorString(ret))
	}
	for i := 0; i < n; i++ {
		dev, ret := nvml.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("nvml: device %d: %s", i, nvml.ErrorString(ret))
		}
		pci, ret := dev.GetPciInfo()
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("nvml: PCI info of device %d: %s", i, nvml.ErrorString(ret))
		}
		var b strings.Builder
		for _, c := range pci.BusId {
			if c == 0 {
				break
			}
			b.WriteByte(byte(c))
		}
		ids = append(ids, b.String())
	}
	return ids, nil
}
