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
		sh.sweep(func(key string, o *object) {
			if !o.unfinished() || now-o.lastUse < int64(c.cfg.PutStartDiscardTimeout) || o.taskCount() > 0 {
				return
			}
			c.discard(o.takeReplicas(replicaProcessing), o.size, now)
			c.settle(sh, key, o)
			n++
		})
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
		c.forgetPromotions(id)
		c.forgetAssigned(id)
		if disks {
			delete(c.tiers.drained, id)
			delete(c.tiers.byClient, id)
		}
	}
	c.tiers.Unlock()
	var n int64
	for i := range c.shards {
		sh := &c.shards[i]
		sh.sweep(func(key string, o *object) {
			if dead[o.writerID()] && o.unfinished() {
				f := o.release()
				n++
				if o.onDisk() == nil || dead[o.onDisk().client] {
					sh.remove(key)
					c.recordGone(key, o)
					f.free(&c.stats)
					return
				} // a rewrite that never ended: the disk keeps the last value
				c.record(key, o)
				f.free(&c.stats)
			}
			if disks && o.onDisk() != nil && dead[o.onDisk().client] {
				o.setDisk(nil)
				c.settle(sh, key, o)
			}
		})
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
	if o.hardPin || o.leased(now) || o.unfinished() || o.taskCount() > 0 || o.numReplicas() == 0 || o.heldInCall(now) {
		return false, false
	}
	if c.waitsForDisk(o) {
		return false, false
	}
	return true, o.softPinned(now)
}

func (c *Core) waitsForDisk(o *object) bool {
	return c.cfg.EnableOffload && o.onDisk() == nil && o.offloader() != ""
}

// awaitsOffload reports an object eviction would take but for its missing
// disk copy.
func (c *Core) awaitsOffload(o *object, now int64) bool {
	return c.waitsForDisk(o) && !o.hardPin && !o.leased(now) &&
		!o.unfinished() && o.taskCount() == 0 && o.numReplicas() > 0
}

// usage is the pool's used/capacity ratio.
func (c *Core) usage() float64 {
	used, capacity := c.poolBytes()
	if capacity == 0 {
		return 0
	}
	return float64(used) / float64(capacity)
}

// poolBytes is the pool's bytes in use and its capacity.
func (c *Core) poolBytes() (used, capacity uint64) {
	c.segs.RLock()
	list := c.segs.list
	c.segs.RUnlock()
	for _, s := range list {
		s.mu.Lock()
		if s.drainAt == 0 { // a draining segment takes nothing new: not room of the pool
			used += s.alloc.Used()
			capacity += s.alloc.Capacity()
		}
		s.mu.Unlock()
	}
	return used, capacity
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
	// Visited counts the objects the pass looked at (its sample and its
	// sweep): what it cost.
	Visited int
}

// evictSample is how many objects a pass looks at to place its cuts: up to
// this many objects it looks at every one and the pass is exact (each
// class's oldest go, ties by count). Beyond, it takes shards spread evenly
// from a random start (at least evictSampleShards, more while shards are
// small) and an equal number of objects of each, from a random place in
// its map: keys hash uniformly over shards and a map starts an iteration
// at a random slot, so these are a uniform sample of ages whatever the
// size.
const (
	evictSample       = 2048
	evictSampleShards = 32
)

// evictSpread bounds a pass's work by what it evicts: the cut is never
// placed below the oldest 1/evictSpread of a class, so a sweep in random
// shard order finds what it wants after visiting about evictSpread objects
// per eviction, and stops. A pass that wants less than that share of a
// class takes as many objects as it wants from among that class's oldest
// 1/evictSpread, not the very oldest: approximate LRU, as Redis's sampled
// eviction is.
const evictSpread = 8

// EvictionDue reports that a put found no room since the last Tick and the
// next Tick will run an eviction pass for it.
func (c *Core) EvictionDue() bool { return c.evictSoon.Load() }

