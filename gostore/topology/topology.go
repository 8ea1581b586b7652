// topology.go reads NICs, GPUs and NUMA nodes from sysfs (or NVML) and
// builds the topology matrix from them.

package topology

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// NIC is an RDMA device.
type NIC struct {
	Name string   // mlx5_0
	PCI  string   // 0000:3b:00.0
	Path []string // sysfs device path below devices/, one element per level
	NUMA int      // -1 when unknown
}

// GPU is a GPU by CUDA index.
type GPU struct {
	Index int
	PCI   string
	Path  []string
	NUMA  int
}

// Topology is what Discover found.
type Topology struct {
	NICs  []NIC
	GPUs  []GPU
	Nodes []int // NUMA nodes
}

// Entry is one row of the matrix (Mooncake's JSON names).
type Entry struct {
	Preferred []string `json:"preferred_hca"`
	Available []string `json:"avail_hca"`
}

// Matrix maps "cpu:N" and "cuda:N" to their NICs.
type Matrix map[string]Entry

// GPUSource lists GPUs by index with their PCI bus ids (NVML); nil or an
// error means "ask sysfs".
type GPUSource func() ([]string, error)

// Discover reads the tree under root ("" means /sys). gpus, when not nil,
// is asked first for the GPUs' PCI bus ids.
func Discover(root string, gpus GPUSource) (*Topology, error) {
	if root == "" {
		root = "/sys"
	}
	if st, err := os.Stat(root); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("topology: sysfs root %s is not a directory", root)
	}
	t := &Topology{}
	var err error
	if t.Nodes, err = numaNodes(root); err != nil {
		return nil, err
	}
	if t.NICs, err = nics(root); err != nil {
		return nil, err
	}
	var ids []string
	if gpus != nil {
		if ids, err = gpus(); err != nil {
			ids = nil
		}
	}
	if ids == nil {
		ids = sysfsGPUs(root)
	}
	for i, id := range ids {
		path, numa := pciDevice(root, id)
		t.GPUs = append(t.GPUs, GPU{Index: i, PCI: id, Path: path, NUMA: numa})
	}
	return t, nil
}

