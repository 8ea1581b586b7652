// restore.go defines the restore of a saved state (Restore, and
// RestoreFrom's last step) into a core that has served nothing yet, as
// steps: segments, objects into their shards, the ranges' claims, the
// segments' allocators, the objects' replicas, the ranges held.

package master

import (
	"cmp"
	"hash/maphash"
	"runtime"
	"slices"
	"sync"

	"github.com/gostore/gostore/gostore/alloc"
	"github.com/gostore/gostore/gostore/grant"
	"github.com/gostore/gostore/gostore/internal/fanout"
)

// RestoreReport says what Restore made of a saved state.
type RestoreReport struct {
	Segments, Objects int
	// Dropped: objects left with nothing to serve them (every replica
	// named a segment the state lacks, or a range another object held).
	Dropped int
	// HeldRanges: ranges restored out of use until their quarantine ends
	// (writes and tasks in progress at the stop, taken-over puts).
	HeldRanges int
	// BadSegments: segments refused as no mount could have made them (an
	// id other than the one they are stored under, no name or client, a
	// size MountSegment refuses, a name another segment has): a damaged
	// state. Their replicas are dropped as if the segment were missing.
	BadSegments int
}

// Restore installs a saved state into a core that has served nothing yet.
// The segments come back with their ids, owned by clients that count as
// alive from now (each must ping within ClientTTL or its segments go, as
// any silent client's do); the clients are not told they are known, so
// their next ping has them mount again, which finds their segment as it
// was. Every replica's range is allocated again; a replica whose range is
// impossible or taken is dropped, and so is a segment no mount could have
// made (RestoreReport.BadSegments). The ranges of writes and tasks in
// progress at the stop, and of taken-over puts, stay allocated but out of
// use until PutStartReleaseTimeout (their clients may still be copying);
// the objects being written are not restored. With Config.RestoreQuarantine
// the free space of restored segments also takes no new replica for that
// long. Restore reports no changes: the caller snapshots the result, and
// may do so while serving. Until that snapshot is whole, the state
// directory still holds the state restored and the records after it;
// restoring that again gives the same core (the same segments and
// objects refused, the holds under the same ids), so every record the
// new core wrote meanwhile applies to what it changed.
func (c *Core) Restore(st *State) RestoreReport {
	var rb restoreBlocks
	entries := make([]restoreEntry, 0, len(st.Objects))
	for k, d := range st.Objects {
		entries = append(entries, restoreEntry{key: k, d: d, reps: rb.replicas(len(d.Replicas)),
			writing: rb.replicas(len(d.Writing))})
	}
	return c.restore(st, entries, &rb)
}

// restore is Restore with the objects as entries (d, reps and writing set;
// any other field zero): st's Objects are not read, and st.Epoch is at
// least every entry's. Keys are unique, except in a damaged state: of two
// entries of one key the later is restored. rb cuts the holds' replicas.
// It reads as its steps: the segments, the objects into their shards, the
// ranges' claims on their segments, the segments' allocators, the objects'
// replicas, the ranges held, the disk copies to drop.
func (c *Core) restore(st *State, entries []restoreEntry, rb *restoreBlocks) RestoreReport {
	now := c.now()
	var rep RestoreReport
	c.segs.Lock()
	defer c.segs.Unlock()
	segs := c.restoreSegments(st, now, &rep)
	// Segments are found by id in a slice (a lookup per replica:
	// millions). entries does not grow, so the claims' pointers into it
	// stay valid.
	cl := newRestoreClaims(segs)
	// The objects go into their shards first, each shard's by one
	// goroutine: the key's later entry wins there, and only the winners
	// claim ranges.
	byShard := c.restoreObjects(entries, now)
	cl.objects(entries)
	holds := c.restoreHolds(st, rb)
	cl.holds(holds)
	// A segment id named only by a damaged replica is not handed out
	// either: the state restored stays on disk until the next snapshot,
	// and a new segment under that id would give the replica a place.
	c.segs.nextID = max(c.segs.nextID, cl.named)
	cl.allocate(entries, holds)
	objects, dropped, writes := c.keepReplicas(entries, byShard, now)
	rep.Objects += objects
	rep.Dropped += dropped
	rep.HeldRanges += c.holdRestored(c.rangesToHold(holds, writes, now))
	c.restoreDrops(st)
	c.recountTenants()
	c.announceRestored()
	return rep
}

