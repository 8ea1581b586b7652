package topology

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
)

// fakeSysfs builds sysfs trees in a temporary directory: a fake of what
// only a big server has (the real /sys here has no GPU and no RDMA NIC).
type fakeSysfs struct {
	t    *testing.T
	root string
}

func newFake(t *testing.T, nodes int) *fakeSysfs {
	f := &fakeSysfs{t: t, root: t.TempDir()}
	for n := 0; n < nodes; n++ {
		f.mkdir(fmt.Sprintf("devices/system/node/node%d", n))
	}
	f.mkdir("class/infiniband")
	f.mkdir("bus/pci/devices")
	return f
}

func (f *fakeSysfs) mkdir(p string) string {
	full := filepath.Join(f.root, p)
	if err := os.MkdirAll(full, 0o755); err != nil {
		f.t.Fatal(err)
	}
	return full
}

func (f *fakeSysfs) write(p, s string) {
	if err := os.WriteFile(filepath.Join(f.root, p), []byte(s+"\n"), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

// device adds a PCI device at devices/<path> (its last element is its bus
// id) with numa_node (-1 writes "-1"; -2 writes no file), class and vendor,
// and links bus/pci/devices/<id> to it.
func (f *fakeSysfs) device(path string, numa int, class, vendor string) string {
	dir := f.mkdir("devices/" + path)
	id := filepath.Base(path)
	if numa >= -1 {
		f.write("devices/"+path+"/numa_node", fmt.Sprint(numa))
	}
	f.write("devices/"+path+"/class", class)
	f.write("devices/"+path+"/vendor", vendor)
	if err := os.Symlink(dir, filepath.Join(f.root, "bus/pci/devices", id)); err != nil {
		f.t.Fatal(err)
	}
	return dir
}

func (f *fakeSysfs) gpu(path string, numa int) {
	f.device(path, numa, "0x030200", "0x10de")
}

func (f *fakeSysfs) nic(name, path string, numa int) {
	dir := f.device(path, numa, "0x020700", "0x15b3")
	f.mkdir("class/infiniband/" + name)
	rel, _ := filepath.Rel(filepath.Join(f.root, "class/infiniband", name), dir)
	if err := os.Symlink(rel, filepath.Join(f.root, "class/infiniband", name, "device")); err != nil {
		f.t.Fatal(err)
	}
}

// dgx builds 8 GPUs and 8 NICs on 2 NUMA nodes, 2 PCIe switches per node,
// each switch holding 2 GPUs and 2 NICs (a DGX-like layout).
func dgx(t *testing.T) *fakeSysfs {
	f := newFake(t, 2)
	g, n := 0, 0
	for node := 0; node < 2; node++ {
		host := fmt.Sprintf("pci0000:%02x", node*0x80)
		for sw := 0; sw < 2; sw++ {
			bus := node*0x80 + sw*0x20 + 0x10
			port := fmt.Sprintf("%s/0000:%02x:01.%d", host, node*0x80, sw)
			up := fmt.Sprintf("%s/0000:%02x:00.0", port, bus)
			for i := 0; i < 2; i++ {
				down := fmt.Sprintf("%s/0000:%02x:%02x.0", up, bus+1, i*8)
				f.gpu(fmt.Sprintf("%s/0000:%02x:00.0", down, bus+2+i*2), node)
				f.nic(fmt.Sprintf("mlx5_%d", n), fmt.Sprintf("%s/0000:%02x:00.0", down, bus+3+i*2), node)
				g++
				n++
			}
		}
	}
	return f
}

func TestDGXMatrix(t *testing.T) {
	f := dgx(t)
	topo, err := Discover(f.root, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(topo.GPUs) != 8 || len(topo.NICs) != 8 || !slices.Equal(topo.Nodes, []int{0, 1}) {
		t.Fatalf("found %d GPUs, %d NICs, nodes %v", len(topo.GPUs), len(topo.NICs), topo.Nodes)
	}
	m := topo.Matrix()
	all := []string{"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7"}
	for gpu := 0; gpu < 8; gpu++ {
		// GPU g shares its downstream port with NIC g: nearest of all.
		e := m[fmt.Sprintf("cuda:%d", gpu)]
		want := []string{fmt.Sprintf("mlx5_%d", gpu)}
		if !slices.Equal(e.Preferred, want) {
			t.Errorf("cuda:%d prefers %v, want %v", gpu, e.Preferred, want)
		}
		if len(e.Available) != 7 || slices.Contains(e.Available, want[0]) {
			t.Errorf("cuda:%d available %v", gpu, e.Available)
		}
	}
	if e := m["cpu:0"]; !slices.Equal(e.Preferred, all[:4]) || !slices.Equal(e.Available, all[4:]) {
		t.Errorf("cpu:0 = %+v", e)
	}
	if e := m["cpu:1"]; !slices.Equal(e.Preferred, all[4:]) || !slices.Equal(e.Available, all[:4]) {
		t.Errorf("cpu:1 = %+v", e)
	}
	if len(m) != 10 {
		t.Errorf("%d rows, want 8 GPUs + 2 nodes", len(m))
	}
}

// GPUs and NICs on one switch but not the same downstream port: the switch
// is what they share, so every NIC of the switch is preferred.
func TestSharedSwitch(t *testing.T) {
	f := newFake(t, 1)
	up := "pci0000:00/0000:00:01.0/0000:01:00.0"
	f.gpu(up+"/0000:02:00.0/0000:03:00.0", 0)
	f.gpu(up+"/0000:02:08.0/0000:04:00.0", 0)
	f.nic("mlx5_0", up+"/0000:02:10.0/0000:05:00.0", 0)
	f.nic("mlx5_1", up+"/0000:02:18.0/0000:06:00.0", 0)
	f.nic("mlx5_2", "pci0000:00/0000:00:02.0/0000:07:00.0", 0) // another root port
	m := mustMatrix(t, f.root)
	for _, g := range []string{"cuda:0", "cuda:1"} {
		if e := m[g]; !slices.Equal(e.Preferred, []string{"mlx5_0", "mlx5_1"}) || !slices.Equal(e.Available, []string{"mlx5_2"}) {
			t.Errorf("%s = %+v", g, e)
		}
	}
}

func TestHostWithoutRDMA(t *testing.T) {
	f := newFake(t, 2)
	f.gpu("pci0000:00/0000:00:01.0/0000:01:00.0", 0)
	m := mustMatrix(t, f.root)
	for _, loc := range []string{"cpu:0", "cpu:1", "cuda:0"} {
		if e, ok := m[loc]; !ok || len(e.Preferred) != 0 || len(e.Available) != 0 {
			t.Errorf("%s = %+v, %v: want an empty row", loc, e, ok)
		}
	}
	if m.Pick("cuda:0", 3) != "" {
		t.Error("a NIC picked on a host without one")
	}
}

// A NIC without NUMA information is available everywhere and preferred by
// locations that have no NIC of their own.
func TestNICWithoutNUMA(t *testing.T) {
	f := newFake(t, 2)
	f.nic("mlx5_0", "pci0000:00/0000:00:01.0/0000:01:00.0", 0)
	f.nic("mlx5_1", "pci0000:80/0000:80:01.0/0000:81:00.0", -1) // the BIOS said -1
	f.nic("mlx5_2", "pci0000:40/0000:40:01.0/0000:41:00.0", -2) // no numa_node at all
	f.gpu("pci0000:80/0000:80:02.0/0000:82:00.0", 1)
	m := mustMatrix(t, f.root)
	if e := m["cpu:0"]; !slices.Equal(e.Preferred, []string{"mlx5_0"}) || !slices.Equal(e.Available, []string{"mlx5_1", "mlx5_2"}) {
		t.Errorf("cpu:0 = %+v", e)
	}
	if e := m["cpu:1"]; len(e.Preferred) != 3 || len(e.Available) != 0 {
		t.Errorf("cpu:1 (no NIC of its own) = %+v, want every NIC preferred", e)
	}
	// The GPU shares only the host bridge with mlx5_1: not a switch, and
	// its node has no NIC: every NIC.
	if e := m["cuda:0"]; len(e.Preferred) != 3 {
		t.Errorf("cuda:0 = %+v", e)
	}
}

// NVML names GPUs when it answers (its bus ids are upper case with an
// 8-digit domain), in its own order.
func TestGPUsFromNVML(t *testing.T) {
	f := dgx(t)
	nvml := func() ([]string, error) { return []string{"00000000:B4:00.0", "00000000:12:00.0"}, nil }
	topo, err := Discover(f.root, nvml)
	if err != nil {
		t.Fatal(err)
	}
	if len(topo.GPUs) != 2 || topo.GPUs[0].PCI != "00000000:B4:00.0" || topo.GPUs[0].NUMA != 1 || topo.GPUs[1].NUMA != 0 {
		t.Fatalf("GPUs %+v", topo.GPUs)
	}
	m := topo.Matrix()
	if e := m["cuda:0"]; !slices.Equal(e.Preferred, []string{"mlx5_7"}) {
		t.Errorf("cuda:0 (bus b4) = %+v", e)
	}
	if e := m["cuda:1"]; !slices.Equal(e.Preferred, []string{"mlx5_0"}) {
		t.Errorf("cuda:1 (bus 12) = %+v", e)
	}
	failing := func() ([]string, error) { return nil, errors.New("ERROR_LIBRARY_NOT_FOUND") }
	if topo, _ := Discover(f.root, failing); len(topo.GPUs) != 8 {
		t.Fatalf("sysfs fallback found %d GPUs", len(topo.GPUs))
	}
}

func TestPickSpreadsOverPreferred(t *testing.T) {
	m := Matrix{"cpu:0": {Preferred: []string{"a", "b"}, Available: []string{"c"}}}
	if m.Pick("cpu:0", 0) != "a" || m.Pick("cpu:0", 1) != "b" || m.Pick("cpu:0", -3) != "b" || m.Pick("cuda:9", 2) != "a" {
		t.Fatal("Pick")
	}
	if _, err := Discover(filepath.Join(t.TempDir(), "nope"), nil); err == nil {
		t.Fatal("a missing root accepted")
	}
	far := Matrix{"cpu:0": {Preferred: []string{}, Available: []string{"x", "y"}}, "cuda:0": {}}
	if far.Pick("cpu:0", 1) != "y" || far.Pick("cuda:0", 0) != "" {
		t.Fatal("Pick without a near NIC")
	}
}

// Only keeps the chosen NICs; a location whose near NICs were all dropped
// picks among the rest.
func TestOnlyKeepsTheChosenNICs(t *testing.T) {
	m := Matrix{
		"cpu:0":  {Preferred: []string{"a", "b"}, Available: []string{"c", "d"}},
		"cuda:0": {Preferred: []string{"a"}, Available: []string{"b", "c", "d"}},
	}
	o := m.Only([]string{"c", "b"})
	if got := o["cpu:0"]; !reflect.DeepEqual(got.Preferred, []string{"b"}) || !reflect.DeepEqual(got.Available, []string{"c"}) {
		t.Fatalf("cpu:0 %+v", got)
	}
	if o.Pick("cuda:0", 0) != "b" || o.Pick("cuda:0", 1) != "c" {
		t.Fatalf("cuda:0 without its near NIC: %+v", o["cuda:0"])
	}
	if !reflect.DeepEqual(m.Names(), []string{"a", "b", "c", "d"}) || len(m.Only(nil).Names()) != 0 {
		t.Fatal("Names")
	}
}

// The real tree of this machine (no GPU, no RDMA NIC here) and NVML
// without a driver: both answer cleanly.
func TestRealSysfsAndNVMLWithoutDriver(t *testing.T) {
	if _, err := NVMLGPUs(); err == nil {
		t.Log("NVML answered: this machine has an NVIDIA driver")
	}
	topo, err := Discover("", NVMLGPUs)
	if err != nil {
		t.Fatal(err)
	}
	m := topo.Matrix()
	if _, ok := m["cpu:0"]; !ok {
		t.Fatalf("no cpu:0 row in %v", m)
	}
	if string(m.JSON()) == "" {
		t.Fatal("empty JSON")
	}
}

func mustMatrix(t *testing.T, root string) Matrix {
	t.Helper()
	topo, err := Discover(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	return topo.Matrix()
}
