package master

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gostore/gostore/gostore/wire"
)

func TestCopyTask(t *testing.T) {
	c, _ := newTestCore(t)
	s1 := mount(t, c, "a", "s1", 1<<20)
	s2 := mount(t, c, "b", "s2", 1<<20)
	mount(t, c, "c", "s3", 1<<20)
	put(t, c, "k", 4096, wire.ReplicaConfig{Preferred: []string{"s1"}})
	plan, err := c.CreateTask(wire.CreateTaskReq{ClientID: "x", Kind: wire.TaskCopy, Key: "k", Targets: []string{"s2", "s3", "s2"}})
	if err != nil {
		t.Fatal(err)
	}
	if plan.Size != 4096 || len(plan.Sources) != 1 || plan.Sources[0].SegID != s1 || len(plan.Targets) != 2 {
		t.Fatalf("plan %+v", plan)
	}
	// Targets are invisible to readers until the task ends.
	if g := c.GetReplicas([]string{"k"}, false); len(g[0].Replicas) != 1 {
		t.Fatalf("readers see %d replicas mid-task", len(g[0].Replicas))
	}
	if info, _ := c.QueryTask(plan.ID); info.Status != TaskProcessing || info.Key != "k" {
		t.Fatalf("running task: %+v", info)
	}
	if err := c.TaskDone("intruder", plan.ID, wire.OK); wire.CodeOf(err) != wire.ErrIllegalClient {
		t.Fatalf("foreign TaskDone: %v", err)
	}
	if err := c.TaskDone("x", plan.ID, wire.OK); err != nil {
		t.Fatal(err)
	}
	if err := c.TaskDone("x", plan.ID, wire.OK); wire.CodeOf(err) != wire.ErrInvalidParams {
		t.Fatalf("second TaskDone: %v", err)
	}
	g := c.GetReplicas([]string{"k"}, false)
	if len(g[0].Replicas) != 3 {
		t.Fatalf("after copy: %d replicas", len(g[0].Replicas))
	}
	if info, _ := c.QueryTask(plan.ID); info.Status != TaskSucceeded {
		t.Fatalf("status %q", info.Status)
	}
	// Losing the original segment keeps the object alive on the copies.
	c.UnmountSegment("a", "s1")
	if g := c.GetReplicas([]string{"k"}, false); g[0].Code != wire.OK || len(g[0].Replicas) != 2 || g[0].Replicas[0].SegID == s1 {
		t.Fatalf("after losing the source: %+v", g[0])
	}
	_ = s2
}

func TestMoveTask(t *testing.T) {
	c, clk := newTestCore(t)
	mount(t, c, "a", "s1", 1<<20)
	s2 := mount(t, c, "b", "s2", 1<<20)
	put(t, c, "k", 4096, wire.ReplicaConfig{Preferred: []string{"s1"}})
	plan, err := c.CreateTask(wire.CreateTaskReq{ClientID: "x", Kind: wire.TaskMove, Key: "k", Source: "s1", Targets: []string{"s2"}})
	if err != nil {
		t.Fatal(err)
	}
	c.TaskDone("x", plan.ID, wire.OK)
	g := c.GetReplicas([]string{"k"}, false)
	if len(g[0].Replicas) != 1 || g[0].Replicas[0].SegID != s2 {
		t.Fatalf("after move: %+v", g[0].Replicas)
	}
	// The source range is quarantined (readers may still copy out of it).
	if segs := c.Segments(); segs[0].Used != 4096 {
		t.Fatalf("source released too early: %d", segs[0].Used)
	}
	clk.Advance(c.cfg.PutStartReleaseTimeout)
	c.Ping("a")
	c.Ping("b")
	c.Ping("w")
	c.Ping("x")
	c.Tick()
	if segs := c.Segments(); segs[0].Used != 0 || segs[1].Used != 4096 {
		t.Fatalf("after release: %d %d", segs[0].Used, segs[1].Used)
	}
}