// announceRestored queues a stored event for each restored object's
// readable media (KV events): a subscriber learns them after the
// all-cleared event its publisher sent at its start.
func (c *Core) announceRestored() {
	if c.cfg.Events == nil {
		return
	}
	c.forShards(func(_ int, sh *shard) {
		for key, o := range sh.objects {
			c.announce(key, o, false)
		}
	})
}

// restoreSegments installs st's segments (those a mount could have made:
// the others count in rep.BadSegments), their owners alive from now, and
// moves the segment ids and epochs past the state's. It returns the
// segments installed by id. c.segs is locked.
func (c *Core) restoreSegments(st *State, now int64, rep *RestoreReport) map[uint64]*segment {
	segs := make(map[uint64]*segment, len(st.Segments))
	ids := make([]uint64, 0, len(st.Segments))
	for id := range st.Segments {
		ids = append(ids, id)
	}
	slices.Sort(ids) // few: which of two segments of one name is refused
	c.clients.Lock()
	for _, id := range ids {
		d := st.Segments[id]
		if _, taken := c.segs.byName[d.Name]; d.ID != id || id == 0 || d.Name == "" || d.ClientID == "" ||
			d.Size < allocAlign || d.Size > maxSegmentSize || taken || c.segs.byID[id] != nil {
			rep.BadSegments++
			continue
		}
		s := &segment{desc: d}
		if k, ok := grant.NewKey(st.GrantKeys[id]); ok {
			// Without it (a state written before grants, or a damaged
			// key) the segment's ranges get no grants, which its owner
			// refuses, until the owner's remount brings the key again.
			s.key.Store(&segmentKey{secret: append([]byte(nil), st.GrantKeys[id]...), signer: k})
		}
		if c.cfg.RestoreQuarantine > 0 {
			s.quarantineUntil = now + int64(c.cfg.RestoreQuarantine)
		}
		segs[id] = s
		c.segs.byID[id] = s
		c.segs.byName[d.Name] = s
		c.segs.list = append(c.segs.list, s)
		c.clients.lastSeen[d.ClientID] = c.cfg.Now()
		rep.Segments++
	}
	c.clients.Unlock()
	c.segs.nextID = max(c.segs.nextID, st.NextSegID)
	if n := len(ids); n > 0 {
		c.segs.nextID = max(c.segs.nextID, ids[n-1]) // a new mount must not take a restored id
	}
	if c.epochs.Load() < st.Epoch {
		c.epochs.Store(st.Epoch)
	}
	return segs
}

// restoreClaims gathers, segment by segment, every range the state names
// that claims its place in its segment: the COMPLETE replicas, the ranges
// of writes in progress, the held ranges. A refused claim clears its
// replica's segment (allocate). It is used by one goroutine, under
// c.segs' lock, until allocate.
type restoreClaims struct {
	ix     *segIndex
	claims [][]restoreClaim // by index in ix.list
	named  uint64           // the highest segment id any range names
}

func newRestoreClaims(segs map[uint64]*segment) *restoreClaims {
	ix := newSegIndex(segs)
	return &restoreClaims{ix: ix, claims: make([][]restoreClaim, len(ix.list))}
}

