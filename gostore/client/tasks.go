// tasks.go defines Tasks, replica tasks on the client side: asking the master for a
// copy or move plan and carrying it out in the background.

package client

import (
	"github.com/gostore/gostore/gostore/transfer"
	"github.com/gostore/gostore/gostore/wire"
)

// Tasks carries out replica tasks: it asks the master for a copy or move
// plan and runs it in the background (a goroutine counted by core's wg,
// so Close waits for it), reading the object through Reads. Its only state
// is slots; it takes no lock of its own but core's inFlight read lock,
// held while a task is started.
type Tasks struct {
	*core
	reads *Reads
	// slots holds a token per master-started task running (at most
	// assignedWorkers): each holds a buffer of its object's size.
	slots chan struct{}
}

// assignedWorkers bounds the master-started tasks a client runs at once;
// the master hands one client no more than that many at a time either
// (gostore/master's hotTasksPerClient), so the rest wait rarely.
const assignedWorkers = 4

func newTasks(k *core, reads *Reads) *Tasks {
	return &Tasks{core: k, reads: reads, slots: make(chan struct{}, assignedWorkers)}
}

// CreateCopyTask starts copying key to the named segments and returns the
// task ID at once; QueryTask follows it. While it runs, remove and upsert of
// key return -708.
func (c *Tasks) CreateCopyTask(key string, targets []string) (string, error) {
	return c.createTask(wire.CreateTaskReq{Kind: wire.TaskCopy, Key: key, Targets: targets})
}

// CreateMoveTask starts moving key's replica from source to target.
func (c *Tasks) CreateMoveTask(key, source, target string) (string, error) {
	return c.createTask(wire.CreateTaskReq{Kind: wire.TaskMove, Key: key, Source: source, Targets: []string{target}})
}

// QueryTask returns a task's state as the master knows it.
func (c *Tasks) QueryTask(id string) (wire.TaskInfo, error) {
	if err := c.checkOpen(); err != nil {
		return wire.TaskInfo{}, err
	}
	ctx, cancel := c.ctx()
	defer cancel()
	var info wire.TaskInfo
	err := c.master.Call(ctx, wire.OpQueryTask, &wire.QueryTaskReq{ID: id}, &info)
	return info, err
}

func (c *Tasks) createTask(req wire.CreateTaskReq) (string, error) {
	leave, err := c.enter() // Close must not wait on c.wg before this Add
	if err != nil {
		return "", err
	}
	defer leave()
	req.ClientID = c.id
	ctx, cancel := c.ctx()
	defer cancel()
	var plan wire.TaskPlan
	if err := c.master.Call(ctx, wire.OpCreateTask, &req, &plan); err != nil {
		c.log.Warn("replica task refused", "key", req.Key, "targets", req.Targets, "err", err)
		return "", err
	}
	if len(plan.Targets) == 0 {
		return plan.ID, nil // every target holds the object: the master ended the task
	}
	c.wg.Add(1)
	go c.runAndReport(req.Key, plan)
	return plan.ID, nil
}

// runAssigned runs, in the background, the replica tasks the master
// started for this client (hot objects' extra replicas, which its ping
// carries): as a task it asked for, ended with TaskDone. The caller is
// the ping loop, itself counted in c.wg, so the Adds never race Close's
// Wait; it must not enter() (Close holds inFlight while it waits for the
// ping loop).
func (c *Tasks) runAssigned(tasks []wire.AssignedTask) {
	if c.closed.Load() {
		return // the master fails them when this client is gone
	}
	for _, at := range tasks {
		c.wg.Add(1)
		go func() {
			c.slots <- struct{}{} // before runTask allocates its buffer
			defer func() { <-c.slots }()
			c.runAndReport(at.Key, at.Plan)
		}()
	}
}

// runAndReport runs one task and reports its outcome; the caller added it
// to c.wg.
func (c *Tasks) runAndReport(key string, plan wire.TaskPlan) {
	defer c.wg.Done()
	code := c.runTask(key, plan)
	ctx, cancel := c.ctx()
	defer cancel()
	if err := c.master.Call(ctx, wire.OpTaskDone, &wire.TaskDoneReq{ClientID: c.id, ID: plan.ID, Code: code}, nil); err != nil {
		c.log.Warn("TaskDone not delivered; the task fails when this client expires", "task", plan.ID, "err", err)
	}
}

// runTask copies the object from one of the plan's sources to every target
// through a buffer of its own.
func (c *Tasks) runTask(key string, plan wire.TaskPlan) wire.Code {
	buf := make([]byte, plan.Size)
	p := &Pending{keys: []string{key}, res: []wire.GetResult{{Code: wire.OK, Size: plan.Size, Replicas: plan.Sources}}}
	if got := c.reads.readInto(p, [][][]byte{{buf}}, nil); got[0] < 0 {
		return wire.Code(got[0])
	}
	ctx, cancel := c.ctx()
	defer cancel()
	ids := make([]uint64, len(plan.Targets))
	for i, t := range plan.Targets {
		ids[i] = t.SegID
	}
	known, err := c.resolve(ctx, ids)
	if err != nil {
		return wire.CodeOf(err)
	}
	var ops []transfer.Op
	for _, t := range plan.Targets {
		peer, ok := known[t.SegID]
		if !ok {
			return wire.ErrSegmentNotFound
		}
		ops = append(ops, transfer.Op{Peer: peer, Offset: t.Offset, Bufs: [][]byte{buf}, Write: true, Grant: t.Grant})
	}
	// A target whose owner remounted is written again with its new UCX
	// descriptor, as puts are (doRefreshing).
	for _, err := range c.doRefreshing(ctx, ops, nil) {
		if err != nil {
			c.log.Warn("replica task transfer failed", "task", plan.ID, "err", err)
			return wire.CodeOf(err)
		}
	}
	return wire.OK
}