// A target that holds the object already is skipped, as Mooncake's task
// does nothing there; with none left the task is done as it starts.
func TestTaskToSegmentsHoldingTheObject(t *testing.T) {
	c, _ := newTestCore(t)
	s1 := mount(t, c, "a", "s1", 1<<20)
	s2 := mount(t, c, "b", "s2", 1<<20)
	put(t, c, "k", 4096, wire.ReplicaConfig{Preferred: []string{"s1"}})
	plan, err := c.CreateTask(wire.CreateTaskReq{ClientID: "x", Kind: wire.TaskCopy, Key: "k", Targets: []string{"s1"}})
	if err != nil || len(plan.Targets) != 0 {
		t.Fatalf("copy onto the holder: %+v %v", plan, err)
	}
	if info, _ := c.QueryTask(plan.ID); info.Status != TaskSucceeded {
		t.Fatalf("status %q", info.Status)
	}
	if segs := c.Segments(); segs[0].Used != 4096 || segs[1].Used != 0 {
		t.Fatalf("allocated for nothing: %d %d", segs[0].Used, segs[1].Used)
	}
	// The key is not held by the finished task: another one may start.
	plan, err = c.CreateTask(wire.CreateTaskReq{ClientID: "x", Kind: wire.TaskCopy, Key: "k", Targets: []string{"s1", "s2"}})
	if err != nil || len(plan.Targets) != 1 || plan.Targets[0].SegID != s2 {
		t.Fatalf("copy onto the holder and one more: %+v %v", plan, err)
	}
	if err := c.TaskDone("x", plan.ID, wire.OK); err != nil {
		t.Fatal(err)
	}
	// A move onto a segment that holds the object only drops the source.
	plan, err = c.CreateTask(wire.CreateTaskReq{ClientID: "x", Kind: wire.TaskMove, Key: "k", Source: "s2", Targets: []string{"s1"}})
	if err != nil || len(plan.Targets) != 0 {
		t.Fatalf("move onto a holder: %+v %v", plan, err)
	}
	if g := c.GetReplicas([]string{"k"}, false); len(g[0].Replicas) != 1 || g[0].Replicas[0].SegID != s1 {
		t.Fatalf("after the move: %+v", g[0].Replicas)
	}
	if info, _ := c.QueryTask(plan.ID); info.Status != TaskSucceeded {
		t.Fatalf("move status %q", info.Status)
	}
}

