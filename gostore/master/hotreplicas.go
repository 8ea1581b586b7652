// hotreplicas.go defines hot-object replicas (Mooncake's
// --dynamic_replication_*): objects read often within the heat window get
// extra memory replicas on other segments, and those extras are the first
// memory eviction takes back.

package master

import (
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gostore/gostore/gostore/wire"
)

// Dynamic replication modes (--dynamic_replication_mode).
const (
	DynamicReplicationOff     = "off"
	DynamicReplicationObserve = "observe"
	DynamicReplicationEnforce = "enforce"
)

// Mooncake's defaults for the dynamic replication flags.
const (
	DefaultDynamicReplicationHeatWindow        = 10 * time.Second
	DefaultDynamicReplicationQPSThreshold      = 0.8
	DefaultDynamicReplicationMaxMemoryReplicas = 2
)

const (
	// heatEntriesPerShard bounds the heat windows a shard keeps (Mooncake
	// keeps 50000 in all; here 64 per shard, 65536 in all): past it, a
	// key seen for the first time is not counted until stale windows go.
	heatEntriesPerShard = 64
	// hotQueueLimit bounds the hot keys waiting for a replica (Mooncake's
	// admission queue limit); hotBatch is how many one Tick serves.
	hotQueueLimit = 50000
	hotBatch      = 64
	// hotTasksPerClient bounds the hot-replica tasks one client runs at
	// once (each holds a buffer of its object's size there; the client
	// runs as many side by side, gostore/client's assignedWorkers): a
	// segment whose owner has that many takes no new one.
	hotTasksPerClient = 4
	// heatPruneInterval: a full shard looks for stale windows at most this
	// often (Mooncake's cleanup interval).
	heatPruneInterval = time.Second
)

// HotReplicaStats count hot-object replicas' decisions and outcomes.
type HotReplicaStats struct {
	// Hot: objects whose reads within one heat window reached the
	// admission threshold (in observe mode, what enforce would act on).
	Hot atomic.Int64
	// Queued: hot objects queued for a replica (enforce); Started: tasks
	// created for them; Added: extra replicas that became readable;
	// Failed: tasks that ended without one. Dropped: extras taken back
	// under memory pressure. Skipped: queued hot objects a Tick let go
	// without a task, the pool being at or above its high watermark.
	Queued, Started, Added, Failed, Dropped, Skipped atomic.Int64
}

// heatWindow counts an object's uses since start (ns on the core's clock).
type heatWindow struct {
	start int64
	hits  uint32
}

// hotReplicas is the state of hot-object replicas.
type hotReplicas struct {
	mode    string // "" or off: nothing is counted
	minHits uint32
	window  int64 // ns

	mu      sync.Mutex
	queue   []string
	queued  map[string]bool
	pending map[string][]wire.AssignedTask // per executor: tasks its next ping takes
	running map[string]int                 // per executor: its tasks not yet ended
	// extras are the replicas added here, by key, until they are dropped:
	// the first a memory shortage takes. An extra that went another way
	// (its object removed, rewritten or evicted, its segment unmounted) is
	// forgotten by pruneExtras, at least once per heatPruneInterval and
	// before its count is reported.
	extras  map[string][]extraReplica
	live    int   // len of every extras slice
	pruneAt int64 // the first Tick to prune extras again
	next    int   // the segment the next target search starts at
	stats   HotReplicaStats
}

type extraReplica struct {
	obj    *object // the key may be reused meanwhile
	seg    *segment
	offset uint64
}

func (h *hotReplicas) init(cfg *Config) {
	h.mode = cfg.DynamicReplicationMode
	if h.mode == DynamicReplicationOff {
		h.mode = ""
	}
	h.window = int64(cfg.DynamicReplicationHeatWindow)
	// Mooncake's rule: the threshold in reads per second times the window
	// in seconds, rounded up, at least one read.
	h.minHits = uint32(max(1, math.Ceil(cfg.DynamicReplicationQPSThreshold*cfg.DynamicReplicationHeatWindow.Seconds())))
	h.queued = make(map[string]bool)
	h.pending = make(map[string][]wire.AssignedTask)
	h.running = make(map[string]int)
	h.extras = make(map[string][]extraReplica)
}

// HotReplicaStats returns hot-object replicas' counters.
func (c *Core) HotReplicaStats() *HotReplicaStats { return &c.hot.stats }

// HotReplicasLive is the number of extra replicas that exist now.
func (c *Core) HotReplicasLive() int {
	c.pruneExtras()
	c.hot.mu.Lock()
	defer c.hot.mu.Unlock()
	return c.hot.live
}

