package memlimit

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gostore/gostore/gostore/wire"
)

// Bound is one limit on the memory this process may still take.
type Bound struct {
	Free uint64 // bytes still free under it
	What string // the bound and its numbers, for a log line
}

// Probe reads the bounds under Root ("" is "/"): a test points it at a
// fake tree of proc/ and sys/ files.
type Probe struct{ Root string }

// Ask is one piece of memory about to be taken: its setting's name and size.
type Ask struct {
	Name  string
	Bytes uint64
}

// Check is Probe{}.Check: the real host's bounds.
func Check(asks ...Ask) error { return Probe{}.Check(asks...) }

// Check refuses, with ErrInvalidParams naming each size asked and the bound
// exceeded, when the asks together exceed the tightest bound; nil when
// they fit or no bound can be read.
func (p Probe) Check(asks ...Ask) error {
	var total uint64
	parts := make([]string, 0, len(asks))
	for _, a := range asks {
		if a.Bytes == 0 {
			continue
		}
		if total+a.Bytes < total {
			total = ^uint64(0)
		} else {
			total += a.Bytes
		}
		parts = append(parts, fmt.Sprintf("%s %s", a.Name, Size(a.Bytes)))
	}
	if total == 0 {
		return nil
	}
	b, ok := p.Tightest()
	if !ok || total <= b.Free {
		return nil
	}
	asked := strings.Join(parts, " + ")
	if len(parts) > 1 {
		asked += " = " + Size(total)
	}
	return wire.Errorf(wire.ErrInvalidParams,
		"%s (%d bytes) asked, more than this process may take now: %s (%d bytes) free under %s; "+
			"the memory is taken up front: ask for less, or free memory", asked, total, Size(b.Free), b.Free, b.What)
}

// Tightest returns the bound with the least free memory; false when none
// can be read.
func (p Probe) Tightest() (Bound, bool) {
	bs := p.Bounds()
	if len(bs) == 0 {
		return Bound{}, false
	}
	t := bs[0]
	for _, b := range bs[1:] {
		if b.Free < t.Free {
			t = b
		}
	}
	return t, true
}

// Bounds returns every bound that can be read (see the package text).
func (p Probe) Bounds() []Bound {
	var bs []Bound
	info := p.meminfo()
	if avail, ok := info["MemAvailable"]; ok {
		bs = append(bs, Bound{avail, "the host's MemAvailable (/proc/meminfo)"})
	}
	if v, ok := p.readUint("proc/sys/vm/overcommit_memory"); ok && v == 2 {
		limit, okL := info["CommitLimit"]
		used, okU := info["Committed_AS"]
		if okL && okU {
			bs = append(bs, Bound{sub(limit, used), fmt.Sprintf(
				"the host's commit limit (vm.overcommit_memory=2: CommitLimit %s less Committed_AS %s)", Size(limit), Size(used))})
		}
	}
	return append(bs, p.cgroupBounds()...)
}

func sub(a, b uint64) uint64 {
	if a > b {
		return a - b
	}
	return 0
}

func (p Probe) path(rel string) string {
	root := p.Root
	if root == "" {
		root = "/"
	}
	return filepath.Join(root, rel)
}

// meminfo reads /proc/meminfo's "Name: N kB" lines, in bytes.
func (p Probe) meminfo() map[string]uint64 {
	m := map[string]uint64{}
	b, err := os.ReadFile(p.path("proc/meminfo"))
	if err != nil {
		return m
	}
	for _, line := range strings.Split(string(b), "\n") {
		name, rest, ok := strings.Cut(line, ":")
		f := strings.Fields(rest)
		if !ok || len(f) != 2 || f[1] != "kB" {
			continue
		}
		if kb, err := strconv.ParseUint(f[0], 10, 64); err == nil && kb <= ^uint64(0)>>10 {
			m[name] = kb << 10
		}
	}
	return m
}

