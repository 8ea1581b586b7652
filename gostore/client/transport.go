// transport.go decides how this client moves bytes and which RDMA NIC
// serves a buffer at each location: setup's protocol and rdma_devices
// ("" means every RDMA device found) against the host's topology and what
// libibverbs can open.

package client

import (
	"slices"
	"strings"

	"github.com/gostore/gostore/gostore/rdma"
	"github.com/gostore/gostore/gostore/topology"
)

// TransportInfo is what setup decided about the transport.
type TransportInfo struct {
	Requested string `json:"requested"` // setup's protocol
	// Protocol moves the bytes between hosts ("tcp"); peers on this host
	// use shared memory or CUDA IPC whatever it is.
	Protocol    string   `json:"protocol"`
	RDMADevices []string `json:"rdma_devices"` // chosen: listed, or every one found
	Unknown     []string `json:"unknown_devices"`
	// NICFor is the NIC chosen for buffers at each location ("cpu:N",
	// "cuda:N"): a near one (same PCIe switch, same NUMA node) first.
	NICFor map[string]string `json:"nic_for"`
	Reason string            `json:"reason"` // why the protocol differs from the request
}

// planTransport is the decision itself, from the topology matrix m (nil
// when not looked at) and the verbs probe.
func planTransport(protocol, devices string, m topology.Matrix, verbs rdma.Info) TransportInfo {
	info := TransportInfo{Requested: strings.ToLower(protocol), Protocol: "tcp", RDMADevices: []string{},
		Unknown: []string{}, NICFor: map[string]string{}}
	if info.Requested == "" {
		info.Requested = "tcp"
	}
	if m == nil {
		return info
	}
	known := map[string]bool{}
	for _, n := range m.Names() {
		known[n] = true
	}
	usable := func(name string) bool { return !verbs.Available || slices.Contains(verbs.Devices, name) }
	if listed := splitNonEmpty(devices, ","); len(listed) > 0 {
		for _, n := range listed {
			if known[n] && usable(n) {
				info.RDMADevices = append(info.RDMADevices, n)
			} else {
				info.Unknown = append(info.Unknown, n)
			}
		}
	} else {
		for _, n := range m.Names() {
			if usable(n) {
				info.RDMADevices = append(info.RDMADevices, n)
			}
		}
	}
	chosen := m.Only(info.RDMADevices)
	for loc := range chosen {
		if nic := chosen.Pick(loc, 0); nic != "" {
			info.NICFor[loc] = nic
		}
	}
	if info.Requested == "rdma" {
		switch {
		case !verbs.Available:
			info.Reason = "no RDMA here (" + verbs.Reason + "): bytes move over TCP"
		case len(info.RDMADevices) == 0:
			info.Reason = "none of the RDMA devices asked for was found: bytes move over TCP"
		default:
			info.Reason = "RDMA devices found, but this build has no RDMA data path: bytes move over TCP"
		}
	}
	return info
}

func splitNonEmpty(s, sep string) []string {
	var out []string
	for _, p := range strings.Split(s, sep) {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// discoverTransport looks at the host only when RDMA is asked for (by
// protocol or by naming devices): a TCP deployment pays nothing.
func discoverTransport(cfg Config) (TransportInfo, error) {
	if !strings.EqualFold(cfg.Protocol, "rdma") && strings.TrimSpace(cfg.RDMADevices) == "" {
		return planTransport(cfg.Protocol, "", nil, rdma.Info{}), nil
	}
	var gpus topology.GPUSource
	if cfg.SysfsRoot == "" {
		gpus = topology.NVMLGPUs
	}
	topo, err := topology.Discover(cfg.SysfsRoot, gpus)
	if err != nil {
		return TransportInfo{}, err
	}
	return planTransport(cfg.Protocol, cfg.RDMADevices, topo.Matrix(), rdma.Probe()), nil
}

// Transport is what setup decided about the transport.
func (c *Client) Transport() TransportInfo { return c.transport }
