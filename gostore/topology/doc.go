// Package topology finds where a host's RDMA NICs and GPUs sit — their PCI
// paths and NUMA nodes — and builds Mooncake's topology matrix from it: for
// every location a buffer can live in ("cpu:N" for NUMA node N, "cuda:N"
// for GPU N), the NICs nearest to it (preferred) and the others
// (available). The transfer engine picks a NIC for a buffer from its row.
//
// Everything is read from a sysfs tree whose root is configurable, so
// tests build trees modelled on real servers in a temporary directory:
//
//	class/infiniband/<nic>/device   → the NIC's PCI device directory
//	devices/system/node/node<N>     → NUMA node N exists
//	bus/pci/devices/<bus id>        → PCI devices (class, vendor, numa_node)
//
// GPUs come from NVML when it answers (through GPUSource); otherwise from
// the PCI devices of class 0x03xxxx and NVIDIA's vendor id 0x10de, numbered
// in PCI address order, as CUDA numbers them by default.
//
// Nearness: a GPU prefers the NICs that share a PCIe switch with it (their
// sysfs paths share a bridge below the host bridge; the deepest such
// sharing wins), then the NICs of its NUMA node; a NUMA node prefers its
// own NICs. Without any near NIC every NIC is preferred. NICs whose NUMA
// node is unknown are available to every location but preferred by none
// that has a NIC of its own.
package topology