// readUint reads a file holding one decimal number; "max" and the like are
// not one.
func (p Probe) readUint(rel string) (uint64, bool) {
	b, err := os.ReadFile(p.path(rel))
	if err != nil {
		return 0, false
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	return v, err == nil
}

// hierarchy is a mounted cgroup hierarchy that has the memory controller.
type hierarchy struct {
	v2          bool
	root, mount string // the mount's root within the hierarchy, and where it is mounted
}

// cgroupBounds returns, for each memory hierarchy this process is in, the
// bound of its cgroup and of every ancestor that has a limit.
func (p Probe) cgroupBounds() []Bound {
	own := p.ownCgroups()
	var bs []Bound
	for _, h := range p.hierarchies() {
		cg, ok := own[h.v2]
		if !ok {
			continue
		}
		rel, ok := within(cg, h.root)
		if !ok {
			continue // the process's cgroup is outside what this mount shows
		}
		limitF, usageF, ver := "memory.limit_in_bytes", "memory.usage_in_bytes", "v1"
		if h.v2 {
			limitF, usageF, ver = "memory.max", "memory.current", "v2"
		}
		for {
			dir := filepath.Join(h.mount, rel)
			limit, okL := p.readUint(filepath.Join(dir, limitF))
			usage, okU := p.readUint(filepath.Join(dir, usageF))
			if okL && okU {
				bs = append(bs, Bound{sub(limit, usage), fmt.Sprintf("the memory cgroup %s (%s: %s %s less %s %s)",
					filepath.Join(h.root, rel), ver, limitF, Size(limit), usageF, Size(usage))})
			}
			if rel == "/" || rel == "." || rel == "" {
				break
			}
			rel = filepath.Dir(rel)
		}
	}
	return bs
}

// within returns cg relative to the mount's root ("/" for the root itself).
func within(cg, root string) (string, bool) {
	cg, root = filepath.Clean(cg), filepath.Clean(root)
	if root == "/" {
		return cg, true
	}
	if cg == root {
		return "/", true
	}
	if rest, ok := strings.CutPrefix(cg, root+"/"); ok {
		return "/" + rest, true
	}
	return "", false
}

// ownCgroups reads /proc/self/cgroup: this process's cgroup in the v2
// hierarchy (key true) and in the v1 hierarchy with memory (key false).
func (p Probe) ownCgroups() map[bool]string {
	own := map[bool]string{}
	b, err := os.ReadFile(p.path("proc/self/cgroup"))
	if err != nil {
		return own
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		if f[0] == "0" && f[1] == "" {
			own[true] = f[2]
			continue
		}
		for _, c := range strings.Split(f[1], ",") {
			if c == "memory" {
				own[false] = f[2]
			}
		}
	}
	return own
}

// hierarchies reads /proc/self/mountinfo for cgroup2 mounts and cgroup (v1)
// mounts with the memory controller; without it, the usual places.
func (p Probe) hierarchies() []hierarchy {
	b, err := os.ReadFile(p.path("proc/self/mountinfo"))
	if err != nil {
		return []hierarchy{{true, "/", "/sys/fs/cgroup"}, {false, "/", "/sys/fs/cgroup/memory"}}
	}
	var hs []hierarchy
	seen := map[bool]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 3 {
			continue
		}
		var v2 bool
		switch g[0] {
		case "cgroup2":
			v2 = true
		case "cgroup":
			if !hasOpt(g[2], "memory") {
				continue
			}
		default:
			continue
		}
		if seen[v2] { // the same hierarchy mounted twice: the first will do
			continue
		}
		seen[v2] = true
		hs = append(hs, hierarchy{v2, unescape(f[3]), unescape(f[4])})
	}
	return hs
}

func hasOpt(opts, want string) bool {
	for _, o := range strings.Split(opts, ",") {
		if o == want {
			return true
		}
	}
	return false
}

// unescape undoes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// Size writes n bytes for a person: "1.5 GiB", "64.02 GiB", "16 MiB", "512 B".
func Size(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n), -1
	for v >= unit && i < 5 {
		v /= unit
		i++
	}
	s := strings.TrimRight(strconv.FormatFloat(v, 'f', 2, 64), "0")
	s = strings.TrimSuffix(s, ".")
	return s + " " + []string{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}[i]
}
