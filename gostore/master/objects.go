// objects.go defines objects and the put/get/exist/remove operations on them.

package master

import (
	"iter"
	"regexp"
	"slices"
	"time"
	"unique"

	"github.com/gostore/gostore/gostore/wire"
)

type replicaStatus uint8

const (
	replicaProcessing replicaStatus = iota // allocated, the writer is copying
	replicaComplete                        // written and readable
)

func (s replicaStatus) String() string {
	if s == replicaComplete {
		return "COMPLETE"
	}
	return "PROCESSING"
}

type replica struct {
	seg    *segment
	offset uint64
	status replicaStatus
}

// object is one key's metadata; its shard's mutex guards it. A master
// holds 10^7..10^8 of them, so the layout is kept to one 80-byte
// allocation for the common object (one replica, no pin, no disk copy, no
// task): the first replica is inline, the writer an interned handle, and
// what few objects use lives in a side struct (objectExtra) allocated only
// while one of its fields is set. Times are nanoseconds of the injected
// clock (int64, not time.Time).
type object struct {
	size  uint64
	lease int64 // reads extend it; leased objects are neither removed nor evicted
	// lastUse: once written, the put's end or the last lease (eviction
	// takes the oldest first); while a write is in progress, when it
	// started (PutStart, for taking over abandoned puts). Nothing reads
	// the one meaning in the other state: eviction never takes an
	// unfinished object, and a takeover only looks at one.
	lastUse int64
	epoch   uint64 // of the current or last write; see wire.PutStartResult
	placed  uint64 // names the replica set: see wire.GetResult.Placed
	// The first replica (seg0 nil: none; then there are no others).
	seg0    *segment
	off0    uint64
	writer  unique.Handle[string] // the client of the current or last write
	x       *objectExtra          // nil while every field of it is zero
	readers int32                 // gets between GetReplicas(ForRead) and ReadDone
	status0 replicaStatus
	hardPin bool // never evicted; only remove takes it away
	// charged is the memory replicas its tenant is charged for
	// (tenants.go; in what was padding: the object stays 80 bytes).
	charged uint8
	// announced: what of it KV events have said is readable (kvevents.go:
	// announcedCPU, announcedDisk). In the struct's padding.
	announced uint8
}

// objectExtra holds the fields few objects set; see object.trim.
type objectExtra struct {
	more    []replica // the replicas after the first
	softPin int64     // soft-pinned until then (0: not soft-pinned)
	held    int64     // its writer's call goes on until then: see PutEndHold
	disk    *diskCopy // LOCAL_DISK replica in a client's SSD tier, or nil
	tasks   int32     // replica tasks running on the object
}

func (o *object) extra() *objectExtra {
	if o.x == nil {
		o.x = &objectExtra{}
	}
	return o.x
}

// trim drops the side struct once nothing is left in it.
func (o *object) trim() {
	if x := o.x; x != nil && len(x.more) == 0 && x.softPin == 0 && x.held == 0 && x.disk == nil && x.tasks == 0 {
		o.x = nil
	}
}

// writerID is the client of the current or last write ("" if none).
func (o *object) writerID() string {
	if o.writer == (unique.Handle[string]{}) {
		return ""
	}
	return o.writer.Value()
}

func (o *object) setWriter(clientID string) { o.writer = unique.Make(clientID) }

func (o *object) softPinUntil() int64 {
	if o.x == nil {
		return 0
	}
	return o.x.softPin
}

func (o *object) setSoftPin(until int64) {
	if until != 0 || o.x != nil {
		o.extra().softPin = until
		o.trim()
	}
}

func (o *object) heldUntil() int64 {
	if o.x == nil {
		return 0
	}
	return o.x.held
}

func (o *object) setHeld(until int64) {
	if until != 0 || o.x != nil {
		o.extra().held = until
		o.trim()
	}
}

// onDisk is the object's disk copy, or nil.
func (o *object) onDisk() *diskCopy {
	if o.x == nil {
		return nil
	}
	return o.x.disk
}