// claim points reps at the ranges from names (with status) and claims
// those on a restored segment for entry (-1-i: the hold i).
func (cl *restoreClaims) claim(reps []replica, from []DurableReplica, status replicaStatus, size uint64, entry int32) {
	for j, r := range from {
		cl.named = max(cl.named, r.SegID)
		reps[j] = replica{offset: r.Offset, status: status}
		if x := cl.ix.idx(r.SegID); x >= 0 {
			reps[j].seg = cl.ix.list[x]
			cl.claims[x] = append(cl.claims[x], restoreClaim{size: size, rep: &reps[j], entry: entry})
		}
	}
}

// objects claims the ranges of the entries that won their key: their
// replicas and the ranges of their writes in progress.
func (cl *restoreClaims) objects(entries []restoreEntry) {
	for i := range entries {
		if e := &entries[i]; e.o != nil {
			cl.claim(e.reps, e.d.Replicas, replicaComplete, e.d.Size, int32(i))
			cl.claim(e.writing, e.d.Writing, 0, e.d.Size, int32(i))
		}
	}
}

// holds claims the held ranges.
func (cl *restoreClaims) holds(holds []restoreHold) {
	for i := range holds {
		h := &holds[i]
		cl.claim(h.reps, h.h.Ranges, 0, h.h.Size, -1-int32(i))
	}
}

// allocate rebuilds the segments' allocators with their claims, in
// parallel (each sorts only its own ranges by offset: no sort of all
// keys).
func (cl *restoreClaims) allocate(entries []restoreEntry, holds []restoreHold) {
	ix := cl.ix
	work := make(chan int, len(ix.list))
	for x := range ix.list {
		work <- x
	}
	close(work)
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), max(len(ix.list), 1)) {
		wg.Go(func() {
			for x := range work {
				s := ix.list[x]
				s.alloc = restoreAlloc(s.desc.Size, cl.claims[x], entries, holds)
			}
		})
	}
	wg.Wait()
}

// restoreHolds is st's holds, each with replicas cut from rb, and moves
// the core's hold ids past theirs.
func (c *Core) restoreHolds(st *State, rb *restoreBlocks) []restoreHold {
	holds := make([]restoreHold, 0, len(st.Held))
	for _, h := range st.Held {
		// A hold keeps its id, and new ones are numbered above: until the
		// snapshot after the restore, the journal on disk is the old state
		// and the records after it, which must name the same holds.
		if h.ID > c.holds.Load() {
			c.holds.Store(h.ID)
		}
		holds = append(holds, restoreHold{h: h, reps: rb.replicas(len(h.Ranges))})
	}
	return holds
}

// keepReplicas gives each object the replicas whose ranges it kept; one
// left with nothing to serve it goes. It counts the objects restored and
// dropped, and returns the ranges of writes in progress, to be held.
func (c *Core) keepReplicas(entries []restoreEntry, byShard [][]int32, now int64) (objects, dropped int, writes []discardedPut) {
	type partResult struct {
		objects, dropped int
		held             []discardedPut
	}
	results := make([]partResult, NumShards)
	c.forShards(func(i int, sh *shard) {
		res := &results[i]
		for _, x := range byShard[i] {
			e := &entries[x]
			if e.o == nil {
				continue // a later entry of its key won
			}
			e.o.setReplicas(kept(e.reps))
			// A write in progress at the stop cannot end now: its ranges
			// wait out the quarantine, as a taken-over put's do.
			if w := kept(e.writing); len(w) > 0 {
				res.held = append(res.held, discardedPut{replicas: w, size: e.d.Size,
					releaseAt: now + int64(c.cfg.PutStartReleaseTimeout)})
			}
			if e.o.numReplicas() == 0 && e.o.onDisk() == nil {
				if len(e.d.Replicas) > 0 {
					res.dropped++ // it was readable, and nothing can serve it now
				}
				sh.remove(e.key)
				continue
			}
			res.objects++
		}
	})
	for _, res := range results {
		objects += res.objects
		dropped += res.dropped
		writes = append(writes, res.held...)
	}
	return objects, dropped, writes
}