// pruneExtras forgets the extras that are no longer replicas of their
// object: removed, rewritten, evicted or unmounted since they were added.
// Each key's check holds its shard's lock (then h.mu, as observeHeat).
func (c *Core) pruneExtras() {
	h := &c.hot
	h.mu.Lock()
	keys := make([]string, 0, len(h.extras))
	for k := range h.extras {
		keys = append(keys, k)
	}
	h.mu.Unlock()
	for _, key := range keys {
		sh := c.shardOf(key)
		sh.mu.Lock()
		o := sh.objects[key]
		h.mu.Lock()
		list := h.extras[key]
		var kept []extraReplica
		for _, x := range list {
			if o != nil && o == x.obj && x.index(o) >= 0 {
				kept = append(kept, x)
			}
		}
		h.live -= len(list) - len(kept)
		if kept == nil {
			delete(h.extras, key)
		} else {
			h.extras[key] = kept
		}
		h.mu.Unlock()
		sh.mu.Unlock()
	}
}

// index is x's position in o's replicas, -1 if it is not one of them.
func (x extraReplica) index(o *object) int {
	return slices.IndexFunc(o.replicaList(), func(r replica) bool { return r.seg == x.seg && r.offset == x.offset })
}

// observeHeat counts a use of o (under key) in its heat window and acts
// when the window's count reaches the threshold: counted once a window,
// and in enforce mode queued for an extra replica while o has fewer than
// DynamicReplicationMaxMemoryReplicas. The caller holds sh's lock: the
// window lives in the shard, so a read pays one map update and no other
// lock unless o turns hot.
func (c *Core) observeHeat(sh *shard, key string, o *object, now int64) {
	h := &c.hot
	w, ok := sh.heat[o]
	if !ok && len(sh.heat) >= heatEntriesPerShard {
		if now < sh.heatPruneAt {
			return // full, and looked through lately: reads of new keys stay cheap
		}
		sh.heatPruneAt = now + int64(heatPruneInterval)
		for k, x := range sh.heat {
			if now-x.start >= 2*h.window {
				delete(sh.heat, k)
			}
		}
		if len(sh.heat) >= heatEntriesPerShard {
			return
		}
	}
	if sh.heat == nil {
		sh.heat = make(map[*object]heatWindow)
	}
	if !ok || now-w.start >= h.window {
		w = heatWindow{start: now}
	}
	w.hits++
	sh.heat[o] = w
	if w.hits != h.minHits {
		return
	}
	h.stats.Hot.Add(1)
	if h.mode != DynamicReplicationEnforce || o.taskCount() > 0 || !o.complete() || o.unfinished() ||
		o.numReplicas() >= c.cfg.DynamicReplicationMaxMemoryReplicas {
		return // nothing to copy from (disk only), or no room under the cap
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.queued[key] && len(h.queue) < hotQueueLimit {
		h.queued[key] = true
		h.queue = append(h.queue, key)
		h.stats.Queued.Add(1)
	}
}

// tickHotReplicas starts a replica task for up to hotBatch queued hot
// objects, unless the pool is at or above HighWatermark (an extra replica
// would only push out objects that have none). Each task's executor is the
// owner of its target segment: its next ping takes the task.
func (c *Core) tickHotReplicas(now int64, usage float64) (allocated bool) {
	h := &c.hot
	if h.mode != DynamicReplicationEnforce {
		return false
	}
	h.mu.Lock()
	prune := now >= h.pruneAt && h.live > 0
	if prune {
		h.pruneAt = now + int64(heatPruneInterval)
	}
	h.mu.Unlock()
	if prune {
		c.pruneExtras()
	}
	h.mu.Lock()
	n := min(len(h.queue), hotBatch)
	keys := slices.Clone(h.queue[:n])
	h.queue = h.queue[n:]
	for _, k := range keys {
		delete(h.queued, k)
	}
	h.mu.Unlock()
	if len(keys) == 0 {
		return false
	}
	if usage >= c.cfg.HighWatermark {
		h.stats.Skipped.Add(int64(len(keys))) // hot again later, they queue again
		return false
	}
	c.segs.RLock()
	segs := c.segs.list
	c.segs.RUnlock()
	for _, key := range keys {
		c.startHotReplica(key, segs, now)
	}
	return true // the tasks' targets may have taken room
}

// startHotReplica creates the task adding a memory replica of key on a
// segment that holds none of it.
func (c *Core) startHotReplica(key string, segs []*segment, now int64) {
	h := &c.hot
	sh := c.shardOf(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	o, ok := sh.objects[key]
	if !ok || !o.complete() || o.unfinished() || o.taskCount() > 0 ||
		o.numReplicas() >= c.cfg.DynamicReplicationMaxMemoryReplicas {
		return
	}
	h.mu.Lock()
	start := h.next
	h.next++
	h.mu.Unlock()
	for i := range segs {
		s := segs[(start+i)%len(segs)]
		if o.hasReplicaOn(s) || s.desc.Location != "" {
			continue
		}
		h.mu.Lock()
		full := h.running[s.desc.ClientID] >= hotTasksPerClient
		h.mu.Unlock()
		if full {
			continue
		}
		t, id, ok := c.startCopyTask(key, o, s, s.desc.ClientID, now, true)
		if !ok {
			continue
		}
		expiry := t.deadline // the task's grants end with it
		plan := wire.TaskPlan{ID: id, Size: o.size, Targets: []wire.Replica{wireReplica(t.targets[0], o.size, true, expiry)}}
		for _, r := range o.reps() {
			plan.Sources = append(plan.Sources, wireReplica(r, o.size, false, expiry))
		}
		h.mu.Lock()
		h.pending[t.client] = append(h.pending[t.client], wire.AssignedTask{Key: key, Plan: plan})
		h.running[t.client]++
		h.mu.Unlock()
		h.stats.Started.Add(1)
		return
	}
}

// TakeAssignedTasks returns the replica tasks clientID is to run (its
// ping carries them); each ends with TaskDone as a task the client asked
// for.
func (c *Core) TakeAssignedTasks(clientID string) []wire.AssignedTask {
	h := &c.hot
	if h.mode != DynamicReplicationEnforce {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	out := h.pending[clientID]
	delete(h.pending, clientID)
	return out
}

// forgetAssigned drops a gone client's untaken tasks (tickTasks fails
// them: their executor is dead).
func (c *Core) forgetAssigned(clientID string) {
	h := &c.hot
	h.mu.Lock()
	delete(h.pending, clientID)
	h.mu.Unlock()
}

// hotReplicaEnded records the end of t, a hot-replica task: added holds
// the replicas that joined the object. The caller holds its shard's lock.
func (c *Core) hotReplicaEnded(t *task, added []replica) {
	h := &c.hot
	h.mu.Lock()
	if h.running[t.client]--; h.running[t.client] <= 0 {
		delete(h.running, t.client)
	}
	h.mu.Unlock()
	if len(added) == 0 {
		h.stats.Failed.Add(1)
		return
	}
	h.mu.Lock()
	for _, r := range added {
		h.extras[t.info.Key] = append(h.extras[t.info.Key], extraReplica{obj: t.obj, seg: r.seg, offset: r.offset})
		h.live++
	}
	h.mu.Unlock()
	h.stats.Added.Add(int64(len(added)))
}

// extraDroppable reports whether o's extra replica may go now: eviction's
// rules (evictable) but for those protecting the object's last copy (a pin,
// its writer's hold), as another replica stays: not while any lease runs (a
// lookup leases without counting a reader, and its caller may read any
// replica), a write is rewriting the ranges in place, a task copies from
// them, or the SSD tier has yet to persist the object (it may copy from
// this one). The caller holds o's shard lock.
func (c *Core) extraDroppable(o *object, now int64) bool {
	return !o.leased(now) && !o.unfinished() && o.taskCount() == 0 && o.numReplicas() >= 2 && !c.waitsForDisk(o)
}

// dropHotReplicas takes back extra replicas no reader holds now, until
// want bytes are free: what a memory shortage takes before any object's
// last replica. An extra a reader still copies from waits for the next
// pass. It reports the bytes freed.
func (c *Core) dropHotReplicas(now int64, want uint64) uint64 {
	return c.dropHotReplicasOf(now, want, nil)
}

// dropHotReplicasOf is dropHotReplicas over the extras of the objects
// whose stored keys match (every object's when match is nil): a tenant
// that must free bytes gives up its extras before any of its objects.
func (c *Core) dropHotReplicasOf(now int64, want uint64, match func(key string) bool) uint64 {
	h := &c.hot
	h.mu.Lock()
	if h.live == 0 {
		h.mu.Unlock()
		return 0
	}
	extras := h.extras
	h.extras = make(map[string][]extraReplica)
	h.live = 0
	h.mu.Unlock()
	var freedBytes uint64
	var kept map[string][]extraReplica
	for key, list := range extras {
		if match != nil && !match(key) {
			if kept == nil {
				kept = make(map[string][]extraReplica)
			}
			kept[key] = append(kept[key], list...)
			continue
		}
		sh := c.shardOf(key)
		sh.mu.Lock()
		o, ok := sh.objects[key]
		for _, x := range list {
			if freedBytes >= want {
				if kept == nil {
					kept = make(map[string][]extraReplica)
				}
				kept[key] = append(kept[key], x)
				continue
			}
			if !ok || o != x.obj {
				continue // the object went, and the range with it
			}
			i := x.index(o)
			switch {
			case i < 0:
				continue // evicted or dropped with its segment
			case !c.extraDroppable(o, now):
				if kept == nil {
					kept = make(map[string][]extraReplica)
				}
				kept[key] = append(kept[key], x)
				continue
			}
			r := o.replicaList()[i]
			o.setReplicas(slices.Delete(o.replicaList(), i, i+1))
			c.record(key, o) // before the range goes back (doc.go)
			r.seg.free(r.offset, o.size, &c.stats)
			freedBytes += o.size
			h.stats.Dropped.Add(1)
		}
		sh.mu.Unlock()
	}
	if kept != nil {
		h.mu.Lock()
		for k, l := range kept {
			h.extras[k] = append(h.extras[k], l...)
			h.live += len(l)
		}
		h.mu.Unlock()
	}
	return freedBytes
}