func (o *object) setDisk(d *diskCopy) {
	if d != nil || o.x != nil {
		o.extra().disk = d
		o.trim()
	}
}

func (o *object) taskCount() int32 {
	if o.x == nil {
		return 0
	}
	return o.x.tasks
}

func (o *object) addTasks(n int32) {
	o.extra().tasks += n
	o.trim()
}

func (o *object) numReplicas() int {
	switch {
	case o.seg0 == nil:
		return 0
	case o.x == nil:
		return 1
	}
	return 1 + len(o.x.more)
}

// reps yields the replicas in order, by value (edit them with setReplicas
// or setStatus).
func (o *object) reps() iter.Seq2[int, replica] {
	return func(yield func(int, replica) bool) {
		if o.seg0 == nil || !yield(0, replica{seg: o.seg0, offset: o.off0, status: o.status0}) || o.x == nil {
			return
		}
		for i, r := range o.x.more {
			if !yield(i+1, r) {
				return
			}
		}
	}
}

// replicaList is a copy of the replicas, for callers that keep or edit it.
func (o *object) replicaList() []replica {
	out := make([]replica, 0, o.numReplicas())
	for _, r := range o.reps() {
		out = append(out, r)
	}
	return out
}

// setReplicas makes reps the replicas (copied: the caller keeps reps).
func (o *object) setReplicas(reps []replica) {
	if len(reps) == 0 {
		o.seg0, o.off0, o.status0 = nil, 0, 0
	} else {
		o.seg0, o.off0, o.status0 = reps[0].seg, reps[0].offset, reps[0].status
	}
	if len(reps) > 1 {
		o.extra().more = slices.Clone(reps[1:])
	} else if o.x != nil {
		o.x.more = nil
		o.trim()
	}
}

// setStatus puts every replica in state st.
func (o *object) setStatus(st replicaStatus) {
	o.status0 = st
	if o.x != nil {
		for j := range o.x.more {
			o.x.more[j].status = st
		}
	}
}

// readable reports whether a get can be served: a complete memory replica,
// or a disk copy when no write is in progress.
func (o *object) readable() bool {
	return o.complete() || (o.onDisk() != nil && !o.unfinished())
}

func (o *object) complete() bool {
	for _, r := range o.reps() {
		if r.status == replicaComplete {
			return true
		}
	}
	return false
}

// unfinished reports whether a put is still writing the object.
func (o *object) unfinished() bool {
	for _, r := range o.reps() {
		if r.status != replicaComplete {
			return true
		}
	}
	return false
}

func (o *object) leased(now int64) bool { return now < o.lease }

// busy reports readers still copying out of the replicas. A reader past its
// lease no longer counts: its transfer reports LEASE_EXPIRED instead.
func (o *object) busy(now int64) bool { return o.readers > 0 && o.leased(now) }

func (o *object) softPinned(now int64) bool { return now < o.softPinUntil() }

// heldInCall reports an object its writer's call still protects from
// eviction (PutEndHold): one without a disk copy would go to nowhere.
func (o *object) heldInCall(now int64) bool { return now < o.heldUntil() && o.onDisk() == nil }

// touch records a read: the lease and a soft pin are extended.
func (o *object) touch(now int64, cfg *Config) {
	o.lease = max(o.lease, now+int64(cfg.DefaultKVLeaseTTL))
	o.lastUse = now
	if pin := o.softPinUntil(); pin != 0 {
		o.setSoftPin(max(pin, now+int64(cfg.SoftPinTTL)))
	}
}

// release takes every replica away from o; the caller frees them
// (freed.free) once it has reported the change. A range is free only after
// the change that let it go is in the journal: were it free first, a
// writer could be handed it, and copy into it, while a restart would bring
// the old object back on those bytes.
func (o *object) release() freed {
	f := freed{o.replicaList(), o.size}
	o.setReplicas(nil)
	return f
}

// freed is ranges taken from an object, to return to their segments.
type freed struct {
	reps []replica
	size uint64
}

