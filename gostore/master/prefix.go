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

// HostPrefix is the prefix one host holds. A host is a client (one
// process, one "host:port"): its memory segments and its SSD tier
// together. Host is its segment's name (the first of its segments to hold
// the first page, else its first mounted one); a client with no segment
// left (its disk copies outlive it for a while) goes by its SSD tier's
// endpoint.
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

// hostRun follows one host (its client) along the walk: which of its runs
// (any tier, host memory, device memory, disk) are still unbroken.
type hostRun struct {
	client              string
	any, mem, dev, disk bool
}

// PrefixLookup walks keys in order and stops at the first one that is not
// readable (missing, or being written without a disk copy to serve it: as
// GetReplicas would answer), so Matched is the number of leading keys a
// client could read now. Memory counts the leading keys with a COMPLETE
// replica in host memory, Device those with one in GPU memory, Disk those
// with a readable disk copy; each host's counts are the leading keys it
// holds itself. It grants no lease and changes nothing: a router's
// question is not a use. Each key takes its shard's lock alone, briefly,
// so a lookup never holds up the pool; the answer is a moment of each key,
// not one moment of all (a key removed after the walk passed it still
// counts). It allocates the answer only (the hosts of the first page),
// nothing per key. The caller bounds len(keys).
func (c *Core) PrefixLookup(keys []string) PrefixHit {
	// The segment list names the hosts of disk copies; it is read before
	// any shard lock (segs is never taken under one) and, copy-on-write,
	// stays valid after.
	c.segs.RLock()
	segs := c.segs.list
	c.segs.RUnlock()
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
			hit.Hosts, runs = firstHosts(o, segs)
		}
		extendPrefix(&hit, runs, i, o)
		sh.mu.Unlock()
		hit.Matched++
	}
	slices.SortFunc(hit.Hosts, func(a, b HostPrefix) int { return strings.Compare(a.Host, b.Host) })
	return hit
}

// readableDisk is o's disk copy when it can serve a read, else nil.
func readableDisk(o *object) *diskCopy {
	if d := o.onDisk(); d != nil && !o.unfinished() {
		return d
	}
	return nil
}

// firstHosts lists the hosts holding o, the first page (its shard's lock
// held): the owners of its complete memory replicas, then of its disk
// copy, each once.
func firstHosts(o *object, segs []*segment) ([]HostPrefix, []hostRun) {
	var hosts []HostPrefix
	var runs []hostRun
	add := func(client, name string) {
		for _, r := range runs {
			if r.client == client {
				return
			}
		}
		hosts = append(hosts, HostPrefix{Host: name})
		runs = append(runs, hostRun{client: client, any: true, mem: true, dev: true, disk: true})
	}
	for _, r := range o.reps() {
		if r.status == replicaComplete {
			add(r.seg.desc.ClientID, r.seg.desc.Name)
		}
	}
	if d := readableDisk(o); d != nil {
		name := d.endpoint
		for _, s := range segs {
			if s.desc.ClientID == d.client {
				name = s.desc.Name
				break
			}
		}
		add(d.client, name)
	}
	return hosts, runs
}

// extendPrefix counts o, readable page i, into hit: the tiers' runs and each
// host's grow while unbroken (its shard's lock held).
func extendPrefix(hit *PrefixHit, runs []hostRun, i int, o *object) {
	mem, dev := memoryOf(o, "")
	disk := readableDisk(o)
	grow(&hit.PrefixCount, i, mem, dev, disk != nil)
	for j := range runs {
		run, h := &runs[j], &hit.Hosts[j]
		if !run.any {
			continue
		}
		onMem, onDev := memoryOf(o, run.client)
		onDisk := disk != nil && disk.client == run.client
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

// memoryOf reports whether o has a COMPLETE replica in host memory and in
// device memory, on a segment of client ("": of any client).
func memoryOf(o *object, client string) (mem, dev bool) {
	for _, r := range o.reps() {
		if r.status != replicaComplete || (client != "" && r.seg.desc.ClientID != client) {
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