func TestTaskRefusals(t *testing.T) {
	c, _ := newTestCore(t)
	mount(t, c, "a", "s1", 1<<20)
	mount(t, c, "b", "s2", 8192)
	put(t, c, "k", 4096, wire.ReplicaConfig{Preferred: []string{"s1"}})
	put(t, c, "big", 16384, wire.ReplicaConfig{Preferred: []string{"s1"}})
	c.PutStart("w", "", []string{"writing"}, []uint64{10}, wire.ReplicaConfig{})
	for name, tc := range map[string]struct {
		req  wire.CreateTaskReq
		want wire.Code
	}{
		"no key":           {wire.CreateTaskReq{Kind: wire.TaskCopy, Targets: []string{"s2"}}, wire.ErrInvalidParams},
		"no targets":       {wire.CreateTaskReq{Kind: wire.TaskCopy, Key: "k"}, wire.ErrInvalidParams},
		"bad kind":         {wire.CreateTaskReq{Kind: 9, Key: "k", Targets: []string{"s2"}}, wire.ErrInvalidParams},
		"missing key":      {wire.CreateTaskReq{Kind: wire.TaskCopy, Key: "nope", Targets: []string{"s2"}}, wire.ErrObjectNotFound},
		"unfinished":       {wire.CreateTaskReq{Kind: wire.TaskCopy, Key: "writing", Targets: []string{"s2"}}, wire.ErrReplicaIsNotReady},
		"unknown target":   {wire.CreateTaskReq{Kind: wire.TaskCopy, Key: "k", Targets: []string{"s9"}}, wire.ErrInvalidParams},
		"missing, unknown": {wire.CreateTaskReq{Kind: wire.TaskCopy, Key: "nope", Targets: []string{"s9"}}, wire.ErrObjectNotFound},
		"no room":          {wire.CreateTaskReq{Kind: wire.TaskCopy, Key: "big", Targets: []string{"s2"}}, wire.ErrNoAvailableHandle},
		"move no source":   {wire.CreateTaskReq{Kind: wire.TaskMove, Key: "k", Source: "s2", Targets: []string{"s1"}}, wire.ErrInvalidParams},
		"move unknown src": {wire.CreateTaskReq{Kind: wire.TaskMove, Key: "k", Source: "s9", Targets: []string{"s2"}}, wire.ErrInvalidParams},
		"move to itself":   {wire.CreateTaskReq{Kind: wire.TaskMove, Key: "k", Source: "s1", Targets: []string{"s1"}}, wire.ErrInvalidParams},
		"move two targets": {wire.CreateTaskReq{Kind: wire.TaskMove, Key: "k", Source: "s1", Targets: []string{"s1", "s2"}}, wire.ErrInvalidParams},
	} {
		if _, err := c.CreateTask(tc.req); wire.CodeOf(err) != tc.want {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
	}
	if segs := c.Segments(); segs[1].Used != 0 {
		t.Fatalf("a refused task left %d bytes allocated", segs[1].Used)
	}
	if _, err := c.QueryTask("404"); wire.CodeOf(err) != wire.ErrObjectNoReplicationTask {
		t.Fatalf("unknown task: %v", err)
	}
	if err := c.TaskDone("x", "404", wire.OK); wire.CodeOf(err) != wire.ErrObjectNoReplicationTask {
		t.Fatalf("unknown TaskDone: %v", err)
	}
}

func TestFailedAndOrphanedTasksFreeTheirTargets(t *testing.T) {
	c, clk := newTestCore(t)
	mount(t, c, "a", "s1", 1<<20)
	mount(t, c, "b", "s2", 1<<20)
	put(t, c, "k", 4096, wire.ReplicaConfig{Preferred: []string{"s1"}})
	plan, _ := c.CreateTask(wire.CreateTaskReq{ClientID: "x", Kind: wire.TaskCopy, Key: "k", Targets: []string{"s2"}})
	c.TaskDone("x", plan.ID, wire.ErrTransferFail)
	if info, _ := c.QueryTask(plan.ID); info.Status != TaskFailed || info.Error != "TRANSFER_FAIL" {
		t.Fatalf("failed task: %+v", info)
	}
	if segs := c.Segments(); segs[1].Used != 0 {
		t.Fatal("failed task kept its target")
	}
	// An executor that dies: its task fails at expiry and frees the target.
	plan, _ = c.CreateTask(wire.CreateTaskReq{ClientID: "doomed", Kind: wire.TaskCopy, Key: "k", Targets: []string{"s2"}})
	for range 12 {
		clk.Advance(time.Second)
		c.Ping("a")
		c.Ping("b")
		c.Ping("w")
		c.Tick()
	}
	if info, _ := c.QueryTask(plan.ID); info.Status != TaskFailed {
		t.Fatalf("orphaned task: %+v", info)
	}
	if segs := c.Segments(); segs[1].Used != 0 {
		t.Fatal("orphaned task kept its target")
	}
	if r := c.Remove([]string{"k"}, false); r[0] != wire.OK {
		t.Fatalf("object still locked by the dead task: %v", r[0])
	}
	// Finished tasks are forgotten after a while.
	clk.Advance(finishedTaskTTL + time.Second)
	c.Tick()
	if _, err := c.QueryTask(plan.ID); wire.CodeOf(err) != wire.ErrObjectNoReplicationTask {
		t.Fatal("finished task never forgotten")
	}
}

// The task's object vanishes (its only replica's segment is unmounted) and
// the key is put again before the task ends: the new object must not get
// the old task's replicas or its task count.
func TestTaskEndingAfterItsObjectWasReplaced(t *testing.T) {
	c, _ := newTestCore(t)
	mount(t, c, "a", "s1", 1<<20)
	mount(t, c, "b", "s2", 1<<20)
	mount(t, c, "c", "s3", 1<<20)
	put(t, c, "k", 4096, wire.ReplicaConfig{Preferred: []string{"s1"}})
	plan, err := c.CreateTask(wire.CreateTaskReq{ClientID: "x", Kind: wire.TaskCopy, Key: "k", Targets: []string{"s2"}})
	if err != nil {
		t.Fatal(err)
	}
	c.UnmountSegment("a", "s1")
	put(t, c, "k", 100, wire.ReplicaConfig{Preferred: []string{"s3"}})
	c.TaskDone("x", plan.ID, wire.OK)
	g := c.GetReplicas([]string{"k"}, false)
	if g[0].Size != 100 || len(g[0].Replicas) != 1 {
		t.Fatalf("the new object was changed by the old task: %+v", g[0])
	}
	if r := c.Remove([]string{"k"}, true); r[0] != wire.OK { // -708 if the count leaked
		t.Fatalf("new object locked by the old task: %v", r[0])
	}
	if info, _ := c.QueryTask(plan.ID); info.Status != TaskFailed {
		t.Fatalf("task status %q", info.Status)
	}
	for _, s := range c.Segments() {
		if s.Used != 0 {
			t.Fatalf("%s keeps %d bytes", s.Name, s.Used)
		}
	}
}

// Placed names an object's replica set: reads and a failed task leave it,
// a task that adds a replica renames it (a range may have left and come
// back in between), a write starts it over at its epoch, and a restart
// gives every object a name no reader saw.
func TestPlacedNamesTheReplicaSet(t *testing.T) {
	c, _ := newTestCore(t)
	mount(t, c, "a", "s1", 1<<20)
	mount(t, c, "b", "s2", 1<<20)
	res := put(t, c, "k", 4096, wire.ReplicaConfig{Preferred: []string{"s1"}})
	look := func() wire.GetResult {
		t.Helper()
		g := c.GetReplicas([]string{"k"}, false)[0]
		if g.Code != wire.OK {
			t.Fatalf("GetReplicas: %v", g.Code)
		}
		return g
	}
	g := look()
	if g.Placed == 0 || g.Placed != res.Epoch || g.Epoch != res.Epoch {
		t.Fatalf("after the put: placed %d, epoch %d; want both %d", g.Placed, g.Epoch, res.Epoch)
	}
	if again := look(); again.Placed != g.Placed {
		t.Fatal("a read renamed the replica set")
	}
	move := func(from, to string, code wire.Code) {
		t.Helper()
		plan, err := c.CreateTask(wire.CreateTaskReq{ClientID: "x", Kind: wire.TaskMove, Key: "k", Source: from, Targets: []string{to}})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.TaskDone("x", plan.ID, code); err != nil {
			t.Fatal(err)
		}
	}
	move("s1", "s2", wire.ErrTransferFail)
	if now := look(); now.Placed != g.Placed {
		t.Fatal("a failed move renamed the replica set")
	}
	seen := map[uint64]bool{g.Placed: true}
	for _, m := range [][2]string{{"s1", "s2"}, {"s2", "s1"}} { // away and back
		move(m[0], m[1], wire.OK)
		now := look()
		if seen[now.Placed] || now.Epoch != res.Epoch {
			t.Fatalf("move %s -> %s: placed %d (seen before: %v), epoch %d", m[0], m[1], now.Placed, seen[now.Placed], now.Epoch)
		}
		seen[now.Placed] = true
	}
	up, err := c.UpsertStart("w", "", []string{"k"}, []uint64{4096}, wire.ReplicaConfig{})
	if err != nil || up[0].Code != wire.OK {
		t.Fatalf("upsert: %v %+v", err, up)
	}
	c.PutEnd("w", []string{"k"}, []uint64{up[0].Epoch})
	if now := look(); now.Placed != up[0].Epoch {
		t.Fatalf("after an upsert: placed %d, want its epoch %d", now.Placed, up[0].Epoch)
	}
	before := look()
	seen[before.Placed] = true
	// Another master process: its names start elsewhere (the tests' cores
	// share one seed, so this one gets its own).
	r := New(Config{DefaultKVLeaseTTL: time.Second, ClientTTL: 10 * time.Second, Now: c.cfg.Now,
		Rand: rand.New(rand.NewPCG(7, 8))})
	r.Restore(c.DurableState(nil))
	after := r.GetReplicas([]string{"k"}, false)[0]
	if after.Code != wire.OK || after.Epoch != before.Epoch || seen[after.Placed] || after.Placed == 0 {
		t.Fatalf("restored: epoch %d placed %d (seen before: %v); before: epoch %d placed %d",
			after.Epoch, after.Placed, seen[after.Placed], before.Epoch, before.Placed)
	}
}