// Evict runs one eviction pass now: it frees about
// max(EvictionRatio, usage − HighWatermark + EvictionRatio) of the evictable
// objects, least recently used first, non-pinned before soft-pinned (the
// latter only if AllowEvictSoftPinned).
//
// The pass first places an age cut per class (plain, soft-pinned) with a
// selection over a sample of the candidates' ages (all of them up to
// evictSample objects), then sweeps the shards from a random one in a
// random order, in parallel, evicting what is at or older than the cut.
// When the class's share to go is at least 1/evictSpread (or the pass
// saw every object) the sweep covers every shard and takes everything
// strictly older than the cut, and objects exactly at the cut (a batch
// shares one clock reading) while the count allows, so ties never push
// out an older object; up to evictSample objects the pass is exact. A
// smaller share places the cut at the oldest 1/evictSpread and the sweep
// stops once it has taken its count: a pass costs what it evicts, not
// what the master holds (docs/operations.md, "Eviction").
func (c *Core) Evict() EvictResult {
	now := c.now()
	if freed := c.evictOverShare(now); freed > 0 && c.usage() <= c.cfg.HighWatermark {
		// The tenants beyond their shares gave the room: the others keep
		// theirs.
		c.stats.EvictionPasses.Add(1)
		c.stats.EvictionPassesEffective.Add(1)
		return EvictResult{Bytes: uint64(freed)}
	}
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

// objectCount is the number of objects, from the shards' counters: no
// lock is taken.
func (c *Core) objectCount() int {
	n := int64(0)
	for i := range c.shards {
		n += c.shards[i].n.Load()
	}
	return int(n)
}

// classCut is where a pass cuts one class (plain, soft-pinned): objects
// older than cut go while below allows (nil: all of them), those at cut
// while ties allows. A bounded pass shares one count between the two.
type classCut struct {
	cut   int64
	below *atomic.Int64
	ties  *atomic.Int64
}

// take reports whether an object of age lastUse goes, counting it.
func (q *classCut) take(lastUse int64) bool {
	switch {
	case lastUse > q.cut:
		return false
	case lastUse == q.cut:
		return q.ties.Add(-1) >= 0
	default:
		return q.below == nil || q.below.Add(-1) >= 0
	}
}

// ask reports whether an object of age lastUse that awaits its disk copy
// would have gone (its offload is asked for instead), counting it in a
// bounded pass: ties are left to the objects that can go now.
func (q *classCut) ask(lastUse int64) bool {
	return lastUse <= q.cut && (q.below == nil || q.below.Add(-1) >= 0)
}

// done reports a class the rest of the sweep can take nothing from.
func (q *classCut) done() bool {
	return q.cut == math.MinInt64 || (q.below != nil && q.below.Load() <= 0)
}

// sampleAges returns the ages of evictable objects by class, from every
// object up to evictSample and from a sample beyond, and how many objects
// it looked at.
func (c *Core) sampleAges(now int64, total int) (plain, soft []int64, sampled int) {
	stride, first, perShard := 1, 0, math.MaxInt
	if total > evictSample {
		// k shards of total/NumShards objects each hold evictSample.
		k := min(NumShards, max(evictSampleShards, NumShards*evictSample/total))
		stride, perShard = NumShards/k, max(1, evictSample/k)
		c.randMu.Lock()
		first = c.cfg.Rand.IntN(stride)
		c.randMu.Unlock()
	}
	for i := first; i < NumShards; i += stride {
		sh := &c.shards[i]
		sh.mu.Lock()
		seen := 0
		for _, o := range sh.objects {
			if seen == perShard {
				break
			}
			seen++
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
		sampled += seen
		sh.mu.Unlock()
	}
	return plain, soft, sampled
}

func (c *Core) evict(now int64, ratio float64, total int) EvictResult {
	plain, soft, sampled := c.sampleAges(now, total)
	if sampled == 0 {
		return EvictResult{}
	}
	exact := sampled >= total
	scale := float64(total) / float64(sampled)
	estPlain, estSoft := float64(len(plain))*scale, float64(len(soft))*scale
	res := EvictResult{Candidates: int(estPlain + estSoft), Reclaimable: int(estPlain), Visited: sampled}
	if c.cfg.AllowEvictSoftPinned {
		res.Reclaimable += int(estSoft)
	}
	want := math.Ceil(ratio * (estPlain + estSoft))
	plainN := min(want, estPlain)
	softN := 0.0
	if c.cfg.AllowEvictSoftPinned {
		softN = min(want-plainN, estSoft)
	}
	var cuts [2]classCut
	for class, cl := range []struct {
		ages []int64
		n    float64 // estimated evictions in the class
	}{{plain, plainN}, {soft, softN}} {
		share := cl.n / (float64(max(len(cl.ages), 1)) * scale)
		if exact || share >= 1.0/evictSpread || share <= 0 {
			// Every shard is swept: all strictly older than the cut go,
			// those at the cut while the estimate allows.
			cut, below := threshold(cl.ages, share)
			cuts[class] = classCut{cut: cut, ties: new(atomic.Int64)}
			cuts[class].ties.Store(int64(cl.n - float64(below)*scale))
			continue
		}
		cut, _ := threshold(cl.ages, 1.0/evictSpread)
		left := new(atomic.Int64)
		left.Store(int64(math.Ceil(cl.n)))
		cuts[class] = classCut{cut: cut, below: left, ties: left}
	}
	done := func() bool { return cuts[0].done() && cuts[1].done() }
	var objects, bytes, asked, visited atomic.Int64
	c.randMu.Lock()
	first, step := c.cfg.Rand.IntN(NumShards), 2*c.cfg.Rand.IntN(NumShards/2)+1 // odd: a permutation
	c.randMu.Unlock()
	fanout.Each(NumShards, runtime.GOMAXPROCS(0), func(i int) {
		if done() {
			return
		}
		sh := &c.shards[(first+i*step)%NumShards]
		sh.mu.Lock()
		defer sh.mu.Unlock()
		seen := 0
		defer func() { visited.Add(int64(seen)) }()
		for key, o := range sh.objects {
			if done() {
				return
			}
			seen++
			ok, isSoft := c.evictable(o, now)
			if !ok {
				if c.awaitsOffload(o, now) && cuts[0].ask(o.lastUse) {
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
			if !cuts[class].take(o.lastUse) {
				continue
			}
			bytes.Add(c.evictObject(sh, key, o))
			objects.Add(1)
		}
	})
	res.Objects, res.Bytes, res.OffloadAsked = int(objects.Load()), uint64(bytes.Load()), int(asked.Load())
	res.Visited += int(visited.Load())
	return res
}

// evictObject evicts o, key's object in sh (sh.mu held), and returns the
// bytes of memory replicas that freed. With a disk copy the object lives
// on in the SSD tier (settle).
func (c *Core) evictObject(sh *shard, key string, o *object) int64 {
	n := int64(o.size) * int64(o.numReplicas())
	f := o.release()
	c.settle(sh, key, o)
	f.free(&c.stats)
	return n
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
