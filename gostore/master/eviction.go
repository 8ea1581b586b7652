// eviction.go defines the space-reclaiming rules: eviction passes, the
// quarantine of abandoned puts, and cleanup after a writer dies.
package master

import (
	"math"
	"slices"
)

// discardedPut holds the ranges of a put that was taken over. They stay
// allocated until releaseAt because its writer may still be copying.
type discardedPut struct {
	replicas  []replica
	size      uint64
	releaseAt int64
}

// discard moves ranges to the quarantine.
func (c *Core) discard(reps []replica, size uint64, now int64) {
	if len(reps) == 0 {
		return
	}
	d := discardedPut{replicas: reps, size: size, releaseAt: now + int64(c.cfg.PutStartReleaseTimeout)}
	c.discarded.Lock()
	c.discarded.list = append(c.discarded.list, d) // releaseAt grows with now
	c.discarded.Unlock()
}

// releaseDiscarded frees quarantined ranges whose time has come.
func (c *Core) releaseDiscarded(now int64) {
	c.discarded.Lock()
	n := 0
	for n < len(c.discarded.list) && c.discarded.list[n].releaseAt <= now {
		n++
	}
	due := slices.Clone(c.discarded.list[:n])
	c.discarded.list = slices.Delete(c.discarded.list, 0, n)
	c.discarded.Unlock()
	for _, d := range due {
		for _, r := range d.replicas {
			r.seg.free(r.offset, d.size, &c.stats)
		}
	}
	c.stats.DiscardedReleased.Add(int64(len(due)))
}

// revokePutsOf drops the unfinished puts of dead writers: nobody will ever
// finish them, and nobody is copying into them any more.
func (c *Core) revokePutsOf(dead map[string]bool) {
	var n int64
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		for key, o := range sh.objects {
			if dead[o.writer] && o.unfinished() {
				o.release(&c.stats)
				delete(sh.objects, key)
				n++
			}
		}
		sh.mu.Unlock()
	}
	c.stats.PutsOfDeadClients.Add(n)
}

// evictable classifies o for eviction: never an unfinished, leased (being
// read) or hard-pinned object; soft-pinned ones only in the second pass.
func evictable(o *object, now int64) (ok, soft bool) {
	if o.hardPin || o.leased(now) || o.unfinished() || o.tasks > 0 || len(o.replicas) == 0 {
		return false, false
	}
	return true, o.softPinned(now)
}

// usage is the pool's used/capacity ratio.
func (c *Core) usage() float64 {
	c.segs.RLock()
	list := c.segs.list
	c.segs.RUnlock()
	var used, capacity uint64
	for _, s := range list {
		s.mu.Lock()
		used += s.alloc.Used()
		capacity += s.alloc.Capacity()
		s.mu.Unlock()
	}
	if capacity == 0 {
		return 0
	}
	return float64(used) / float64(capacity)
}

// EvictResult reports what an eviction pass did.
type EvictResult struct {
	Candidates int // evictable objects seen
	Objects    int // objects evicted
	Bytes      uint64
}

// Evict runs one eviction pass now: it frees about
// max(EvictionRatio, usage − HighWatermark + EvictionRatio) of the evictable
// objects, least recently used first, non-pinned before soft-pinned (the
// latter only if AllowEvictSoftPinned).
//
// It finds the age threshold with a selection over the candidates' ages
// instead of sorting them, then evicts in a second sweep, so a pass over a
// million objects costs two scans and no sort.
func (c *Core) Evict() EvictResult {
	now := c.now()
	ratio := max(c.cfg.EvictionRatio, c.usage()-c.cfg.HighWatermark+c.cfg.EvictionRatio)
	ratio = min(ratio, 1)
	var plain, soft []int64
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		for _, o := range sh.objects {
			if ok, isSoft := evictable(o, now); ok {
				if isSoft {
					soft = append(soft, o.lastUse)
				} else {
					plain = append(plain, o.lastUse)
				}
			}
		}
		sh.mu.Unlock()
	}
	res := EvictResult{Candidates: len(plain) + len(soft)}
	want := int(math.Ceil(ratio * float64(res.Candidates)))
	c.evictOldest(now, plain, min(want, len(plain)), false, &res)
	if left := want - res.Objects; left > 0 && c.cfg.AllowEvictSoftPinned {
		c.evictOldest(now, soft, min(left, len(soft)), true, &res)
	}
	c.stats.EvictionPasses.Add(1)
	c.stats.EvictedObjects.Add(int64(res.Objects))
	c.stats.EvictedBytes.Add(int64(res.Bytes))
	return res
}

// evictOldest evicts up to n objects of one class (soft-pinned or not) whose
// lastUse is among the n oldest of ages.
func (c *Core) evictOldest(now int64, ages []int64, n int, soft bool, res *EvictResult) {
	if n <= 0 {
		return
	}
	threshold := nthSmallest(ages, n-1)
	evicted := 0
	defer func() { res.Objects += evicted }()
	for i := range c.shards {
		if evicted == n {
			return
		}
		sh := &c.shards[i]
		sh.mu.Lock()
		for key, o := range sh.objects {
			if evicted == n {
				break
			}
			ok, isSoft := evictable(o, now)
			if !ok || isSoft != soft || o.lastUse > threshold {
				continue
			}
			res.Bytes += o.size * uint64(len(o.replicas))
			o.release(&c.stats)
			delete(sh.objects, key)
			evicted++
		}
		sh.mu.Unlock()
	}
}

// nthSmallest returns the k-th smallest value of a (0-based), reordering a.
// Quickselect with a middle pivot: expected linear time.
func nthSmallest(a []int64, k int) int64 {
	lo, hi := 0, len(a)-1
	for lo < hi {
		pivot := a[lo+(hi-lo)/2]
		i, j := lo, hi
		for i <= j {
			for a[i] < pivot {
				i++
			}
			for a[j] > pivot {
				j--
			}
			if i <= j {
				a[i], a[j] = a[j], a[i]
				i++
				j--
			}
		}
		switch {
		case k <= j:
			hi = j
		case k >= i:
			lo = i
		default:
			return a[k]
		}
	}
	return a[k]
}
