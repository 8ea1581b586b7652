// placement.go decides which segments receive an object's replicas.

package master

import (
	"fmt"

	"github.com/gostore/gostore/gostore/wire"
)

// placer allocates replicas for the keys of one PutStart batch. The segment
// list is snapshotted once per batch, not once per key.
type placer struct {
	c         *Core
	want      int
	preferred []*segment
	near      []*segment // on the writer's host, when SameNode asks for it
	all       []*segment

	// noSpace's survey of the pool, once per batch: the largest segment
	// and the account of a full pool.
	surveyed    bool
	largest     uint64
	full        string
	quarantined int // restored segments still in their quarantine
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

// noSpace explains why an object of size bytes found no room and whether
// waiting may bring it. A missing segment or an object larger than every
// segment will not change by waiting. A full pool asks for an eviction pass
// (the next Tick runs it); room is coming when the last pass found objects
// it may free, now or once their disk copies exist, and unknown until a pass
// has looked.
func (p *placer) noSpace(size uint64) (string, wire.SpaceOutlook) {
	if len(p.all) == 0 {
		return "no segment is mounted: no client contributes memory", wire.SpaceNone
	}
	if !p.surveyed {
		var used, capacity uint64
		n := 0
		for _, s := range p.all {
			s.mu.Lock()
			if s.quarantineUntil != 0 {
				p.quarantined++
			} else if s.drainAt == 0 { // being unmounted: takes nothing new
				used += s.alloc.Used()
				capacity += s.alloc.Capacity()
				p.largest = max(p.largest, s.alloc.Capacity())
				n++
			}
			s.mu.Unlock()
		}
		p.full = fmt.Sprintf("the pool is full (%d of %d bytes used in %d segments)", used, capacity, n)
		p.surveyed = true
		if n == 0 {
			p.full = "every segment is being unmounted (graceful unmount): none takes new objects"
		}
	}
	if p.quarantined > 0 && p.largest == 0 {
		// Not full: restored after a master restart, these take new
		// objects when the quarantine ends (Config.RestoreQuarantine).
		// Eviction would free nothing they can use before then.
		return "the master restarted: its restored segments take new objects once writes in flight at the stop are over", wire.SpaceComing
	}
	if p.largest == 0 {
		return p.full, wire.SpaceNone
	}
	if size > p.largest {
		return fmt.Sprintf("an object of %d bytes is larger than any segment (the largest holds %d)", size, p.largest), wire.SpaceNone
	}
	c := p.c
	c.evictSoon.Store(true)
	if n := c.reclaimable.Load(); n > 0 {
		return fmt.Sprintf("%s; eviction is freeing room (%d objects may go, some once their disk copy exists)", p.full, n), wire.SpaceComing
	}
	return p.full + "; nothing was evictable at the last eviction pass (leased, pinned, or being written)", wire.SpaceUnknown
}
