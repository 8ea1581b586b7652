// placement.go decides which segments receive an object's replicas.
package master

import "github.com/gostore/gostore/gostore/wire"

// placer allocates replicas for the keys of one PutStart batch. The segment
// list is snapshotted once per batch, not once per key.
type placer struct {
	c         *Core
	want      int
	preferred []*segment
	near      []*segment // on the writer's host, when SameNode asks for it
	all       []*segment
}

func (c *Core) newPlacer(cfg wire.ReplicaConfig, hostID string) *placer {
	p := &placer{c: c, want: max(cfg.ReplicaNum, 1)}
	c.segs.RLock()
	p.all = c.segs.list // copy-on-write: safe to keep
	for _, name := range cfg.Preferred {
		if s, ok := c.segs.byName[name]; ok {
			p.preferred = append(p.preferred, s)
		}
	}
	c.segs.RUnlock()
	// More replicas than segments cannot exist; the cap also keeps a huge
	// replica_num from sizing an allocation.
	p.want = min(p.want, max(len(p.all), 1))
	if cfg.SameNode && hostID != "" {
		for _, s := range p.all {
			if s.desc.HostID == hostID {
				p.near = append(p.near, s)
			}
		}
	}
	return p
}

// place allocates size bytes on up to want distinct segments: preferred
// segments first, in order, then the others starting at a random one. It is
// best effort: fewer replicas than wanted is success, none is failure.
func (p *placer) place(size uint64) []replica {
	reps := make([]replica, 0, p.want)
	used := func(s *segment) bool {
		for _, r := range reps {
			if r.seg == s {
				return true
			}
		}
		return false
	}
	try := func(s *segment) {
		if len(reps) == p.want || used(s) {
			return
		}
		if off, ok := s.allocate(size); ok {
			reps = append(reps, replica{seg: s, offset: off})
		}
	}
	for _, s := range p.preferred {
		try(s)
	}
	p.tryFromRandomStart(p.near, try, func() bool { return len(reps) == p.want })
	p.tryFromRandomStart(p.all, try, func() bool { return len(reps) == p.want })
	return reps
}

// tryFromRandomStart walks segs circularly from a random index, so load
// spreads over segments with room, until done reports true.
func (p *placer) tryFromRandomStart(segs []*segment, try func(*segment), done func() bool) {
	n := len(segs)
	if n == 0 || done() {
		return
	}
	p.c.randMu.Lock()
	start := p.c.cfg.Rand.IntN(n)
	p.c.randMu.Unlock()
	for i := 0; i < n && !done(); i++ {
		try(segs[(start+i)%n])
	}
}