func numaNodes(root string) ([]int, error) {
	des, err := os.ReadDir(filepath.Join(root, "devices/system/node"))
	if err != nil {
		return []int{0}, nil // no NUMA information: one node
	}
	var out []int
	for _, de := range des {
		if n, err := strconv.Atoi(strings.TrimPrefix(de.Name(), "node")); err == nil && strings.HasPrefix(de.Name(), "node") {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		out = []int{0}
	}
	sort.Ints(out)
	return out, nil
}

func nics(root string) ([]NIC, error) {
	dir := filepath.Join(root, "class/infiniband")
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil // no RDMA devices
	}
	var out []NIC
	for _, de := range des {
		dev, err := filepath.EvalSymlinks(filepath.Join(dir, de.Name(), "device"))
		if err != nil {
			continue // a device without PCI information (soft RoCE): not placeable
		}
		out = append(out, NIC{Name: de.Name(), PCI: filepath.Base(dev), Path: devicePath(root, dev), NUMA: readNUMA(dev)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// sysfsGPUs lists NVIDIA display/3D controllers in PCI address order.
func sysfsGPUs(root string) []string {
	dir := filepath.Join(root, "bus/pci/devices")
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, de := range des {
		d := filepath.Join(dir, de.Name())
		class, vendor := readString(filepath.Join(d, "class")), readString(filepath.Join(d, "vendor"))
		if strings.HasPrefix(class, "0x03") && strings.EqualFold(vendor, "0x10de") {
			out = append(out, de.Name())
		}
	}
	sort.Strings(out)
	return out
}

// pciDevice resolves a PCI bus id to its device path and NUMA node.
func pciDevice(root, id string) ([]string, int) {
	dev, err := filepath.EvalSymlinks(filepath.Join(root, "bus/pci/devices", normalizeBusID(id)))
	if err != nil {
		return nil, -1
	}
	return devicePath(root, dev), readNUMA(dev)
}

// normalizeBusID turns NVML's "00000000:3B:00.0" into sysfs's "0000:3b:00.0".
func normalizeBusID(id string) string {
	id = strings.ToLower(id)
	if parts := strings.SplitN(id, ":", 2); len(parts) == 2 && len(parts[0]) > 4 {
		id = parts[0][len(parts[0])-4:] + ":" + parts[1]
	}
	return id
}

// devicePath is dev's path below <root>/devices, split into levels.
func devicePath(root, dev string) []string {
	base, err := filepath.EvalSymlinks(filepath.Join(root, "devices"))
	if err != nil {
		base = filepath.Join(root, "devices")
	}
	rel, err := filepath.Rel(base, dev)
	if err != nil || strings.HasPrefix(rel, "..") {
		return []string{filepath.Base(dev)}
	}
	return strings.Split(rel, string(filepath.Separator))
}

func readNUMA(dev string) int {
	n, err := strconv.Atoi(readString(filepath.Join(dev, "numa_node")))
	if err != nil || n < 0 {
		return -1
	}
	return n
}

func readString(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// shared is how many levels two device paths share.
func shared(a, b []string) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// Matrix builds the topology matrix.
func (t *Topology) Matrix() Matrix {
	m := Matrix{}
	for _, node := range t.Nodes {
		var near []string
		for _, n := range t.NICs {
			if n.NUMA == node {
				near = append(near, n.Name)
			}
		}
		m[fmt.Sprintf("cpu:%d", node)] = t.row(near)
	}
	for _, g := range t.GPUs {
		// Deepest shared bridge below the host bridge (levels: the host
		// bridge "pci0000:xx" is level 0, so sharing two or more levels
		// means a common switch or root port).
		best := 1
		var near []string
		for _, n := range t.NICs {
			switch d := shared(g.Path, n.Path); {
			case d > best:
				best, near = d, []string{n.Name}
			case d == best && d > 1:
				near = append(near, n.Name)
			}
		}
		if len(near) == 0 && g.NUMA >= 0 {
			for _, n := range t.NICs {
				if n.NUMA == g.NUMA {
					near = append(near, n.Name)
				}
			}
		}
		m[fmt.Sprintf("cuda:%d", g.Index)] = t.row(near)
	}
	return m
}

// row makes an entry: near NICs preferred, the rest available; nothing
// near means every NIC is preferred.
func (t *Topology) row(near []string) Entry {
	e := Entry{Preferred: []string{}, Available: []string{}}
	if len(near) == 0 {
		for _, n := range t.NICs {
			e.Preferred = append(e.Preferred, n.Name)
		}
		return e
	}
	in := map[string]bool{}
	for _, n := range near {
		in[n] = true
	}
	for _, n := range t.NICs {
		if in[n.Name] {
			e.Preferred = append(e.Preferred, n.Name)
		} else {
			e.Available = append(e.Available, n.Name)
		}
	}
	return e
}

// JSON is the matrix as Mooncake prints it.
func (m Matrix) JSON() []byte {
	b, _ := json.Marshal(m)
	return b
}

// Pick returns the NIC a buffer at location should use: one of its
// preferred NICs, spread by hint (e.g. a segment or transfer index), or of
// the available ones when none is near; "" when the host has no NIC. An
// unknown location is treated as cpu:0.
func (m Matrix) Pick(location string, hint int) string {
	e, ok := m[location]
	if !ok {
		e = m["cpu:0"]
	}
	from := e.Preferred
	if len(from) == 0 {
		from = e.Available
	}
	if len(from) == 0 {
		return ""
	}
	if hint < 0 {
		hint = -hint
	}
	return from[hint%len(from)]
}

// Only returns the matrix restricted to the named NICs (the devices a
// deployment chose); a location whose near NICs were all left out falls
// back to the remaining ones as available.
func (m Matrix) Only(names []string) Matrix {
	keep := map[string]bool{}
	for _, n := range names {
		keep[n] = true
	}
	filter := func(xs []string) []string {
		out := []string{}
		for _, x := range xs {
			if keep[x] {
				out = append(out, x)
			}
		}
		return out
	}
	out := make(Matrix, len(m))
	for loc, e := range m {
		out[loc] = Entry{Preferred: filter(e.Preferred), Available: filter(e.Available)}
	}
	return out
}

// Names lists every NIC the matrix knows, sorted.
func (m Matrix) Names() []string {
	seen := map[string]bool{}
	for _, e := range m {
		for _, n := range append(append([]string{}, e.Preferred...), e.Available...) {
			seen[n] = true
		}
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