func (f freed) free(st *Stats) { freeRanges(f.reps, f.size, st) }

// freeRanges returns each replica's range of size bytes to its segment.
func freeRanges(reps []replica, size uint64, st *Stats) {
	for _, r := range reps {
		r.seg.free(r.offset, size, st)
	}
}

// dropReplicasOn forgets replicas on the dead segment s (their memory left
// with it) and reports whether any were dropped.
func (o *object) dropReplicasOn(s *segment) bool {
	if !o.hasReplicaOn(s) {
		return false
	}
	var kept []replica
	for _, r := range o.reps() {
		if r.seg != s {
			kept = append(kept, r)
		}
	}
	o.setReplicas(kept)
	return true
}

// testHookFree, when set (tests), sees every range returned to a live
// segment, before it is.
var testHookFree func(s *segment, off, size uint64)

func (s *segment) free(off, size uint64, st *Stats) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead {
		return
	}
	if testHookFree != nil {
		testHookFree(s, off, size)
	}
	if err := s.alloc.Free(off, size); err != nil {
		// A broken bookkeeping invariant; counted rather than crashing the
		// master that every client depends on.
		st.FreeErrors.Add(1)
	}
}

// PutStart allocates replicas for each key: result i is OK with the ranges
// to write, ErrObjectAlreadyExists, ErrNoAvailableHandle or ErrInvalidParams.
// A batch over a limit (CheckRequest) is refused whole, with an error.
//
// hostID is the writer's host; with cfg.SameNode, segments there come first.
func (c *Core) PutStart(clientID, hostID string, keys []string, sizes []uint64, cfg wire.ReplicaConfig) ([]wire.PutStartResult, error) {
	return c.startWrites(clientID, hostID, keys, sizes, cfg, c.putStartOne)
}

// startOne starts the write of one key; see putStartOne and upsertOne.
type startOne func(now int64, clientID, key string, size uint64, cfg wire.ReplicaConfig, p *placer) wire.PutStartResult

// startWrites runs one for each valid key of a batch, with one clock reading
// and one placement snapshot for the whole batch.
func (c *Core) startWrites(clientID, hostID string, keys []string, sizes []uint64, cfg wire.ReplicaConfig, one startOne) ([]wire.PutStartResult, error) {
	if len(keys) != len(sizes) {
		return nil, wire.Errorf(wire.ErrInvalidParams, "%d keys but %d sizes", len(keys), len(sizes))
	}
	if err := c.CheckRequest(keys, sizes); err != nil {
		return nil, err
	}
	now := c.now()
	c.touch(clientID)
	p := c.newPlacer(cfg, hostID)
	out := make([]wire.PutStartResult, len(keys))
	for i, key := range keys {
		if key == "" || sizes[i] == 0 {
			out[i] = wire.PutStartResult{Code: wire.ErrInvalidParams}
			continue
		}
		if c.ledger == nil {
			out[i] = one(now, clientID, key, sizes[i], cfg, p)
			continue
		}
		need := quotaCharge(sizes[i], p.want)
		a, code := c.admitTenant(now, key, need)
		if code != wire.OK {
			out[i] = wire.PutStartResult{Code: code}
			continue
		}
		if testHookAdmitted != nil {
			testHookAdmitted()
		}
		out[i] = one(now, clientID, key, sizes[i], cfg, p)
		unreserve(a, need) // charged by now, if it started
	}
	return out, nil
}

