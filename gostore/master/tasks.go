// tasks.go defines replica tasks: copying an object to other segments and
// moving one of its replicas, executed by the client that asked.

package master

import (
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/gostore/gostore/gostore/wire"
)

// finishedTaskTTL is how long a finished task stays queryable.
const finishedTaskTTL = 10 * time.Minute

// Task statuses, as Python's query_task reports them.
const (
	TaskProcessing = "PROCESSING"
	TaskSucceeded  = "SUCCESS"
	TaskFailed     = "FAILED"
)

type taskTable struct {
	sync.Mutex
	byID map[string]*task
}

// task is a running or finished replica task; taskTable's mutex guards it.
type task struct {
	info     wire.TaskInfo
	obj      *object   // the object copied: the key may be reused meanwhile
	client   string    // the executor
	size     uint64    // bytes per replica
	targets  []replica // allocated for the task, invisible to readers until done
	source   *segment  // move: the segment whose replica goes away
	finished int64     // when it ended (0: running)
	hold     uint64    // the targets' hold in the journal (0: none)
	// promotion: the task brings a disk-only object back to memory
	// (promotion.go); hot: it adds a replica of a hot object
	// (hotreplicas.go). deadline: when it expires unreported (0: never).
	promotion, hot bool
	deadline       int64
}

