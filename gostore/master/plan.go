// plan.go defines the master's side of the plan API: the members (clients
// whose segments host plan objects), numbered by rank in join order, and
// eviction down to a usage target.

package master

import (
	"sort"
	"sync"

	"github.com/gostore/gostore/gostore/wire"
)

// planMembers maps member segments to ranks. A rank is never reused while
// the master runs: a process keeps its number while it lives, and one that
// leaves does not hand its number to another.
type planMembers struct {
	sync.Mutex
	bySeg map[uint64]int
	next  int
}

// PlanJoin makes the segment named name (mounted by clientID) a plan
// member and returns its rank; joining again returns the same rank.
func (c *Core) PlanJoin(clientID, name string) (int, error) {
	c.touch(clientID)
	c.segs.RLock()
	s, ok := c.segs.byName[name]
	c.segs.RUnlock()
	if !ok || s.desc.ClientID != clientID {
		return 0, wire.Errorf(wire.ErrSegmentNotFound, "segment %q is not mounted by this client", name)
	}
	c.plan.Lock()
	defer c.plan.Unlock()
	if c.plan.bySeg == nil {
		c.plan.bySeg = make(map[uint64]int)
	}
	if r, ok := c.plan.bySeg[s.desc.ID]; ok {
		return r, nil
	}
	r := c.plan.next
	c.plan.next++
	c.plan.bySeg[s.desc.ID] = r
	return r, nil
}

// PlanMembers lists the members whose segments are still mounted, by rank.
func (c *Core) PlanMembers() []wire.PlanMember {
	c.plan.Lock()
	ranks := make(map[uint64]int, len(c.plan.bySeg))
	for id, r := range c.plan.bySeg {
		ranks[id] = r
	}
	c.plan.Unlock()
	c.segs.RLock()
	var out []wire.PlanMember
	var gone []uint64
	for id, r := range ranks {
		if s, ok := c.segs.byID[id]; ok {
			s.mu.Lock()
			used := s.alloc.Used()
			s.mu.Unlock()
			out = append(out, wire.PlanMember{Rank: r, Seg: s.desc, Used: used})
		} else {
			gone = append(gone, id)
		}
	}
	c.segs.RUnlock()
	if len(gone) > 0 {
		c.plan.Lock()
		for _, id := range gone {
			delete(c.plan.bySeg, id)
		}
		c.plan.Unlock()
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Rank < out[j].Rank })
	return out
}

// EvictUntil runs eviction passes until the pool's usage is below ratio,
// or a pass frees nothing. It returns what it evicted and the usage left.
func (c *Core) EvictUntil(ratio float64) (EvictResult, float64) {
	var total EvictResult
	for pass := 0; pass < 64 && c.usage() >= ratio; pass++ {
		// Free about what separates usage from the target, at least the
		// configured share, so few passes get there.
		share := min(1, max(c.cfg.EvictionRatio, (c.usage()-ratio)*1.1))
		res := c.evictPass(c.now(), share)
		total.Objects += res.Objects
		total.Bytes += res.Bytes
		total.Candidates = res.Candidates
		if res.Objects == 0 {
			break
		}
	}
	return total, c.usage()
}
