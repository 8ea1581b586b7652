// eviction.go defines the space-reclaiming rules: eviction passes, the
// quarantine of abandoned puts, and cleanup after a writer dies.

package master

import (
	"math"
	"runtime"
	"slices"
	"sync/atomic"

	"github.com/gostore/gostore/gostore/internal/fanout"
)

// discardedPut holds the ranges of a put that was taken over. They stay
// allocated until releaseAt because its writer may still be copying.
type discardedPut struct {
	replicas  []replica
	size      uint64
	releaseAt int64
	hold      uint64 // its id in the journal (0: none)
}

// discard moves ranges to the quarantine.
func (c *Core) discard(reps []replica, size uint64, now int64) {
	if len(reps) == 0 {
		return
	}
	d := discardedPut{replicas: reps, size: size, releaseAt: now + int64(c.cfg.PutStartReleaseTimeout)}
	d.hold = c.holdRanges(reps, size, d.releaseAt)
	c.discarded.Lock()
	c.discarded.list = append(c.discarded.list, d) // releaseAt grows with now
	c.discarded.Unlock()
	c.stats.Discarded.Add(1)
}

// reclaimShardsPerTick is how many shards one Tick looks through for
// abandoned writes: every shard once per 64 ticks, at a 64th of the cost
// of a full sweep per tick.
const reclaimShardsPerTick = NumShards / 64

// reclaimAbandoned ends writes that never finished: an unfinished object
// older than PutStartDiscardTimeout whose writer is alive but stuck (a
// plan whose producer never commits, say) would otherwise hold its ranges
// and its key until a new put of the key took it over. Its PROCESSING
// ranges go to the quarantine (the writer may still copy into them); an
// object left with no replica disappears, or lives on from its disk copy.
func (c *Core) reclaimAbandoned(now int64) {
	first := int(c.reclaimCursor.Add(reclaimShardsPerTick)-reclaimShardsPerTick) % NumShards
	var n int64
	for i := first; i < first+reclaimShardsPerTick; i++ {
		sh := &c.shards[i%NumShards]
		sh.mu.Lock()
		for key, o := range sh.objects {
			if !o.unfinished() || now-o.started < int64(c.cfg.PutStartDiscardTimeout) || o.tasks > 0 {
				continue
			}
			c.discard(o.takeReplicas(replicaProcessing), o.size, now)
			c.settle(sh, key, o)
			n++
		}
		sh.mu.Unlock()
	}
	c.stats.PutsReclaimed.Add(n)
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
		c.releaseHold(d.hold) // reported first: see object.release
		freeRanges(d.replicas, d.size, &c.stats)
	}
	c.stats.DiscardedReleased.Add(int64(len(due)))
}

// forgetClients drops what dead clients leave behind: their unfinished puts
// (nobody will finish them, nobody copies into them any more) and, with
// disks, the disk copies in their SSD tiers (unreachable now). Objects left
// with no replica disappear.
func (c *Core) forgetClients(dead map[string]bool, disks bool) {
	c.tiers.Lock()
	for id := range dead {
		c.offload.forget(id) // drops are per directory: they wait for its next holder
		if disks {
			delete(c.tiers.drained, id)
			delete(c.tiers.byClient, id)
		}
	}
	c.tiers.Unlock()
	var n int64
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		for key, o := range sh.objects {
			if dead[o.writer] && o.unfinished() {
				f := o.release()
				n++
				if o.disk == nil || dead[o.disk.client] {
					delete(sh.objects, key)
					c.record(key, nil)
					f.free(&c.stats)
					continue
				} // a rewrite that never ended: the disk keeps the last value
				c.record(key, o)
				f.free(&c.stats)
			}
			if disks && o.disk != nil && dead[o.disk.client] {
				o.disk = nil
				c.settle(sh, key, o)
			}
		}
		sh.mu.Unlock()
	}
	c.stats.PutsOfDeadClients.Add(n)
}

