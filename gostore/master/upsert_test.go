package master

import (
	"testing"
	"time"

	"github.com/gostore/gostore/gostore/wire"
)

func upsert(t *testing.T, c *Core, writer, key string, size uint64, cfg wire.ReplicaConfig) wire.PutStartResult {
	t.Helper()
	res, err := c.UpsertStart(writer, "", []string{key}, []uint64{size}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return res[0]
}

func statuses(c *Core, key string) []string {
	info, _ := c.QueryKey(key)
	var out []string
	for _, r := range info.Replicas {
		out = append(out, r.Status)
	}
	return out
}

// The RFC's UpsertStart flowchart, branch by branch.
func TestUpsertCases(t *testing.T) {
	c, clk := newTestCore(t)
	mount(t, c, "a", "seg", 1<<20)

	// Validation.
	if r := upsert(t, c, "w", "", 10, wire.ReplicaConfig{}); r.Code != wire.ErrInvalidParams {
		t.Fatalf("empty key: %v", r.Code)
	}
	if r := upsert(t, c, "w", "k", 0, wire.ReplicaConfig{}); r.Code != wire.ErrInvalidParams {
		t.Fatalf("size 0: %v", r.Code)
	}
	if _, err := c.UpsertStart("w", "", []string{"k"}, nil, wire.ReplicaConfig{}); wire.CodeOf(err) != wire.ErrInvalidParams {
		t.Fatal("length mismatch accepted")
	}

	// Case A: a new key is allocated like a put.
	a := upsert(t, c, "w", "k", 1000, wire.ReplicaConfig{HardPin: true})
	if a.Code != wire.OK || len(a.Replicas) != 1 {
		t.Fatalf("case A: %+v", a)
	}
	c.PutEnd("w", []string{"k"}, []uint64{a.Epoch})

	// Case B: same size rewrites in place, unreadable until the end.
	b := upsert(t, c, "w2", "k", 1000, wire.ReplicaConfig{})
	if b.Code != wire.OK || at(b.Replicas[0]) != at(a.Replicas[0]) || b.Epoch == a.Epoch {
		t.Fatalf("case B: %+v (was %+v)", b, a)
	}
	if g := c.GetReplicas([]string{"k"}, true); g[0].Code != wire.ErrReplicaIsNotReady {
		t.Fatalf("read during in-place write: %v", g[0].Code)
	}
	if info, _ := c.QueryKey("k"); !info.HardPin {
		t.Fatal("hard pin lost in case B")
	}
	if r := c.PutEnd("w", []string{"k"}, []uint64{a.Epoch}); r[0] != wire.ErrObjectNotFound {
		t.Fatalf("the old writer ended the new write: %v", r[0])
	}
	c.PutEnd("w2", []string{"k"}, []uint64{b.Epoch})
	if used := c.Segments()[0].Used; used != 1024 {
		t.Fatalf("in-place upsert used %d bytes", used)
	}

	// Readers in flight: -714 until they are done (or their lease ends).
	c.GetReplicas([]string{"k"}, true)
	if r := upsert(t, c, "w", "k", 1000, wire.ReplicaConfig{}); r.Code != wire.ErrObjectReplicaBusy {
		t.Fatalf("upsert under a reader: %v", r.Code)
	}
	g := c.GetReplicas([]string{"k"}, false)
	c.ReadDone([]string{"k"}, []uint64{g[0].Epoch + 1}) // another object's read
	c.ReadDone([]string{"k"}, nil)                      // no epochs: ignored
	if r := upsert(t, c, "w", "k", 1000, wire.ReplicaConfig{}); r.Code != wire.ErrObjectReplicaBusy {
		t.Fatalf("a stale ReadDone ended a current read: %v", r.Code)
	}
	c.ReadDone([]string{"k"}, []uint64{g[0].Epoch})
	c.GetReplicas([]string{"k"}, true)
	clk.Advance(2 * time.Second) // the reader's lease ends without ReadDone
	c.GetReplicas([]string{"k"}, false)
	clk.Advance(2 * time.Second)

	// Case C: another size allocates anew; the old range is quarantined.
	cc := upsert(t, c, "w", "k", 5000, wire.ReplicaConfig{})
	if cc.Code != wire.OK || at(cc.Replicas[0]) == at(a.Replicas[0]) {
		t.Fatalf("case C: %+v", cc)
	}
	if info, _ := c.QueryKey("k"); !info.HardPin || info.Size != 5000 {
		t.Fatalf("case C metadata: %+v", info)
	}
	if used := c.Segments()[0].Used; used != 1024+5056 {
		t.Fatalf("old range must wait in quarantine: used %d", used)
	}

	// Preemption of an unfinished write: its ranges are quarantined, the
	// new upsert allocates (nothing complete remained).
	pre := upsert(t, c, "w3", "k", 5000, wire.ReplicaConfig{})
	if pre.Code != wire.OK || at(pre.Replicas[0]) == at(cc.Replicas[0]) {
		t.Fatalf("preempting upsert: %+v", pre)
	}
	if r := c.PutEnd("w", []string{"k"}, []uint64{cc.Epoch}); r[0] != wire.ErrObjectNotFound {
		t.Fatalf("preempted write ended: %v", r[0])
	}
	c.PutEnd("w3", []string{"k"}, []uint64{pre.Epoch})
	clk.Advance(c.cfg.PutStartReleaseTimeout)
	c.Ping("a")
	c.Ping("w3")
	c.Tick()
	if used := c.Segments()[0].Used; used != 5056 {
		t.Fatalf("quarantine not released: used %d", used)
	}
	if st := c.Stats(); st.UpsertsInPlace.Load() != 1 || st.WritesPreempted.Load() != 1 {
		t.Fatalf("counters: in-place %d preempted %d", st.UpsertsInPlace.Load(), st.WritesPreempted.Load())
	}
}

// Two threads of one client upsert the same key: the first write's end must
// not publish the second's half-written bytes. Epochs, not client IDs, tell
// the writes apart.
func TestSameClientStaleEpochCannotEnd(t *testing.T) {
	c, _ := newTestCore(t)
	mount(t, c, "a", "s1", 1<<20)
	put(t, c, "k", 100, wire.ReplicaConfig{})
	first := upsert(t, c, "w", "k", 100, wire.ReplicaConfig{})
	second := upsert(t, c, "w", "k", 100, wire.ReplicaConfig{})
	if second.Code != wire.OK || second.Epoch == first.Epoch {
		t.Fatalf("second upsert: %+v", second)
	}
	if r := c.PutEnd("w", []string{"k"}, []uint64{first.Epoch}); r[0] != wire.ErrObjectNotFound {
		t.Fatalf("same-client stale epoch accepted: %v", r[0])
	}
	if r := c.PutEnd("w", []string{"k"}, []uint64{second.Epoch}); r[0] != wire.OK {
		t.Fatalf("current epoch refused: %v", r[0])
	}
}

func TestRemoveAndEvictionRespectTasks(t *testing.T) {
	c, _ := newTestCore(t)
	c.cfg.EvictionRatio = 1
	mount(t, c, "a", "s1", 1<<20)
	mount(t, c, "b", "s2", 1<<20)
	put(t, c, "k", 100, wire.ReplicaConfig{Preferred: []string{"s1"}})
	plan, err := c.CreateTask(wire.CreateTaskReq{ClientID: "x", Kind: wire.TaskCopy, Key: "k", Targets: []string{"s2"}})
	if err != nil {
		t.Fatal(err)
	}
	if r := c.Remove([]string{"k"}, true); r[0] != wire.ErrObjectHasReplicationTask {
		t.Fatalf("remove during a task: %v", r[0])
	}
	if r := upsert(t, c, "w", "k", 100, wire.ReplicaConfig{}); r.Code != wire.ErrObjectHasReplicationTask {
		t.Fatalf("upsert during a task: %v", r.Code)
	}
	if res := c.Evict(); res.Objects != 0 {
		t.Fatal("evicted an object with a running task")
	}
	if _, err := c.CreateTask(wire.CreateTaskReq{ClientID: "x", Kind: wire.TaskCopy, Key: "k", Targets: []string{"s2"}}); wire.CodeOf(err) != wire.ErrObjectHasReplicationTask {
		t.Fatalf("second task: %v", err)
	}
	if err := c.TaskDone("x", plan.ID, wire.OK); err != nil {
		t.Fatal(err)
	}
	if r := c.Remove([]string{"k"}, false); r[0] != wire.OK {
		t.Fatalf("remove after the task: %v", r[0])
	}
}

// A reader that never reports (its client died) must not make the object
// busy forever: past its lease it no longer counts, and a rewrite starts
// the count afresh.
func TestLapsedReadersDoNotLeak(t *testing.T) {
	c, clk := newTestCore(t)
	mount(t, c, "a", "seg", 1<<20)
	put(t, c, "k", 100, wire.ReplicaConfig{})
	c.GetReplicas([]string{"k"}, true) // never ReadDone
	clk.Advance(2 * time.Second)
	b := upsert(t, c, "w", "k", 100, wire.ReplicaConfig{})
	if b.Code != wire.OK {
		t.Fatalf("upsert after the reader's lease: %v", b.Code)
	}
	c.PutEnd("w", []string{"k"}, []uint64{b.Epoch})
	g := c.GetReplicas([]string{"k"}, true)
	c.ReadDone([]string{"k"}, []uint64{g[0].Epoch})
	if r := upsert(t, c, "w", "k", 100, wire.ReplicaConfig{}); r.Code != wire.OK {
		t.Fatalf("upsert after every live read ended: %v", r.Code)
	}
}
