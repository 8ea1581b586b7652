// promotion.go defines promotion on hit (Mooncake's --promotion_on_hit): an
// object read from its disk copy often enough gets a memory replica back,
// written by the client whose SSD tier holds the copy.

package master

import (
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"

	"github.com/gostore/gostore/gostore/wire"
)

// Mooncake's defaults for the promotion flags.
const (
	DefaultPromotionAdmissionThreshold = 2
	DefaultPromotionQueueLimit         = 50000
	DefaultPromotionMaxPerHeartbeat    = 1
)

// PromotionStats count promotion's decisions and outcomes; the server
// serves them as Mooncake's master_promotion_* series.
type PromotionStats struct {
	// Admitted: disk reads that passed every gate and queued their object.
	Admitted atomic.Int64
	// RejectedFrequency: the sketch had seen the object fewer than
	// PromotionAdmissionThreshold times. RejectedWatermark: the pool was
	// at or above HighWatermark. RejectedCap: PromotionQueueLimit
	// promotions were queued or running.
	RejectedFrequency, RejectedWatermark, RejectedCap atomic.Int64
	// Completed (and CompletedBytes): memory replicas the holder wrote and
	// reported. Failed: the holder reported an error. Cancelled: the
	// promotion's premise went away (object removed or rewritten, holder
	// gone, no room on the holder's segments). Expired: the holder did
	// not report while the target's write grant lasted (taskGrantExpiry);
	// the target is quarantined.
	Completed, CompletedBytes, Failed, Cancelled, Expired atomic.Int64
}

// promotions is the promotion state: the frequency sketch, the keys
// waiting for their holder's next heartbeat, and how many promotions are
// queued or running (bounded by PromotionQueueLimit).
type promotions struct {
	sketch *countMinSketch // nil: promotion off
	mu     sync.Mutex
	queues offloadQueues // per disk holder; guarded by its own lock, counted under mu
	queued int           // keys in queues
	// running counts promotion tasks not yet finished; under mu too, so
	// that queued+running never passes the limit.
	running int
	stats   PromotionStats
}

// PromotionInFlight is the number of promotions queued or running (Mooncake's
// master_promotion_in_flight gauge).
func (c *Core) PromotionInFlight() int {
	c.promo.mu.Lock()
	defer c.promo.mu.Unlock()
	return c.promo.queued + c.promo.running
}

// PromotionStats returns promotion's counters.
func (c *Core) PromotionStats() *PromotionStats { return &c.promo.stats }

// diskRead is a use of key that its disk copy alone served; holder holds
// the copy.
type diskRead struct{ key, holder string }

// observeDiskReads is told of the uses that disk copies alone served, and
// queues each object for promotion when every gate passes. The caller
// holds no shard lock (the watermark takes segs).
func (c *Core) observeDiskReads(reads []diskRead) {
	p, st := &c.promo, &c.promo.stats
	for _, r := range reads {
		if p.queues.has(r.holder, r.key) {
			continue // already waiting: this read changes nothing
		}
		if p.sketch.add(maphash.String(c.seed, r.key)) < uint32(c.cfg.PromotionAdmissionThreshold) {
			st.RejectedFrequency.Add(1)
			continue
		}
		if math.Float64frombits(c.usageBits.Load()) >= c.cfg.HighWatermark { // as of the last Tick
			// A replica now would only be evicted again, or push out others.
			st.RejectedWatermark.Add(1)
			continue
		}
		p.mu.Lock()
		if p.queued+p.running >= c.cfg.PromotionQueueLimit {
			st.RejectedCap.Add(1)
		} else if p.queues.push(r.holder, r.key) { // false: a concurrent read queued it
			p.queued++
			st.Admitted.Add(1)
		}
		p.mu.Unlock()
	}
}

// promotionPending reports whether clientID has promotions to run (its
// ping then tells it to run its offload heartbeat).
func (c *Core) promotionPending(clientID string) bool {
	return c.promo.sketch != nil && c.promo.queues.pending(clientID)
}

// forgetPromotions drops a gone client's queued promotions.
func (c *Core) forgetPromotions(clientID string) {
	p := &c.promo
	if p.sketch == nil {
		return
	}
	p.mu.Lock()
	n := p.queues.forget(clientID)
	p.queued -= n
	p.mu.Unlock()
	p.stats.Cancelled.Add(int64(n))
}

// PromotionHeartbeat hands clientID, the holder of disk copies, up to
// PromotionMaxPerHeartbeat promotions: for each a task whose target is a
// range of one of clientID's host-memory segments. The client loads the
// object from its SSD tier into the range and reports with TaskDone; the
// range becomes a COMPLETE replica then. A queued key whose object no
// longer needs it (removed, rewritten, back in memory, its copy moved) is
// cancelled; so is one for which none of the holder's segments has room.
func (c *Core) PromotionHeartbeat(clientID string) []wire.PromotionTask {
	p := &c.promo
	if p.sketch == nil {
		return nil
	}
	c.touch(clientID)
	p.mu.Lock()
	keys := p.queues.pop(clientID, c.cfg.PromotionMaxPerHeartbeat)
	p.queued -= len(keys)
	p.running += len(keys) // reserved until the task exists or is cancelled
	p.mu.Unlock()
	var out []wire.PromotionTask
	now := c.now()
	for _, key := range keys {
		if pt, ok := c.startPromotion(clientID, key, now); ok {
			out = append(out, pt)
			continue
		}
		p.mu.Lock()
		p.running--
		p.mu.Unlock()
		p.stats.Cancelled.Add(1)
	}
	return out
}