// evictable classifies o for eviction: never an unfinished, leased (being
// read) or hard-pinned object, nor one without memory replicas, nor one
// without a disk copy that its writer's call still holds (PutEndHold);
// soft-pinned ones only in the second pass. With the SSD tier on, an
// object held by a client with a tier goes only once its disk copy exists
// (it waits for its offload); objects on segments without a tier are
// evicted as before.
func (c *Core) evictable(o *object, now int64) (ok, soft bool) {
	if o.hardPin || o.leased(now) || o.unfinished() || o.tasks > 0 || len(o.replicas) == 0 || o.heldInCall(now) {
		return false, false
	}
	if c.waitsForDisk(o) {
		return false, false
	}
	return true, o.softPinned(now)
}

func (c *Core) waitsForDisk(o *object) bool {
	return c.cfg.EnableOffload && o.disk == nil && o.offloader() != ""
}

// awaitsOffload reports an object eviction would take but for its missing
// disk copy.
func (c *Core) awaitsOffload(o *object, now int64) bool {
	return c.waitsForDisk(o) && !o.hardPin && !o.leased(now) &&
		!o.unfinished() && o.tasks == 0 && len(o.replicas) > 0
}

// usage is the pool's used/capacity ratio.
func (c *Core) usage() float64 {
	c.segs.RLock()
	list := c.segs.list
	c.segs.RUnlock()
	var used, capacity uint64
	for _, s := range list {
		s.mu.Lock()
		if s.drainAt == 0 { // a draining segment takes nothing new: not room of the pool
			used += s.alloc.Used()
			capacity += s.alloc.Capacity()
		}
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
	// Reclaimable counts the candidates this configuration lets go, now
	// or once their disk copies exist.
	Reclaimable int
	Objects     int // objects evicted
	Bytes       uint64
	// OffloadAsked counts the objects the pass would have evicted but
	// asked to be persisted first (their disk copy does not exist yet).
	OffloadAsked int
}

// exactEvictionLimit bounds the object count for which a pass looks at every
// object to place its cut; above it the cut comes from a sample of shards.
const exactEvictionLimit = 1 << 16

// EvictionDue reports that a put found no room since the last Tick and the
// next Tick will run an eviction pass for it.
func (c *Core) EvictionDue() bool { return c.evictSoon.Load() }

// Evict runs one eviction pass now: it frees about
// max(EvictionRatio, usage − HighWatermark + EvictionRatio) of the evictable
// objects, least recently used first, non-pinned before soft-pinned (the
// latter only if AllowEvictSoftPinned).
//
// The pass first places an age cut per class (plain, soft-pinned) with a
// selection over the candidates' ages, then sweeps the shards once, in
// parallel, evicting what is older than the cut; objects exactly at the cut
// (a batch shares one clock reading) go while the count allows, so ties
// never push out an older object. Up to exactEvictionLimit objects every
// object is looked at and the pass is exact. Beyond, a million objects must
// be swept in well under 200 ms on two cores, so the ages come from a
// sample of shards: keys hash uniformly over shards, and 64k objects place
// the cut to a fraction of a percent.
func (c *Core) Evict() EvictResult {
	now := c.now()
	ratio := max(c.cfg.EvictionRatio, c.usage()-c.cfg.HighWatermark+c.cfg.EvictionRatio)
	return c.evictPass(now, min(ratio, 1))
}

// evictPass evicts about share of the objects and counts the pass.
func (c *Core) evictPass(now int64, share float64) EvictResult {
	res := c.evict(now, share, c.objectCount())
	c.reclaimable.Store(int64(res.Reclaimable))
	c.stats.EvictionPasses.Add(1)
	c.stats.EvictedObjects.Add(int64(res.Objects))
	c.stats.EvictedBytes.Add(int64(res.Bytes))
	if res.Objects > 0 || res.OffloadAsked > 0 {
		c.stats.EvictionPassesEffective.Add(1)
	}
	return res
}

func (c *Core) objectCount() int {
	n := 0
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		n += len(sh.objects)
		sh.mu.Unlock()
	}
	return n
}