// rangesToHold is every range a restore holds: the holds' (those kept),
// in release order, then the writes' (all released at
// now+PutStartReleaseTimeout: the latest), the writes without an id yet.
func (c *Core) rangesToHold(holds []restoreHold, writes []discardedPut, now int64) []discardedPut {
	// The held ranges stay allocated but out of use until the quarantine
	// releases them (a writer or task of the old master may still copy),
	// in release order.
	var held []discardedPut
	for _, h := range holds {
		if reps := kept(h.reps); len(reps) > 0 {
			releaseAt := h.h.ReleaseAt
			if releaseAt == 0 {
				releaseAt = now + int64(c.cfg.PutStartReleaseTimeout)
			}
			held = append(held, discardedPut{replicas: reps, size: h.h.Size, releaseAt: releaseAt, hold: h.h.ID})
		}
	}
	slices.SortStableFunc(held, func(a, b discardedPut) int { return cmp.Compare(a.releaseAt, b.releaseAt) })
	n := len(held)
	held = append(held, writes...)
	// Numbered below in the order of their first range, not of the
	// entries: the same state restores to the same holds, whatever order
	// its objects came in (each range is allocated once: a total order).
	slices.SortFunc(held[n:], func(a, b discardedPut) int {
		return cmp.Or(cmp.Compare(a.replicas[0].seg.desc.ID, b.replicas[0].seg.desc.ID),
			cmp.Compare(a.replicas[0].offset, b.replicas[0].offset))
	})
	return held
}

// holdRestored puts held out of use until each's release, numbering the
// writes' holds, and returns how many ranges it holds.
func (c *Core) holdRestored(held []discardedPut) int {
	ranges := 0
	c.discarded.Lock()
	c.held.Lock()
	for i := range held {
		d := &held[i]
		if d.hold == 0 { // the ranges of a write in progress at the stop
			d.hold = c.holds.Add(1)
		}
		if c.cfg.OnChange != nil { // the snapshot after the restore holds it
			c.keepHold(heldOf(d.hold, d.replicas, d.size, d.releaseAt))
		}
		ranges += len(d.replicas)
	}
	c.held.Unlock()
	c.discarded.list = append(c.discarded.list, held...)
	c.discarded.Unlock()
	return ranges
}

// restoreDrops: stale disk copies still to delete wait for their
// directory's next holder, as they did before the stop (the snapshot
// after the restore writes them again).
func (c *Core) restoreDrops(st *State) {
	for storage, keys := range st.Drops {
		for k := range keys {
			c.drops.push(storage, k)
		}
	}
}

// newRestoredObject is the object a restore makes of d, without its
// replicas (Restore gives it those whose ranges it keeps). placed names
// its replica set: a name no reader saw (what happened to the ranges
// while no master ran is not known).
func (c *Core) newRestoredObject(d *DurableObject, now int64, placed uint64) *object {
	o := &object{size: d.Size, epoch: d.Epoch, placed: placed, hardPin: d.HardPin, lastUse: now}
	o.setWriter(d.Writer)
	if d.SoftPin {
		o.setSoftPin(now + int64(c.cfg.SoftPinTTL))
	}
	if d.Disk != nil {
		o.setDisk(&diskCopy{client: d.Disk.Client, endpoint: d.Disk.Endpoint, storage: d.Disk.Storage})
	}
	return o
}