func (c *Core) putStartOne(now int64, clientID, key string, size uint64, cfg wire.ReplicaConfig, p *placer) wire.PutStartResult {
	c.stats.PutStarts.Add(1)
	sh := c.shardOf(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if old, ok := sh.objects[key]; ok {
		if !old.unfinished() || now-old.lastUse < int64(c.cfg.PutStartDiscardTimeout) {
			return wire.PutStartResult{Code: wire.ErrObjectAlreadyExists}
		}
		// An abandoned put: the new one takes the key. The old writer may
		// still be copying, so its ranges are quarantined, not freed.
		c.discard(old.replicaList(), old.size, now)
		c.deleteObject(sh, key, old)
		c.stats.PutsTakenOver.Add(1)
	}
	return c.insertLocked(sh, now, clientID, key, size, cfg, cfg.HardPin, p)
}

// insertLocked allocates a new object for key; the caller holds sh.mu.
func (c *Core) insertLocked(sh *shard, now int64, clientID, key string, size uint64, cfg wire.ReplicaConfig, hardPin bool, p *placer) wire.PutStartResult {
	reps := p.place(size)
	if len(reps) == 0 {
		c.stats.AllocFailures.Add(1)
		why, space := p.noSpace(size)
		return wire.PutStartResult{Code: wire.ErrNoAvailableHandle, NoSpace: &wire.NoSpace{Why: why, Space: space,
			Passes: uint64(c.stats.EvictionPasses.Load()), Progress: c.stats.roomFreed()}}
	}
	o := &object{size: size, hardPin: hardPin}
	o.setReplicas(reps)
	c.startWrite(o, now, clientID, cfg)
	sh.set(key, o)
	c.recordNewWrite(key, o) // its ranges, held across a restart while the writer copies
	return c.writeResult(o, now)
}

// startWrite makes clientID the object's writer under a fresh epoch.
func (c *Core) startWrite(o *object, now int64, clientID string, cfg wire.ReplicaConfig) {
	o.lastUse, o.epoch = now, c.epochs.Add(1) // lastUse: when the write started
	o.setWriter(clientID)
	o.placed = o.epoch
	o.readers = 0 // only lapsed readers can remain (busy objects are not rewritten)
	pin := int64(0)
	if cfg.SoftPin {
		pin = now + int64(c.cfg.SoftPinTTL)
	}
	o.setSoftPin(pin)
}

// writeResult is the answer to the write that just started on o: its
// replicas, each with the grant to write it.
func (c *Core) writeResult(o *object, now int64) wire.PutStartResult {
	res := wire.PutStartResult{Code: wire.OK, Replicas: make([]wire.Replica, o.numReplicas()), Epoch: o.epoch}
	expiry := c.writeGrantExpiry(now)
	for j, r := range o.reps() {
		res.Replicas[j] = wireReplica(r, o.size, true, expiry)
	}
	return res
}

// PutEnd marks the keys' replicas COMPLETE: readable from now on. Only the
// writer that started the put may end it; for anyone else (say a slow writer
// whose put was taken over) the put is gone: -704.
//
// epochs, when given, must match the epochs PutStart returned.
func (c *Core) PutEnd(clientID string, keys []string, epochs []uint64) []wire.Code {
	return c.PutEndHold(clientID, keys, epochs, 0)
}

// PutEndHold is PutEnd for a call that goes on writing after these objects
// (it waits for room for its other objects): for hold (at most
// PutStartDiscardTimeout, the bound of any write), or until PutUnhold, an
// eviction pass takes none of them that lacks a disk copy. Were they
// evictable, the room the call waits for could be their own, and the call
// would answer 0 for objects it had evicted itself. Holds are not durable:
// after a restart the objects are plain again.
func (c *Core) PutEndHold(clientID string, keys []string, epochs []uint64, hold time.Duration) []wire.Code {
	c.touch(clientID)
	now := c.now()
	held := int64(0)
	if hold > 0 {
		held = now + int64(min(hold, c.cfg.PutStartDiscardTimeout))
	}
	out := make([]wire.Code, len(keys))
	for i, key := range keys {
		c.stats.PutEnds.Add(1)
		sh := c.shardOf(key)
		sh.mu.Lock()
		o, ok := sh.objects[key]
		switch {
		case !ok || o.numReplicas() == 0 || !o.writtenBy(clientID, epochs, i):
			out[i] = wire.ErrObjectNotFound
		default:
			o.setStatus(replicaComplete)
			o.lastUse = now
			o.setHeld(held)
			c.dropDisk(key, o) // a rewritten object's old disk copy is stale
			c.recordCompleted(key, o)
			if c.cfg.EnableOffload && !c.cfg.OffloadOnEvict {
				c.wantOffload(key, o)
			}
		}
		sh.mu.Unlock()
	}
	return out
}

// PutUnhold ends the holds PutEndHold gave the caller's objects of these
// epochs, its call being over: at once, or after grace (bounded as a
// hold), which a call that ends with refusals gives the eviction pass they
// asked for, so that the pass does not take what the call has just
// stored. A key rewritten since is left as it is.
func (c *Core) PutUnhold(clientID string, keys []string, epochs []uint64, grace time.Duration) {
	c.touch(clientID)
	held := int64(0)
	if grace > 0 {
		held = c.now() + int64(min(grace, c.cfg.PutStartDiscardTimeout))
	}
	for i, key := range keys {
		sh := c.shardOf(key)
		sh.mu.Lock()
		if o, ok := sh.objects[key]; ok && o.writtenBy(clientID, epochs, i) {
			o.setHeld(held)
		}
		sh.mu.Unlock()
	}
}

// PutRevoke abandons the caller's unfinished puts and frees their space.
func (c *Core) PutRevoke(clientID string, keys []string, epochs []uint64) []wire.Code {
	c.touch(clientID)
	out := make([]wire.Code, len(keys))
	for i, key := range keys {
		c.stats.PutRevokes.Add(1)
		sh := c.shardOf(key)
		sh.mu.Lock()
		o, ok := sh.objects[key]
		switch {
		case !ok || !o.writtenBy(clientID, epochs, i):
			out[i] = wire.ErrObjectNotFound
		case !o.unfinished():
			out[i] = wire.ErrInvalidWrite
		default:
			f := o.release()
			c.deleteObject(sh, key, o)
			f.free(&c.stats)
		}
		sh.mu.Unlock()
	}
	return out
}

// writtenBy reports whether the current write is the caller's (and, with
// epochs, the very write the caller started).
func (o *object) writtenBy(clientID string, epochs []uint64, i int) bool {
	return o.writerID() == clientID && (i >= len(epochs) || epochs[i] == o.epoch)
}

// GetReplicas returns each key's size and COMPLETE replicas and extends its
// lease: -704 for a missing key, -703 while no replica is complete. With
// forRead the caller is counted as a reader until ReadDone (or its lease
// ends): an upsert then gets -714 instead of overwriting under it.
func (c *Core) GetReplicas(keys []string, forRead bool) []wire.GetResult {
	return c.replicasOf(keys, forRead, true)
}

// PeekReplicas is GetReplicas that leaves the object as it is: no lease,
// no reader, no recency. The SSD tier reads objects this way to persist
// them: that is not a use, and a lease would hold off the eviction the
// copy is made for. (A copy of bytes rewritten or freed meanwhile is
// refused by NotifyOffloaded: its epoch or object is gone.)
func (c *Core) PeekReplicas(keys []string) []wire.GetResult {
	return c.replicasOf(keys, false, false)
}

func (c *Core) replicasOf(keys []string, forRead, use bool) []wire.GetResult {
	now := c.now()
	out := make([]wire.GetResult, len(keys))
	var diskReads []diskRead
	for i, key := range keys {
		c.stats.Gets.Add(1)
		sh := c.shardOf(key)
		sh.mu.Lock()
		o, ok := sh.objects[key]
		switch {
		case !ok:
			out[i].Code = wire.ErrObjectNotFound
			c.stats.GetMisses.Add(1)
		case !o.readable():
			out[i].Code = wire.ErrReplicaIsNotReady
			// Where the write goes, for plan readers: a plan is published
			// by its header (READY) before its writer's PutEnd arrives.
			// The replicas are not leased: nothing reads them but a
			// header check, whose epoch guards against reuse.
			out[i].Size, out[i].Epoch = o.size, o.epoch
			for _, r := range o.reps() {
				out[i].Replicas = append(out[i].Replicas, c.readReplica(r, o.size, now, use))
			}
		default:
			if d := o.onDisk(); d != nil {
				out[i].Disk = d.endpoint
			}
			if use {
				if !o.leased(now) {
					o.readers = 0 // readers past their lease no longer count
				}
				o.touch(now, &c.cfg)
				if forRead {
					o.readers++
				}
			}
			out[i].Size = o.size
			out[i].LeaseMS = c.cfg.DefaultKVLeaseTTL.Milliseconds()
			out[i].Epoch, out[i].Placed = o.epoch, o.placed
			out[i].Replicas = make([]wire.Replica, 0, o.numReplicas())
			for _, r := range o.reps() {
				if r.status == replicaComplete {
					out[i].Replicas = append(out[i].Replicas, c.readReplica(r, o.size, now, use))
				}
			}
			if n := len(out[i].Replicas); n > 1 && c.hot.mode == DynamicReplicationEnforce {
				// Spread reads over the replicas: a reader tries the
				// cheapest first, and in this order among equals.
				// (observe only counts: the order stays as it was.)
				sh.spread++
				k := int(sh.spread % uint32(n))
				slices.Reverse(out[i].Replicas[:k])
				slices.Reverse(out[i].Replicas[k:])
				slices.Reverse(out[i].Replicas)
			}
			if use && c.hot.mode != "" {
				c.observeHeat(sh, key, o, now)
			}
			if use && len(out[i].Replicas) == 0 && c.promo.sketch != nil && o.taskCount() == 0 {
				// Served by the disk copy alone, no promotion on its way.
				diskReads = append(diskReads, diskRead{key, o.onDisk().client})
			}
		}
		sh.mu.Unlock()
	}
	if len(diskReads) > 0 {
		c.observeDiskReads(diskReads) // takes segs: never under a shard lock
	}
	return out
}

// readReplica is r as a reader sees it: with a grant to read it while the
// lease runs when the lookup uses the object, without one for a peek (the
// SSD tier reads its own segment's memory directly).
func (c *Core) readReplica(r replica, size uint64, now int64, use bool) wire.Replica {
	if !use {
		return wire.Replica{SegID: r.seg.desc.ID, Offset: r.offset}
	}
	return wireReplica(r, size, false, c.readGrantExpiry(now))
}

// ReadDone ends reads counted by GetReplicas(forRead). epochs[i] is the
// epoch GetReplicas returned for keys[i]: a read of an object since replaced
// (removed and put again) does not end a read of the new one.
func (c *Core) ReadDone(keys []string, epochs []uint64) {
	if len(epochs) != len(keys) {
		return // without epochs a ReadDone could end anyone's read
	}
	for i, key := range keys {
		sh := c.shardOf(key)
		sh.mu.Lock()
		if o, ok := sh.objects[key]; ok && o.readers > 0 && epochs[i] == o.epoch {
			o.readers--
		}
		sh.mu.Unlock()
	}
}

// Exist reports OK for keys with a complete replica (granting a lease) and
// ErrObjectNotFound otherwise.
func (c *Core) Exist(keys []string) []wire.Code {
	now := c.now()
	out := make([]wire.Code, len(keys))
	for i, key := range keys {
		sh := c.shardOf(key)
		sh.mu.Lock()
		if o, ok := sh.objects[key]; ok && o.readable() {
			o.touch(now, &c.cfg)
		} else {
			out[i] = wire.ErrObjectNotFound
		}
		sh.mu.Unlock()
	}
	return out
}

// removableWithTasks says why o may not be removed now (OK if it may),
// its tasks aside: removableNow weighs those.
func removableWithTasks(o *object, now int64, force bool) wire.Code {
	if force {
		return wire.OK
	}
	if !o.readable() {
		return wire.ErrReplicaIsNotReady
	}
	if o.leased(now) {
		return wire.ErrObjectHasLease
	}
	return wire.OK
}

// Remove deletes keys: -704 missing, -706 leased, -703 unfinished (the last
// two only without force).
func (c *Core) Remove(keys []string, force bool) []wire.Code {
	now := c.now()
	out := make([]wire.Code, len(keys))
	for i, key := range keys {
		sh := c.shardOf(key)
		sh.mu.Lock()
		o, ok := sh.objects[key]
		if !ok {
			out[i] = wire.ErrObjectNotFound
		} else if out[i] = c.removableNow(o, now, force); out[i] == wire.OK {
			f := o.release()
			c.deleteObject(sh, key, o)
			f.free(&c.stats)
			c.stats.Removes.Add(1)
		}
		sh.mu.Unlock()
	}
	return out
}

// removableNow is the rule of every remove: removableWithTasks, and an
// object with a task is removed only when every task on it is one the
// master started (promotion, hot copy), which the remove pre-empts; a
// client's task holds ranges, even against a forced remove.
func (c *Core) removableNow(o *object, now int64, force bool) wire.Code {
	code := removableWithTasks(o, now, force)
	if code == wire.OK && o.taskCount() > 0 && !c.preemptStarted(o, now) {
		return wire.ErrObjectHasReplicationTask
	}
	return code
}

// RemoveByRegex removes every removable key in which pattern matches
// (search, not full match) and returns how many it removed.
func (c *Core) RemoveByRegex(pattern string, force bool) (int64, error) {
	return c.RemoveByRegexOf("", pattern, force)
}

// RemoveAll removes every removable object and returns how many.
func (c *Core) RemoveAll(force bool) int64 {
	n := c.removeMatching(anyKey, force)
	// Each removal had its events; when nothing is left, one more says so
	// (a subscriber that lost some to a full queue forgets them too).
	// The count is read under the queue's lock: an object's stored event
	// is queued after its shard counts it, so none can come between a
	// count of zero and the all-cleared (which would forget it).
	if c.cfg.Events != nil && n > 0 {
		at := c.now()
		c.cfg.Events.PushIf(Event{Kind: EventAllCleared, At: at}, func() bool { return c.objectCount() == 0 })
	}
	return n
}

// ofTenant matches the stored keys of tenant's objects whose own key
// (wire.SplitScoped) match takes; every stored key match takes for
// tenant "".
func ofTenant(tenant string, match func(key string) bool) func(string) bool {
	if tenant == "" {
		return match
	}
	return func(key string) bool {
		t, k := wire.SplitScoped(key)
		return t == tenant && match(k)
	}
}

func anyKey(string) bool { return true }

// RemoveByRegexOf is RemoveByRegex over tenant's objects only, the
// pattern matched against the tenant's own keys (wire.SplitScoped); every
// object's for tenant "".
func (c *Core) RemoveByRegexOf(tenant, pattern string, force bool) (int64, error) {
	re, err := regexp.Compile(pattern)
	if err != nil {
		return 0, wire.Errorf(wire.ErrInvalidParams, "bad pattern %q: %v", pattern, err)
	}
	return c.removeMatching(ofTenant(tenant, re.MatchString), force), nil
}

// KeysOf calls f with the keys of tenant's objects (the tenant's own
// keys; every object's stored key for tenant ""), one shard's at a time,
// with no lock held, until f returns false (Mooncake's /get_all_keys).
func (c *Core) KeysOf(tenant string, f func(keys []string) bool) {
	for i := range c.shards {
		var keys []string
		c.shards[i].sweep(func(key string, _ *object) {
			if tenant == "" {
				keys = append(keys, key)
			} else if t, k := wire.SplitScoped(key); t == tenant {
				keys = append(keys, k)
			}
		})
		if len(keys) > 0 && !f(keys) {
			return
		}
	}
}

// RemoveAllOf is RemoveAll over tenant's objects only; every object's for
// tenant "" (with RemoveAll's all-cleared event).
func (c *Core) RemoveAllOf(tenant string, force bool) int64 {
	if tenant == "" {
		return c.RemoveAll(force)
	}
	return c.removeMatching(ofTenant(tenant, anyKey), force)
}

func (c *Core) removeMatching(match func(string) bool, force bool) int64 {
	now := c.now()
	var n int64
	for i := range c.shards {
		sh := &c.shards[i]
		sh.sweep(func(key string, o *object) {
			if match(key) && c.removableNow(o, now, force) == wire.OK {
				f := o.release()
				c.deleteObject(sh, key, o)
				f.free(&c.stats)
				n++
			}
		})
	}
	c.stats.Removes.Add(n)
	return n
}

// ReplicaInfo describes one replica for introspection.
type ReplicaInfo struct {
	Segment string `json:"segment"`
	SegID   uint64 `json:"segment_id"`
	Offset  uint64 `json:"offset"`
	Status  string `json:"status"`
}

// ObjectInfo describes an object for /query_key.
type ObjectInfo struct {
	Key        string        `json:"key"`
	Size       uint64        `json:"size"`
	Replicas   []ReplicaInfo `json:"replicas"`
	LeaseUntil time.Time     `json:"lease_until"`
	SoftPin    bool          `json:"soft_pin"`
	HardPin    bool          `json:"hard_pin"`
	// Disk is the endpoint of the client holding the LOCAL_DISK replica.
	Disk string `json:"disk,omitempty"`
}

// QueryKey describes key without granting a lease; ok is false when missing.
func (c *Core) QueryKey(key string) (ObjectInfo, bool) {
	sh := c.shardOf(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	o, ok := sh.objects[key]
	if !ok {
		return ObjectInfo{}, false
	}
	info := ObjectInfo{Key: key, Size: o.size, LeaseUntil: time.Unix(0, o.lease).UTC(),
		SoftPin: o.softPinUntil() > 0, HardPin: o.hardPin}
	if d := o.onDisk(); d != nil {
		info.Disk = d.endpoint
	}
	for _, r := range o.reps() {
		info.Replicas = append(info.Replicas, ReplicaInfo{Segment: r.seg.desc.Name, SegID: r.seg.desc.ID,
			Offset: r.offset, Status: r.status.String()})
	}
	return info, true
}

// ReplicaClear drops replicas of objects clientID wrote (Mooncake's
// BatchReplicaClear) and returns the keys it cleared, in order. With
// segName "" an object goes whole; otherwise only its memory replicas on
// that segment (named segName) go, and the object with them when nothing
// else holds it.
// A key is skipped (left as it is) when it is missing or empty, another
// client wrote it, its lease is running, a replica is still being written,
// or a replica task holds it; with a segment, also when no replica of it
// lives there.
func (c *Core) ReplicaClear(clientID string, keys []string, segName string) []string {
	now := c.now()
	var seg *segment
	if segName != "" {
		c.segs.RLock()
		seg = c.segs.byName[segName]
		c.segs.RUnlock()
		if seg == nil {
			return nil
		}
	}
	var cleared []string
	for _, key := range keys {
		if key == "" {
			continue
		}
		sh := c.shardOf(key)
		sh.mu.Lock()
		o, ok := sh.objects[key]
		switch {
		case !ok || o.writerID() != clientID || o.leased(now) || o.unfinished() || o.taskCount() > 0:
		case seg == nil:
			f := o.release()
			c.deleteObject(sh, key, o)
			f.free(&c.stats)
			c.stats.Removes.Add(1)
			cleared = append(cleared, key)
		case o.hasReplicaOn(seg):
			f := freed{size: o.size}
			kept := make([]replica, 0, o.numReplicas())
			for _, r := range o.reps() {
				if r.seg == seg {
					f.reps = append(f.reps, r)
				} else {
					kept = append(kept, r)
				}
			}
			o.setReplicas(kept)
			if len(kept) == 0 && o.onDisk() == nil {
				c.deleteObject(sh, key, o)
				c.stats.Removes.Add(1)
			} else {
				c.record(key, o)
			}
			f.free(&c.stats)
			cleared = append(cleared, key)
		}
		sh.mu.Unlock()
	}
	return cleared
}
