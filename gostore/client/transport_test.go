package client

import (
	"reflect"
	"strings"
	"testing"

	"github.com/gostore/gostore/gostore/rdma"
	"github.com/gostore/gostore/gostore/topology"
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
			map[string]string{"cpu:0": "mlx5_0", "cuda:0": "mlx5_0", "cuda:1": "mlx5_1"}, "no RDMA here"},
		{"auto-detect with verbs", "RDMA", " ", twoNICs, verbs, []string{"mlx5_0", "mlx5_1"}, []string{},
			map[string]string{"cpu:0": "mlx5_0", "cuda:0": "mlx5_0", "cuda:1": "mlx5_1"}, "no RDMA data path"},
		{"one listed, one unknown", "rdma", "mlx5_1, mlx9_9", twoNICs, verbs, []string{"mlx5_1"}, []string{"mlx9_9"},
			map[string]string{"cpu:0": "mlx5_1", "cuda:0": "mlx5_1", "cuda:1": "mlx5_1"}, "no RDMA data path"},
		{"verbs cannot open one", "rdma", "", twoNICs, rdma.Info{Available: true, Devices: []string{"mlx5_1"}},
			[]string{"mlx5_1"}, []string{}, map[string]string{"cpu:0": "mlx5_1", "cuda:0": "mlx5_1", "cuda:1": "mlx5_1"}, "no RDMA data path"},
		{"none found", "rdma", "", topology.Matrix{"cpu:0": {}}, noVerbs, []string{}, []string{}, map[string]string{}, "no RDMA here"},
		{"only unknown ones", "rdma", "bogus", twoNICs, verbs, []string{}, []string{"bogus"}, map[string]string{}, "none of the RDMA devices"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := planTransport(tc.protocol, tc.devices, tc.m, tc.verbs)
			if got.Protocol != "tcp" || !reflect.DeepEqual(got.RDMADevices, tc.chosen) || !reflect.DeepEqual(got.Unknown, tc.unknown) ||
				!reflect.DeepEqual(got.NICFor, tc.nics) || (tc.reason == "") != (got.Reason == "") || !strings.Contains(got.Reason, tc.reason) {
				t.Fatalf("%+v", got)
			}
		})
	}
}
