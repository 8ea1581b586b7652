package client

import (
	"reflect"
	"strings"
	"testing"

	"github.com/gostore/gostore/gostore/rdma"
	"github.com/gostore/gostore/gostore/topology"
	"github.com/gostore/gostore/gostore/ucx"
)

// A two-NIC, two-GPU host: each GPU near one NIC, both on NUMA node 0.
var twoNICs = topology.Matrix{
	"cpu:0":  {Preferred: []string{"mlx5_0", "mlx5_1"}, Available: []string{}},
	"cuda:0": {Preferred: []string{"mlx5_0"}, Available: []string{"mlx5_1"}},
	"cuda:1": {Preferred: []string{"mlx5_1"}, Available: []string{"mlx5_0"}},
}

func TestPlanTransport(t *testing.T) {
	noVerbs := rdma.Info{Reason: "no RDMA verbs library: not found"}
	verbs := rdma.Info{Available: true, Devices: []string{"mlx5_1", "mlx5_0"}}
	for _, tc := range []struct {
		name, protocol, devices string
		m                       topology.Matrix
		verbs                   rdma.Info
		chosen, unknown         []string
		nics                    map[string]string
		reason                  string
	}{
		{"tcp looks at nothing", "tcp", "", nil, verbs, []string{}, []string{}, map[string]string{}, ""},
		{"auto-detect without verbs", "rdma", "", twoNICs, noVerbs, []string{"mlx5_0", "mlx5_1"}, []string{},
			map[string]string{"cpu:0": "mlx5_0", "cuda:0": "mlx5_0", "cuda:1": "mlx5_1"}, "UCX cannot be used"},
		{"auto-detect with verbs", "RDMA", " ", twoNICs, verbs, []string{"mlx5_0", "mlx5_1"}, []string{},
			map[string]string{"cpu:0": "mlx5_0", "cuda:0": "mlx5_0", "cuda:1": "mlx5_1"}, "UCX cannot be used"},
		{"one listed, one unknown", "rdma", "mlx5_1, mlx9_9", twoNICs, verbs, []string{"mlx5_1"}, []string{"mlx9_9"},
			map[string]string{"cpu:0": "mlx5_1", "cuda:0": "mlx5_1", "cuda:1": "mlx5_1"}, "UCX cannot be used"},
		{"verbs cannot open one", "rdma", "", twoNICs, rdma.Info{Available: true, Devices: []string{"mlx5_1"}},
			[]string{"mlx5_1"}, []string{}, map[string]string{"cpu:0": "mlx5_1", "cuda:0": "mlx5_1", "cuda:1": "mlx5_1"}, "UCX cannot be used"},
		{"none found", "rdma", "", topology.Matrix{"cpu:0": {}}, noVerbs, []string{}, []string{}, map[string]string{}, "UCX cannot be used"},
		{"only unknown ones", "rdma", "bogus", twoNICs, verbs, []string{}, []string{"bogus"}, map[string]string{}, "none of the RDMA devices"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := planTransport(tc.protocol, tc.devices, "", tc.m, tc.verbs, ucx.Info{Reason: "not found"})
			if got.Protocol != "tcp" || !reflect.DeepEqual(got.RDMADevices, tc.chosen) || !reflect.DeepEqual(got.Unknown, tc.unknown) ||
				!reflect.DeepEqual(got.NICFor, tc.nics) || (tc.reason == "") != (got.Reason == "") || !strings.Contains(got.Reason, tc.reason) {
				t.Fatalf("%+v", got)
			}
		})
	}
}

// The UCX route: "ucx" is on wherever UCX loads; "rdma" only where the
// loaded UCX has a verbs transport with a device, its NICs those near the
// segment's location ("name:1", striped over). Otherwise bytes between
// hosts move over TCP and the reason names what is missing. (twoNICs is
// a fake topology: there is no RDMA NIC here.)
func TestPlanTransportUCX(t *testing.T) {
	verbs := rdma.Info{Available: true, Devices: []string{"mlx5_1", "mlx5_0"}}
	none := ucx.Info{Reason: "cannot load UCX library libucp.so.0: not found"}
	tcpOnly := ucx.Info{Available: true, Library: "/usr/lib/libucp.so.0.0.0", Version: "1.13.1",
		Resources: []string{"tcp/lo", "posix/memory"}}
	withVerbs := tcpOnly
	withVerbs.Verbs, withVerbs.Resources = true, []string{"rc_verbs/mlx5_0:1", "tcp/lo"}
	for _, tc := range []struct {
		name, protocol, devices, location string
		m                                 topology.Matrix
		u                                 ucx.Info
		protocolOut, reason               string
		ucxDevices                        []string
	}{
		{"tcp loads no UCX", "tcp", "", "", nil, withVerbs, "tcp", "", []string{}},
		{"ucx", "UCX", "", "", nil, tcpOnly, "ucx", "", []string{}},
		{"ucx without UCX", "ucx", "", "", nil, none, "tcp", "UCX cannot be used (cannot load UCX library", []string{}},
		{"rdma without verbs in UCX", "rdma", "", "", twoNICs, tcpOnly, "tcp", "no RDMA (verbs) transport with a device, only tcp/lo, posix/memory", []string{}},
		{"rdma, host segment: every NIC", "rdma", "", "cpu", twoNICs, withVerbs, "ucx", "", []string{"mlx5_0:1", "mlx5_1:1"}},
		{"rdma, GPU segment: its near NIC", "rdma", "", "cuda:1", twoNICs, withVerbs, "ucx", "", []string{"mlx5_1:1"}},
		{"rdma, the NICs listed", "rdma", "mlx5_0", "cuda:1", twoNICs, withVerbs, "ucx", "", []string{"mlx5_0:1"}},
		{"rdma, none listed found", "rdma", "bogus", "", twoNICs, withVerbs, "tcp", "none of the RDMA devices", []string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := planTransport(tc.protocol, tc.devices, tc.location, tc.m, verbs, tc.u)
			if got.Protocol != tc.protocolOut || (tc.reason == "") != (got.Reason == "") || !strings.Contains(got.Reason, tc.reason) ||
				!reflect.DeepEqual(got.UCXDevices, tc.ucxDevices) {
				t.Fatalf("%+v", got)
			}
			if tc.protocol != "tcp" && !reflect.DeepEqual(got.UCX, tc.u) {
				t.Fatalf("UCX info %+v, want %+v", got.UCX, tc.u)
			}
		})
	}
}