// CreateTask validates and plans a copy or move of key, allocating the
// target ranges. The calling client copies the bytes, then calls TaskDone.
// While the task runs, remove and upsert of the key return -708.
func (c *Core) CreateTask(req wire.CreateTaskReq) (wire.TaskPlan, error) {
	var plan wire.TaskPlan
	switch {
	case req.Key == "" || len(req.Targets) == 0:
		return plan, wire.Errorf(wire.ErrInvalidParams, "a task needs a key and targets")
	case req.Kind == wire.TaskMove && (req.Source == "" || len(req.Targets) != 1):
		return plan, wire.Errorf(wire.ErrInvalidParams, "a move needs one source and one target")
	case req.Kind != wire.TaskCopy && req.Kind != wire.TaskMove:
		return plan, wire.Errorf(wire.ErrInvalidParams, "unknown task kind %d", req.Kind)
	}
	if err := c.checkKey(0, req.Key); err != nil {
		return plan, err
	}
	now := c.now()
	c.touch(req.ClientID)
	targets, source, segErr := c.taskSegments(req)
	sh := c.shardOf(req.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	o, ok := sh.objects[req.Key]
	switch {
	case !ok: // a missing key comes before bad segments, as in Mooncake
		return plan, wire.Errorf(wire.ErrObjectNotFound, "%q", c.userKey(req.Key))
	case segErr != nil:
		return plan, segErr
	case o.unfinished():
		return plan, wire.Errorf(wire.ErrReplicaIsNotReady, "%q is being written", c.userKey(req.Key))
	case o.taskCount() > 0:
		return plan, wire.Errorf(wire.ErrObjectHasReplicationTask, "%q already has a task", c.userKey(req.Key))
	case source != nil && !o.hasReplicaOn(source):
		return plan, wire.Errorf(wire.ErrInvalidParams, "%q has no replica on %s to move", c.userKey(req.Key), req.Source)
	}
	t := &task{obj: o, client: req.ClientID, size: o.size, source: source,
		info: wire.TaskInfo{Key: req.Key, Kind: req.Kind, Status: TaskProcessing}}
	for _, s := range targets {
		if o.hasReplicaOn(s) {
			continue // already there: nothing to copy, as Mooncake's task does nothing
		}
		off, ok := s.allocate(o.size)
		if !ok {
			freeRanges(t.targets, o.size, &c.stats)
			c.evictSoon.Store(true)
			return plan, wire.Errorf(wire.ErrNoAvailableHandle, "no room for %q on %s", c.userKey(req.Key), s.desc.Name)
		}
		t.targets = append(t.targets, replica{seg: s, offset: off, status: replicaProcessing})
	}
	o.lastUse = now
	plan = wire.TaskPlan{Size: o.size}
	if len(t.targets) == 0 {
		// Every target holds the object: the task is done as it starts (a
		// move only drops its source). A plan without targets tells the
		// client there is nothing to run.
		if source != nil {
			c.dropReplicaOn(o, source, now)
			c.record(req.Key, o)
		}
		t.finished = now
		t.info.Status = TaskSucceeded
		c.stats.TasksSucceeded.Add(1)
		plan.ID = c.addTask(t)
		c.stats.TasksCreated.Add(1)
		return plan, nil
	}
	o.addTasks(1)
	t.hold = c.holdRanges(t.targets, o.size, 0) // under the shard lock: before any TaskDone
	expiry := c.taskGrantExpiry(now)
	for _, r := range o.reps() {
		plan.Sources = append(plan.Sources, wireReplica(r, o.size, false, expiry))
	}
	for _, r := range t.targets {
		plan.Targets = append(plan.Targets, wireReplica(r, o.size, true, expiry))
	}
	plan.ID = c.addTask(t)
	c.stats.TasksCreated.Add(1)
	return plan, nil
}

// addTask gives t a new id and files it; the id. An id is a random
// 64-bit number, not a count (Mooncake's are random UUIDs): one tenant's
// task ids tell nothing of another's, nor how many tasks there were. It
// is decimal, the low half of the (high, low) pair Python shows.
func (c *Core) addTask(t *task) string {
	c.tasks.Lock()
	defer c.tasks.Unlock()
	for {
		c.randMu.Lock()
		n := c.cfg.Rand.Uint64()
		c.randMu.Unlock()
		id := strconv.FormatUint(n, 10)
		if _, taken := c.tasks.byID[id]; !taken && n != 0 { // (0, 0) is Python's "no task"
			t.info.ID = id
			c.tasks.byID[id] = t
			return id
		}
	}
}

// dropReplicaOn removes o's replica on seg (the source of a finished
// move); readers may still copy out of it, so its range waits out the
// quarantine like a preempted write. The shard's lock is held.
func (c *Core) dropReplicaOn(o *object, seg *segment, now int64) {
	for i, r := range o.reps() {
		if r.seg == seg {
			o.setReplicas(slices.Delete(o.replicaList(), i, i+1))
			c.discard([]replica{r}, o.size, now)
			return
		}
	}
}

// taskSegments resolves the task's segment names; a name no segment has
// is a bad parameter (-600), as Mooncake answers it.
func (c *Core) taskSegments(req wire.CreateTaskReq) (targets []*segment, source *segment, err error) {
	c.segs.RLock()
	defer c.segs.RUnlock()
	seen := map[*segment]bool{}
	for _, name := range req.Targets {
		s, ok := c.segs.byName[name]
		if !ok {
			return nil, nil, wire.Errorf(wire.ErrInvalidParams, "target segment %q is not mounted", name)
		}
		if !seen[s] {
			seen[s] = true
			targets = append(targets, s)
		}
	}
	if req.Kind == wire.TaskMove {
		var ok bool
		if source, ok = c.segs.byName[req.Source]; !ok {
			return nil, nil, wire.Errorf(wire.ErrInvalidParams, "source segment %q is not mounted", req.Source)
		}
		if source == targets[0] {
			return nil, nil, wire.Errorf(wire.ErrInvalidParams, "move from %q to itself", req.Source)
		}
	}
	return targets, source, nil
}

func (o *object) hasReplicaOn(s *segment) bool {
	for _, r := range o.reps() {
		if r.seg == s {
			return true
		}
	}
	return false
}

// allocate takes size bytes of s; never on a dead or draining segment.
func (s *segment) allocate(size uint64) (uint64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead || s.drainAt != 0 || s.quarantineUntil != 0 {
		return 0, false
	}
	return s.alloc.Alloc(size)
}

// TaskDone ends a task: with OK the target replicas become COMPLETE (and a
// move drops its source replica), otherwise the targets are freed.
func (c *Core) TaskDone(clientID, id string, code wire.Code) error {
	now := c.now()
	c.tasks.Lock()
	t, ok := c.tasks.byID[id]
	switch {
	case !ok:
		c.tasks.Unlock()
		return wire.Errorf(wire.ErrObjectNoReplicationTask, "no task %q", id)
	case t.client != clientID:
		c.tasks.Unlock()
		return wire.Errorf(wire.ErrIllegalClient, "task %q belongs to another client", id)
	case t.finished != 0:
		c.tasks.Unlock()
		return wire.Errorf(wire.ErrInvalidParams, "task %q already ended %s", id, t.info.Status)
	}
	t.finished = now
	c.tasks.Unlock()
	c.finishTask(t, code, now, false)
	return nil
}

// finishTask ends t with its executor's code; expired: the executor never
// reported.
func (c *Core) finishTask(t *task, code wire.Code, now int64, expired bool) {
	sh := c.shardOf(t.info.Key)
	sh.mu.Lock()
	o, ok := sh.objects[t.info.Key]
	ok = ok && o == t.obj // the object may be gone and its key reused
	if ok {
		o.addTasks(-1)
	}
	var added int
	var addedReps []replica
	if ok && code == wire.OK {
		reps := o.replicaList()
		for _, r := range t.targets {
			if !r.seg.isDead() {
				r.status = replicaComplete
				reps = append(reps, r)
				addedReps = append(addedReps, r)
				added++
			}
		}
		o.setReplicas(reps)
		if t.source != nil && added > 0 {
			c.dropReplicaOn(o, t.source, now)
		}
		if added > 0 {
			// A replica where there was none: a range may have left the
			// object and come back with other bytes in between.
			o.placed = c.placements.Add(1)
			c.record(t.info.Key, o)
		}
	}
	c.releaseHold(t.hold) // the targets are replicas now, or freed below
	if t.hot {
		c.hotReplicaEnded(t, addedReps) // under the shard lock: before a drop can look for them
	}
	sh.mu.Unlock()
	if t.promotion {
		c.promotionEnded(t, code, added > 0, expired)
	}
	// A task the master started expires with its targets' write grants,
	// but its executor may still be writing: an SSD tier loads a promotion
	// into its own segment without a grant. Its targets wait out the
	// quarantine rather than go to the next put at once.
	quarantined := added == 0 && expired
	if quarantined {
		c.discard(t.targets, t.size, now)
	}
	c.tasks.Lock()
	defer c.tasks.Unlock()
	switch {
	case added > 0:
		t.info.Status = TaskSucceeded
		c.stats.TasksSucceeded.Add(1)
	default:
		if code == wire.OK {
			code = wire.ErrReplicaIsGone // the object or every target vanished
		}
		if !quarantined {
			freeRanges(t.targets, t.size, &c.stats)
		}
		t.info.Status, t.info.Error = TaskFailed, code.String()
		c.stats.TasksFailed.Add(1)
	}
	t.targets = nil
}

func (s *segment) isDead() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dead
}

