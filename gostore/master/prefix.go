// prefix.go defines PrefixLookup: how many leading pages of a request are
// stored, per tier and per host, for a router choosing where a request's
// KV cache already is (the master's HTTP /query_prefix).

package master

import (
	"slices"
	"strings"
)

// PrefixCount is a prefix length in pages (keys): in all, and of the pages
// a tier holds: host memory (Memory: a segment without a Location), device
// memory (Device: a GPU segment) and an SSD tier (Disk). Each tier's count
// is at most Matched; they need not add up to it (a page may be in two
// tiers, and one tier's run may stop before another's).
type PrefixCount struct {
	Matched int
	Memory  int
	Device  int
	Disk    int
}

// HostPrefix is the prefix one host holds: Host is a segment's name (its
// owner's "host:port") or a disk copy's endpoint.
type HostPrefix struct {
	Host string
	PrefixCount
}

// PrefixHit is PrefixLookup's answer. Hosts lists, by name, every host
// holding the first page; a host without it holds a prefix of 0 and is not
// listed.
type PrefixHit struct {
	PrefixCount
	Hosts []HostPrefix
}

// hostRun follows one host along the walk: which of its runs (any tier,
// host memory, device memory, disk) are still unbroken.
type hostRun struct {
	any, mem, dev, disk bool
}

// PrefixLookup walks keys in order and stops at the first one that is not
// readable (missing, or being written without a disk copy to serve it: as
// GetReplicas would answer), so Matched is the number of leading keys a
// client could read now. Memory counts the leading keys with a COMPLETE
// replica in host memory, Device those with one in GPU memory, Disk those
// with a readable disk copy; each host's counts
// are the leading keys it holds itself. It grants no lease and changes
// nothing: a router's question is not a use. Each key takes its shard's
// lock alone, briefly, so a lookup never holds up the pool; the answer is
// a moment of each key, not one moment of all (a key removed after the walk
// passed it still counts). It allocates the answer only (the hosts of the
// first page), nothing per key. The caller bounds len(keys).
func (c *Core) PrefixLookup(keys []string) PrefixHit {
	var hit PrefixHit
	var runs []hostRun
	for i, key := range keys {
		sh := c.shardOf(key)
		sh.mu.Lock()
		o, ok := sh.objects[key]
		if !ok || !o.readable() {
			sh.mu.Unlock()
			break
		}
		if i == 0 {
			hit.Hosts, runs = firstHosts(o)
		}
		c.extendPrefix(&hit, runs, i, o)
		sh.mu.Unlock()
		hit.Matched++
	}
	slices.SortFunc(hit.Hosts, func(a, b HostPrefix) int { return strings.Compare(a.Host, b.Host) })
	return hit
}

// firstHosts lists the hosts holding o, the first page (its shard's lock
// held): complete memory replicas' segments, then the disk copy's endpoint,
// each once.
func firstHosts(o *object) ([]HostPrefix, []hostRun) {
	var hosts []HostPrefix
	add := func(name string) {
		for _, h := range hosts {
			if h.Host == name {
				return
			}
		}
		hosts = append(hosts, HostPrefix{Host: name})
	}
	for _, r := range o.reps() {
		if r.status == replicaComplete {
			add(r.seg.desc.Name)
		}
	}
	if d := o.onDisk(); d != nil && !o.unfinished() {
		add(d.endpoint)
	}
	runs := make([]hostRun, len(hosts))
	for j := range runs {
		runs[j] = hostRun{any: true, mem: true, dev: true, disk: true}
	}
	return hosts, runs
}

// extendPrefix counts o, readable page i, into hit: the tiers' runs and each
// host's grow while unbroken (its shard's lock held).
func (c *Core) extendPrefix(hit *PrefixHit, runs []hostRun, i int, o *object) {
	mem, dev := memoryOn(o, "")
	var disk *diskCopy
	if d := o.onDisk(); d != nil && !o.unfinished() {
		disk = d
	}
	grow(&hit.PrefixCount, i, mem, dev, disk != nil)
	for j := range runs {
		run, h := &runs[j], &hit.Hosts[j]
		if !run.any {
			continue
		}
		onMem, onDev := memoryOn(o, h.Host)
		onDisk := disk != nil && disk.endpoint == h.Host
		run.mem = run.mem && onMem
		run.dev = run.dev && onDev
		run.disk = run.disk && onDisk
		run.any = onMem || onDev || onDisk
		h.Matched += b2i(run.any)
		h.Memory += b2i(run.mem)
		h.Device += b2i(run.dev)
		h.Disk += b2i(run.disk)
	}
}

// grow counts page i into p's tier runs that reached it unbroken.
func grow(p *PrefixCount, i int, mem, dev, disk bool) {
	if mem && p.Memory == i {
		p.Memory++
	}
	if dev && p.Device == i {
		p.Device++
	}
	if disk && p.Disk == i {
		p.Disk++
	}
}

// memoryOn reports whether o has a COMPLETE replica in host memory and in
// device memory, on a segment named host ("": on any segment).
func memoryOn(o *object, host string) (mem, dev bool) {
	for _, r := range o.reps() {
		if r.status != replicaComplete || (host != "" && r.seg.desc.Name != host) {
			continue
		}
		if r.seg.desc.Location == "" {
			mem = true
		} else {
			dev = true
		}
	}
	return mem, dev
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