// restoreObjects puts an object for each entry into its shard (e.o); of
// two entries of one key the later wins, and the earlier's o is nil. It
// returns the entries' indexes by shard, in order. Each shard is filled by
// one goroutine under one hold of its lock, its map made at its final size
// when it is empty (growing 1024 maps through every power of two costs
// more than filling them).
func (c *Core) restoreObjects(entries []restoreEntry, now int64) [][]int32 {
	shardOf := make([]uint16, len(entries))
	counts := make([]int32, NumShards)
	parts := runtime.GOMAXPROCS(0)
	var wg sync.WaitGroup
	partCounts := make([][NumShards]int32, parts)
	for p := range parts {
		wg.Go(func() {
			for i := p * len(entries) / parts; i < (p+1)*len(entries)/parts; i++ {
				x := uint16(maphash.String(c.seed, entries[i].key) % NumShards)
				shardOf[i] = x
				partCounts[p][x]++
			}
		})
	}
	wg.Wait()
	for p := range parts {
		for x := range counts {
			counts[x] += partCounts[p][x]
		}
	}
	// One array cut into the shards' lists: a counting sort, which keeps
	// the entries' order within a shard.
	all := make([]int32, len(entries))
	byShard := make([][]int32, NumShards)
	for x, at := range counts {
		byShard[x], all = all[:0:at], all[at:]
	}
	for i, x := range shardOf {
		byShard[x] = append(byShard[x], int32(i))
	}
	// The replica sets' names are taken in one block: one atomic add, not
	// one per object from every goroutine.
	placed := c.placements.Add(uint64(len(entries))) - uint64(len(entries))
	c.forShards(func(x int, sh *shard) {
		if len(sh.objects) == 0 {
			sh.objects = make(map[string]*object, len(byShard[x]))
		}
		var lost map[*object]bool // objects a later entry of their key replaced: a damaged state only
		for _, i := range byShard[x] {
			e := &entries[i]
			if e.skip {
				continue
			}
			e.o = c.newRestoredObject(&e.d, now, placed+uint64(i)+1)
			if prev, ok := sh.objects[e.key]; ok {
				if lost == nil {
					lost = map[*object]bool{}
				}
				lost[prev] = true
			}
			sh.set(e.key, e.o)
		}
		if lost != nil {
			for _, i := range byShard[x] {
				if lost[entries[i].o] {
					entries[i].o = nil
				}
			}
		}
	})
	return byShard
}

// forShards runs f on every shard with its lock held for the whole of
// it, the shards spread over GOMAXPROCS goroutines: for a restore, which
// runs before the core serves (a serving core's sweeps take a shard's
// lock a chunk at a time: shard.sweep).
func (c *Core) forShards(f func(i int, sh *shard)) {
	fanout.Each(NumShards, runtime.GOMAXPROCS(0), func(i int) {
		sh := &c.shards[i]
		sh.mu.Lock()
		f(i, sh)
		sh.mu.Unlock()
	})
}

// restoreBlocks cuts slices from shared blocks (each capped at its own
// length, so an append later copies): a restore of millions of objects
// makes few allocations, not one per object.
type restoreBlocks struct {
	reps    []replica
	durable []DurableReplica
}

func (rb *restoreBlocks) replicas(n int) []replica {
	if n == 0 {
		return nil
	}
	if len(rb.reps) < n {
		rb.reps = make([]replica, max(n, 1<<16))
	}
	out := rb.reps[:n:n]
	rb.reps = rb.reps[n:]
	return out
}

func (rb *restoreBlocks) durableReplicas(n int) []DurableReplica {
	if n == 0 {
		return nil
	}
	if len(rb.durable) < n {
		rb.durable = make([]DurableReplica, max(n, 1<<16))
	}
	out := rb.durable[:n:n]
	rb.durable = rb.durable[n:]
	return out
}

// segIndex finds restored segments by id: a slice for the dense ids a
// pool hands out (1, 2, ...), a map for any past it.
type segIndex struct {
	dense  []int32 // id -> index in list, -1 for none
	sparse map[uint64]int32
	list   []*segment
}

func newSegIndex(segs map[uint64]*segment) *segIndex {
	ix := &segIndex{sparse: map[uint64]int32{}}
	top := uint64(0)
	for id := range segs {
		top = max(top, id)
	}
	ix.dense = make([]int32, min(top+1, 1<<16))
	for i := range ix.dense {
		ix.dense[i] = -1
	}
	for id, s := range segs {
		x := int32(len(ix.list))
		ix.list = append(ix.list, s)
		if id < uint64(len(ix.dense)) {
			ix.dense[id] = x
		} else {
			ix.sparse[id] = x
		}
	}
	return ix
}