// startPromotion creates the task promoting key, if its object still
// lives on clientID's disk alone.
func (c *Core) startPromotion(clientID, key string, now int64) (wire.PromotionTask, bool) {
	var pt wire.PromotionTask
	segs := c.hostSegmentsOf(clientID)
	sh := c.shardOf(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	o, ok := sh.objects[key]
	if !ok || o.onDisk() == nil || o.onDisk().client != clientID || o.numReplicas() > 0 || o.taskCount() > 0 {
		return pt, false
	}
	for _, s := range segs {
		t, id, ok := c.startCopyTask(key, o, s, clientID, now, false)
		if !ok {
			continue
		}
		pt = wire.PromotionTask{ID: id, Key: key, Size: o.size,
			Target: wireReplica(t.targets[0], o.size, true, t.deadline)}
		return pt, true
	}
	// No room on the holder's segments: cancelled (and counted so). An
	// eviction pass is not asked for: below the watermark it would evict
	// others' objects every Tick for a replica nobody waits on.
	return pt, false
}

// startCopyTask creates a task the master starts itself (a promotion, a
// hot replica: hot says which) copying key's object o onto a new range of
// s, run by client, and returns it with its ID; false when s has no room.
// sh.mu of key held: the ranges are held before any TaskDone can come.
func (c *Core) startCopyTask(key string, o *object, s *segment, client string, now int64, hot bool) (*task, string, bool) {
	off, ok := s.allocate(o.size)
	if !ok {
		return nil, "", false
	}
	t := &task{obj: o, client: client, size: o.size,
		deadline: c.taskGrantExpiry(now), // its write grant's end: see finishTask
		info:     wire.TaskInfo{Key: key, Kind: wire.TaskCopy, Status: TaskProcessing},
		targets:  []replica{{seg: s, offset: off, status: replicaProcessing}},
		hot:      hot, promotion: !hot}
	o.addTasks(1)
	t.hold = c.holdRanges(t.targets, o.size, 0)
	id := c.addTask(t)
	c.stats.TasksCreated.Add(1)
	return t, id, true
}

// hostSegmentsOf lists clientID's mounted host-memory segments: where its
// SSD tier can write a promoted object without a transfer.
func (c *Core) hostSegmentsOf(clientID string) []*segment {
	c.segs.RLock()
	list := c.segs.list
	c.segs.RUnlock()
	var out []*segment
	for _, s := range list {
		if s.desc.ClientID == clientID && s.desc.Location == "" {
			out = append(out, s)
		}
	}
	return out
}

// promotionEnded counts a promotion task's end: code is the holder's
// report, added whether its replica joined the object.
func (c *Core) promotionEnded(t *task, code wire.Code, added bool, expired bool) {
	p := &c.promo
	p.mu.Lock()
	p.running--
	p.mu.Unlock()
	st := &p.stats
	switch {
	case added:
		st.Completed.Add(1)
		st.CompletedBytes.Add(int64(t.size))
	case expired:
		st.Expired.Add(1)
	case code == wire.OK || code == wire.ErrClientNotFound:
		st.Cancelled.Add(1) // the object went away, or the holder did
	default:
		st.Failed.Add(1)
	}
}

// countMinSketch estimates how often each key was seen in little fixed
// memory (cmDepth×cmWidth counters, 64 KiB): a map of every key read from
// disk would grow with the disk tier. It is ours rather than a library's
// because it is thirty lines over atomics (no lock on the read path), and
// it ages: after cmWidth×10 additions every counter is halved, so the
// counts follow the recent reads (TinyLFU's reset).
type countMinSketch struct {
	rows [cmDepth][cmWidth]atomic.Uint32
	adds atomic.Uint64
}

const (
	cmDepth = 4
	cmWidth = 4096 // a power of two
)

// add counts one sighting of the key whose hash is h and returns its
// estimated count so far (never below the true count since the last
// aging).
func (s *countMinSketch) add(h uint64) uint32 {
	if s.adds.Add(1)%(cmWidth*10) == 0 {
		s.age()
	}
	lo, hi := uint32(h), uint32(h>>32)|1
	est := ^uint32(0)
	for i := range s.rows {
		// Kirsch–Mitzenmacher: cmDepth indices from one 64-bit hash.
		idx := (lo + uint32(i)*hi) & (cmWidth - 1)
		if n := s.rows[i][idx].Add(1); n < est {
			est = n
		}
	}
	return est
}

func (s *countMinSketch) age() {
	for i := range s.rows {
		for j := range s.rows[i] {
			c := &s.rows[i][j]
			for {
				v := c.Load()
				if c.CompareAndSwap(v, v/2) {
					break
				}
			}
		}
	}
}