func (c *Core) evict(now int64, ratio float64, total int) EvictResult {
	// Look at every stride-th shard from a random start: about
	// exactEvictionLimit objects (all of them below that).
	stride, first := 1, 0
	if total > exactEvictionLimit {
		stride = NumShards / max(1, NumShards*exactEvictionLimit/total)
		c.randMu.Lock()
		first = c.cfg.Rand.IntN(stride)
		c.randMu.Unlock()
	}
	var plain, soft []int64
	sampled := 0
	for i := first; i < NumShards; i += stride {
		sh := &c.shards[i]
		sh.mu.Lock()
		sampled += len(sh.objects)
		for _, o := range sh.objects {
			if ok, isSoft := c.evictable(o, now); ok {
				if isSoft {
					soft = append(soft, o.lastUse)
				} else {
					plain = append(plain, o.lastUse)
				}
			} else if c.awaitsOffload(o, now) {
				// Counted as a candidate: the sweep asks for its offload
				// instead of evicting it (with offload_on_evict, the first
				// ask; otherwise a repeat of one lost on the way).
				plain = append(plain, o.lastUse)
			}
		}
		sh.mu.Unlock()
	}
	if sampled == 0 {
		return EvictResult{}
	}
	scale := float64(total) / float64(sampled)
	estPlain, estSoft := float64(len(plain))*scale, float64(len(soft))*scale
	res := EvictResult{Candidates: int(estPlain + estSoft), Reclaimable: int(estPlain)}
	if c.cfg.AllowEvictSoftPinned {
		res.Reclaimable += int(estSoft)
	}
	want := math.Ceil(ratio * (estPlain + estSoft))
	plainN := min(want, estPlain)
	softN := 0.0
	if c.cfg.AllowEvictSoftPinned {
		softN = min(want-plainN, estSoft)
	}
	// Objects strictly older than a class's cut all go; those exactly at
	// the cut (a batch shares one clock reading) go while the estimate
	// allows, so ties never push out an older object.
	var cut [2]int64
	var tiesLeft [2]atomic.Int64
	for class, cl := range []struct {
		ages []int64
		n    float64 // estimated evictions in the class
	}{{plain, plainN}, {soft, softN}} {
		var below int
		cut[class], below = threshold(cl.ages, cl.n/(float64(max(len(cl.ages), 1))*scale))
		tiesLeft[class].Store(int64(cl.n - float64(below)*scale))
	}
	var objects, bytes, asked atomic.Int64
	c.forShards(func(_ int, sh *shard) {
		for key, o := range sh.objects {
			ok, isSoft := c.evictable(o, now)
			if !ok {
				if c.awaitsOffload(o, now) && o.lastUse <= cut[0] {
					// Would have gone: ask its holder to persist it first.
					c.wantOffload(key, o)
					c.stats.EvictionsOffloadWait.Add(1)
					asked.Add(1)
				}
				continue
			}
			class := 0
			if isSoft {
				class = 1
			}
			if o.lastUse > cut[class] || (o.lastUse == cut[class] && tiesLeft[class].Add(-1) < 0) {
				continue
			}
			bytes.Add(int64(o.size) * int64(len(o.replicas)))
			f := o.release()
			c.settle(sh, key, o) // with a disk copy it lives on in the SSD tier
			f.free(&c.stats)
			objects.Add(1)
		}
	})
	res.Objects, res.Bytes, res.OffloadAsked = int(objects.Load()), uint64(bytes.Load()), int(asked.Load())
	return res
}

// threshold returns the age at or below which the fraction share of ages
// lies (math.MinInt64 when nothing is to go), and how many ages lie strictly
// below it.
func threshold(ages []int64, share float64) (cut int64, below int) {
	if len(ages) == 0 || !(share > 0) {
		return math.MinInt64, 0
	}
	k := min(len(ages)-1, int(math.Ceil(share*float64(len(ages))))-1)
	cut = nthSmallest(ages, max(k, 0))
	for _, a := range ages {
		if a < cut {
			below++
		}
	}
	return cut, below
}

// forShards runs f on every shard with its lock held, spreading the shards
// over GOMAXPROCS goroutines.
func (c *Core) forShards(f func(i int, sh *shard)) {
	fanout.Each(NumShards, runtime.GOMAXPROCS(0), func(i int) {
		sh := &c.shards[i]
		sh.mu.Lock()
		f(i, sh)
		sh.mu.Unlock()
	})
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