// QueryTask describes a task; unknown (or long finished) ids are -709.
func (c *Core) QueryTask(id string) (wire.TaskInfo, error) {
	c.tasks.Lock()
	defer c.tasks.Unlock()
	t, ok := c.tasks.byID[id]
	if !ok {
		return wire.TaskInfo{}, wire.Errorf(wire.ErrObjectNoReplicationTask, "no task %q", id)
	}
	return t.info, nil
}

// tickTasks fails the running tasks of dead executors and the tasks the
// master started (promotions, hot replicas) not reported by their
// deadline, and forgets tasks that finished long ago.
func (c *Core) tickTasks(now int64, dead map[string]bool) {
	var orphaned, expired []*task
	c.tasks.Lock()
	for id, t := range c.tasks.byID {
		switch {
		case t.finished == 0 && dead[t.client]:
			t.finished = now
			orphaned = append(orphaned, t)
		case t.finished == 0 && t.deadline != 0 && now > t.deadline:
			t.finished = now
			expired = append(expired, t)
		case t.finished != 0 && now-t.finished > int64(finishedTaskTTL):
			delete(c.tasks.byID, id)
		}
	}
	c.tasks.Unlock()
	for _, t := range orphaned {
		c.finishTask(t, wire.ErrClientNotFound, now, false)
	}
	for _, t := range expired {
		c.finishTask(t, wire.ErrLeaseExpired, now, true)
	}
}

// preemptStarted ends the running tasks the master started on o (a
// promotion, a hot object's extra replica) for a remove or upsert of its
// key, which would otherwise be refused (-708) until they end: their
// targets go to the quarantine (the executor may still be writing), and a
// late TaskDone is refused as for any ended task. It reports false, ending
// nothing, when a task a client asked for runs on o. The caller holds o's
// shard lock (the task table's is taken under it, as addTask does).
func (c *Core) preemptStarted(o *object, now int64) bool {
	type ended struct {
		t       *task
		targets []replica
	}
	var started []ended
	c.tasks.Lock()
	for _, t := range c.tasks.byID {
		if t.obj != o || t.finished != 0 {
			continue
		}
		if !t.hot && !t.promotion {
			c.tasks.Unlock()
			return false
		}
		started = append(started, ended{t, t.targets})
	}
	for _, e := range started {
		e.t.finished = now
		e.t.targets = nil
		e.t.info.Status, e.t.info.Error = TaskFailed, wire.ErrReplicaIsGone.String()
		c.stats.TasksFailed.Add(1)
	}
	c.tasks.Unlock()
	// As finishTask: under the shard's lock, not the task table's.
	for _, e := range started {
		o.addTasks(-1)
		c.releaseHold(e.t.hold)
		c.discard(e.targets, e.t.size, now)
		if e.t.hot {
			c.hotReplicaEnded(e.t, nil)
		}
		if e.t.promotion {
			c.promotionEnded(e.t, wire.OK, false, false) // cancelled: its object is going
		}
	}
	return true
}
