// transport.go decides how this client moves bytes and which RDMA NIC
// serves a buffer at each location: setup's protocol and rdma_devices
// ("" means every RDMA device found) against the host's topology, what
// libibverbs can open and what the loaded UCX can do.

package client

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/gostore/gostore/gostore/rdma"
	"github.com/gostore/gostore/gostore/topology"
	"github.com/gostore/gostore/gostore/transfer"
	"github.com/gostore/gostore/gostore/ucx"
)

// TransportInfo is what setup decided about the transport.
type TransportInfo struct {
	Requested string `json:"requested"` // setup's protocol
	// Protocol moves the bytes between hosts: "ucx" (the UCX route, for
	// peers that exposed their segment with UCX) or "tcp"; peers on this
	// host use shared memory or CUDA IPC whatever it is (but with
	// GOSTORE_TRANSPORT=ucx).
	Protocol    string   `json:"protocol"`
	RDMADevices []string `json:"rdma_devices"` // chosen: listed, or every one found
	Unknown     []string `json:"unknown_devices"`
	// NICFor is the NIC chosen for buffers at each location ("cpu:N",
	// "cuda:N"): a near one (same PCIe switch, same NUMA node) first.
	NICFor map[string]string `json:"nic_for"`
	Reason string            `json:"reason"` // why the protocol differs from the request
	// UCX is the UCX library asked for "ucx" or "rdma": which one loaded
	// (or why none did) and the transports its context opened.
	UCX ucx.Info `json:"ucx"`
	// UCXDevices are the NICs UCX may use ("mlx5_0:1", UCX_NET_DEVICES)
	// for "rdma": those near the segment's location, striped over; empty
	// lets UCX choose.
	UCXDevices []string `json:"ucx_devices"`
	// RouteOps counts the ops this client's engine sent over each route
	// ("own", "shm", "ipc", "tcp", "ucx") since setup: how to see which
	// route the bytes really took.
	RouteOps map[string]uint64 `json:"route_ops"`
}

// planTransport is the decision itself, from the topology matrix m (nil
// when not looked at), the verbs probe and the UCX probe u (looked at for
// "ucx" and "rdma" only). location is the segment's ("", "cpu" or
// "cuda:N").
func planTransport(protocol, devices, location string, m topology.Matrix, verbs rdma.Info, u ucx.Info) (info TransportInfo) {
	info = TransportInfo{Requested: strings.ToLower(protocol), Protocol: "tcp", RDMADevices: []string{},
		Unknown: []string{}, NICFor: map[string]string{}, UCXDevices: []string{}}
	if info.Requested == "" {
		info.Requested = "tcp"
	}
	if info.Requested == "ucx" || info.Requested == "rdma" {
		defer planUCX(&info, u) // on the result, after the NICs are chosen
	}
	if m == nil {
		return info
	}
	known := map[string]bool{}
	for _, n := range m.Names() {
		known[n] = true
	}
	usable := func(name string) bool { return !verbs.Available || slices.Contains(verbs.Devices, name) }
	listed := splitNonEmpty(devices, ",")
	if len(listed) > 0 {
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
		if len(listed) > 0 && len(info.RDMADevices) == 0 {
			info.Reason = "none of the RDMA devices asked for was found: bytes move over TCP"
		}
		info.UCXDevices = nearNICs(chosen, info.RDMADevices, location)
	}
	return info
}

// planUCX turns the UCX route on, or says why it stays off: UCX cannot
// load, or "rdma" is asked of a UCX without a verbs transport that has a
// device. Then bytes between hosts move over TCP.
func planUCX(info *TransportInfo, u ucx.Info) {
	info.UCX = u
	switch {
	case info.Reason != "":
	case !u.Available:
		info.Reason = "UCX cannot be used (" + u.Reason + "): between hosts, bytes move over TCP"
	case info.Requested == "rdma" && !u.Verbs:
		info.Reason = fmt.Sprintf("the UCX loaded (%s, %s) has no RDMA (verbs) transport with a device, only %s: "+
			"between hosts, bytes move over TCP", u.Library, u.Version, strings.Join(u.Resources, ", "))
	default:
		info.Protocol = "ucx"
	}
	if info.Protocol != "ucx" {
		info.UCXDevices = []string{}
	}
}

// nearNICs are the NICs (of chosen) UCX uses for a segment at location,
// in UCX's "device:port" form: a GPU's near ones (else those available to
// it); every chosen one for host memory, which no NUMA node holds.
func nearNICs(m topology.Matrix, chosen []string, location string) []string {
	names := chosen
	if strings.HasPrefix(location, "cuda:") {
		e := m[location]
		if names = e.Preferred; len(names) == 0 {
			names = e.Available
		}
	}
	out := make([]string, 0, len(names))
	for _, n := range names {
		out = append(out, n+":1")
	}
	return out
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
// protocol or by naming devices), and loads UCX only when its route is
// (protocol "ucx" or "rdma", or GOSTORE_TRANSPORT=ucx): a TCP deployment
// pays nothing.
func discoverTransport(cfg Config) (TransportInfo, error) {
	protocol := strings.ToLower(cfg.Protocol)
	forced := cfg.ForceUCX && protocol != "rdma"
	if forced {
		protocol = "ucx"
	}
	var u ucx.Info
	if protocol == "ucx" || protocol == "rdma" {
		u = ucx.Probe()
	}
	info, err := planTransportOn(cfg, protocol, u)
	if forced {
		info.Requested = cmp.Or(strings.ToLower(cfg.Protocol), "tcp")
		if err == nil && info.Reason == "" {
			info.Reason = "GOSTORE_TRANSPORT=ucx: peers with a UCX exposure, on this host too, are reached over UCX"
		}
	}
	return info, err
}

func planTransportOn(cfg Config, protocol string, u ucx.Info) (TransportInfo, error) {
	if protocol != "rdma" && strings.TrimSpace(cfg.RDMADevices) == "" {
		return planTransport(protocol, "", cfg.SegmentLocation, nil, rdma.Info{}, u), nil
	}
	var gpus topology.GPUSource
	if cfg.SysfsRoot == "" {
		gpus = topology.NVMLGPUs
	}
	topo, err := topology.Discover(cfg.SysfsRoot, gpus)
	if err != nil {
		return TransportInfo{}, err
	}
	return planTransport(protocol, cfg.RDMADevices, cfg.SegmentLocation, topo.Matrix(), rdma.Probe(), u), nil
}

// Transport is what setup decided about the transport.
// RouteOps is read when asked.
func (c *Client) Transport() TransportInfo {
	t := c.transport
	if c.engine != nil {
		t.RouteOps = map[string]uint64{}
		for _, r := range transfer.Routes() {
			t.RouteOps[r.String()] = c.engine.RouteOps(r)
		}
	}
	return t
}