// idx is the index of segment id in list, -1 when it was not restored.
func (ix *segIndex) idx(id uint64) int {
	if id < uint64(len(ix.dense)) {
		return int(ix.dense[id])
	}
	if x, ok := ix.sparse[id]; ok {
		return int(x)
	}
	return -1
}

// restoreEntry is an object of a state being restored: its replicas and
// the ranges of its write in progress, each with the segment it is on (nil:
// the segment is gone, or the range was refused).
type restoreEntry struct {
	key           string
	d             DurableObject
	reps, writing []replica
	o             *object // in its shard; nil when a later entry of the key won, or skip
	// raw is the record RestoreFrom decodes into key and d (then nil);
	// skip: a change after the state has the key's newer state.
	raw  []byte
	skip bool
}

// restoreHold is a hold of a state being restored.
type restoreHold struct {
	h    DurableHold
	reps []replica
}

// restoreClaim is a range that claims its place in a segment: entry is
// the object's index in the entries (-1-i: the hold i's).
type restoreClaim struct {
	size  uint64
	rep   *replica
	entry int32
}

// restoreAlloc is an allocator of a segment of capacity bytes with the
// claims' ranges allocated; a refused claim's replica loses its segment.
// A state the core wrote has no two claims on one range. A damaged one may:
// the claims are then ordered, and the first in that order wins: objects
// before holds, the newer write (the higher epoch) first, then the smaller
// key; holds by id. The winner depends on the state only, not on the order
// a map gave, and only a segment with a conflict pays for the sort.
func restoreAlloc(capacity uint64, claims []restoreClaim, entries []restoreEntry, holds []restoreHold) *alloc.Allocator {
	ranges := make([]alloc.Range, len(claims))
	fill := func() {
		for i, cl := range claims {
			ranges[i] = alloc.Range{Offset: cl.rep.offset, Size: cl.size}
		}
	}
	fill()
	a, bad := alloc.Restore(capacity, allocAlign, ranges)
	if len(bad) > 0 && len(claims) > 1 {
		slices.SortStableFunc(claims, func(x, y restoreClaim) int {
			switch {
			case x.entry >= 0 && y.entry >= 0:
				ex, ey := &entries[x.entry], &entries[y.entry]
				return cmp.Or(cmp.Compare(ey.d.Epoch, ex.d.Epoch), cmp.Compare(ex.key, ey.key),
					cmp.Compare(x.rep.offset, y.rep.offset), cmp.Compare(writing(x.rep), writing(y.rep)))
			case x.entry < 0 && y.entry < 0:
				return cmp.Or(cmp.Compare(holds[-1-x.entry].h.ID, holds[-1-y.entry].h.ID),
					cmp.Compare(x.rep.offset, y.rep.offset))
			}
			return cmp.Compare(y.entry, x.entry) // objects (>= 0) first
		})
		fill()
		a, bad = alloc.Restore(capacity, allocAlign, ranges)
	}
	for _, i := range bad {
		claims[i].rep.seg = nil
	}
	return a
}

// writing is 1 for a range of a write in progress, 0 for a replica.
func writing(r *replica) int {
	if r.status == replicaComplete {
		return 0
	}
	return 1
}

// kept is reps without those that lost their segment.
func kept(reps []replica) []replica {
	out := reps[:0]
	for _, r := range reps {
		if r.seg != nil {
			out = append(out, r)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// endQuarantines opens restored segments whose quarantine is over.
func (c *Core) endQuarantines(now int64) {
	c.segs.RLock()
	list := c.segs.list
	c.segs.RUnlock()
	for _, s := range list {
		s.mu.Lock()
		if s.quarantineUntil != 0 && now >= s.quarantineUntil {
			s.quarantineUntil = 0
		}
		s.mu.Unlock()
	}
}
