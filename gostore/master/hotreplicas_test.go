package master

import (
	"fmt"
	"testing"
	"time"

	"github.com/gostore/gostore/gostore/wire"
)

// hotCore is a core with dynamic replication in mode, a 10 s window and
// qps 0.5 (5 reads make an object hot), and two 1 MiB segments: "seg-a"
// of client a and "seg-b" of client b.
func hotCore(t *testing.T, mode string, maxReplicas int) (*Core, *fakeClock) {
	t.Helper()
	c, clk := newTestCore(t)
	c.cfg.DynamicReplicationMode, c.cfg.DynamicReplicationQPSThreshold = mode, 0.5
	c.cfg.DynamicReplicationMaxMemoryReplicas = maxReplicas
	c.hot.init(&c.cfg) // New does it from the config it is given
	mount(t, c, "a", "seg-a", 1<<20)
	mount(t, c, "b", "seg-b", 1<<20)
	return c, clk
}

// doneHotTasks reports every hot-replica task the master gave client as
// done: the copies it asked for now exist.
func doneHotTasks(t *testing.T, c *Core, client string) {
	t.Helper()
	for _, at := range c.TakeAssignedTasks(client) {
		if err := c.TaskDone(client, at.Plan.ID, wire.OK); err != nil {
			t.Fatal(err)
		}
	}
}

// putOn writes key (size bytes) on the named segment.
func putOn(t *testing.T, c *Core, key string, size uint64, seg string) {
	t.Helper()
	if r := put(t, c, key, size, wire.ReplicaConfig{Preferred: []string{seg}}); r.Code != wire.OK {
		t.Fatalf("put %s: %v", key, r.Code)
	}
}

type hotCounts struct{ hot, queued, started, added, failed, dropped, skipped int64 }

func hotNow(c *Core) hotCounts {
	s := c.HotReplicaStats()
	return hotCounts{s.Hot.Load(), s.Queued.Load(), s.Started.Load(), s.Added.Load(), s.Failed.Load(), s.Dropped.Load(),
		s.Skipped.Load()}
}

func TestHeatThreshold(t *testing.T) {
	for _, tc := range []struct {
		name   string
		qps    float64
		window time.Duration
		want   uint32
	}{
		{"Mooncake's defaults", 0.8, 10 * time.Second, 8},
		{"rounded up", 0.25, 10 * time.Second, 3},
		{"at least one read", 0.01, time.Second, 1},
	} {
		var h hotReplicas
		cfg := Config{DynamicReplication: DynamicReplication{DynamicReplicationMode: DynamicReplicationObserve,
			DynamicReplicationQPSThreshold: tc.qps, DynamicReplicationHeatWindow: tc.window}}
		h.init(&cfg)
		if h.minHits != tc.want {
			t.Errorf("%s: %d reads, want %d", tc.name, h.minHits, tc.want)
		}
	}
}

func TestHeatWindows(t *testing.T) {
	for _, tc := range []struct {
		name  string
		mode  string
		reads []int // reads per step; the clock moves 6 s between steps
		want  hotCounts
	}{
		{"off counts nothing", DynamicReplicationOff, []int{50}, hotCounts{}},
		{"observe: hot once a window", DynamicReplicationObserve, []int{50}, hotCounts{hot: 1}},
		{"below the threshold", DynamicReplicationObserve, []int{4}, hotCounts{}},
		{"reads of an old window do not count", DynamicReplicationObserve, []int{3, 0, 3}, hotCounts{}},
		{"the same window across steps", DynamicReplicationObserve, []int{3, 2}, hotCounts{hot: 1}},
		{"hot again in a new window", DynamicReplicationObserve, []int{5, 0, 5}, hotCounts{hot: 2}},
		{"enforce queues it", DynamicReplicationEnforce, []int{5}, hotCounts{hot: 1, queued: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, clk := hotCore(t, tc.mode, 2)
			putOn(t, c, "k", 100, "seg-a")
			for i, n := range tc.reads {
				if i > 0 {
					clk.Advance(6 * time.Second)
				}
				readN(c, n, "k")
			}
			if got := hotNow(c); got != tc.want {
				t.Fatalf("%+v, want %+v", got, tc.want)
			}
			if tc.mode == DynamicReplicationOff && c.shardOf("k").heat != nil {
				t.Fatal("off mode keeps heat windows")
			}
		})
	}
}

// TestHeatEntriesBounded: a shard keeps at most heatEntriesPerShard
// windows; stale ones make room.
func TestHeatEntriesBounded(t *testing.T) {
	c, clk := hotCore(t, DynamicReplicationObserve, 2)
	sh := &c.shards[0]
	objs := make([]*object, 3*heatEntriesPerShard)
	for i := range objs {
		objs[i] = &object{size: 1}
	}
	for _, o := range objs[:2*heatEntriesPerShard] {
		c.observeHeat(sh, "k", o, c.now())
	}
	if len(sh.heat) != heatEntriesPerShard {
		t.Fatalf("%d windows, want %d", len(sh.heat), heatEntriesPerShard)
	}
	clk.Advance(21 * time.Second)
	fresh := &object{size: 1}
	c.observeHeat(sh, "k", fresh, c.now())
	if _, ok := sh.heat[fresh]; !ok || len(sh.heat) != 1 {
		t.Fatalf("stale windows not dropped: %d left", len(sh.heat))
	}
	// Full of fresh windows: a new object is not counted, and the map is
	// looked through again only after heatPruneInterval.
	for _, o := range objs[2*heatEntriesPerShard:] {
		c.observeHeat(sh, "k", o, c.now())
	}
	clk.Advance(21 * time.Second)
	x, y := &object{size: 1}, &object{size: 1}
	c.observeHeat(sh, "k", x, c.now())
	c.observeHeat(sh, "k", y, c.now())
	if _, ok := sh.heat[y]; !ok {
		t.Fatal("stale windows not dropped after the interval")
	}
}

func TestHotReplicaAddedOnAnotherSegment(t *testing.T) {
	c, clk := hotCore(t, DynamicReplicationEnforce, 2)
	putOn(t, c, "k", 100, "seg-a")
	readN(c, 5, "k")
	c.Tick()
	if got := c.TakeAssignedTasks("a"); len(got) != 0 {
		t.Fatalf("the replica's source got the task: %+v", got)
	}
	tasks := c.TakeAssignedTasks("b")
	if len(tasks) != 1 || tasks[0].Key != "k" || len(tasks[0].Plan.Sources) != 1 || len(tasks[0].Plan.Targets) != 1 {
		t.Fatalf("tasks = %+v", tasks)
	}
	segA, segB := c.segs.byName["seg-a"].desc.ID, c.segs.byName["seg-b"].desc.ID
	if p := tasks[0].Plan; p.Sources[0].SegID != segA || p.Targets[0].SegID != segB {
		t.Fatalf("plan = %+v, want from seg-a to seg-b", p)
	}
	if c.TakeAssignedTasks("b") != nil {
		t.Fatal("a task handed out twice")
	}
	if err := c.TaskDone("b", tasks[0].Plan.ID, wire.OK); err != nil {
		t.Fatal(err)
	}
	if got := hotNow(c); got != (hotCounts{hot: 1, queued: 1, started: 1, added: 1}) || c.HotReplicasLive() != 1 {
		t.Fatalf("%+v, live %d", got, c.HotReplicasLive())
	}
	// Reads see both replicas, the first alternating between them.
	firsts := map[uint64]int{}
	for range 10 {
		g := c.GetReplicas([]string{"k"}, false)[0]
		if len(g.Replicas) != 2 {
			t.Fatalf("get = %+v", g)
		}
		firsts[g.Replicas[0].SegID]++
	}
	if firsts[segA] != 5 || firsts[segB] != 5 {
		t.Fatalf("first replica per segment over 10 reads: %v, want 5 and 5", firsts)
	}
	// At the cap: hot again in a later window, nothing more is queued.
	clk.Advance(11 * time.Second)
	c.Ping("a")
	c.Ping("b")
	readN(c, 5, "k")
	if got := hotNow(c); got.hot != 2 || got.queued != 1 {
		t.Fatalf("hot %d, queued %d at the replica cap; want hot again, not queued", got.hot, got.queued)
	}
}

func TestHotReplicaCapAndFailure(t *testing.T) {
	c, _ := hotCore(t, DynamicReplicationEnforce, 1)
	putOn(t, c, "one", 100, "seg-a")
	readN(c, 5, "one")
	if got := hotNow(c); got != (hotCounts{hot: 1}) {
		t.Fatalf("max 1 replica: %+v", got)
	}
	c, _ = hotCore(t, DynamicReplicationEnforce, 2)
	putOn(t, c, "k", 100, "seg-a")
	readN(c, 5, "k")
	used := c.Totals().Used
	c.Tick()
	tasks := c.TakeAssignedTasks("b")
	if len(tasks) != 1 {
		t.Fatalf("tasks = %+v", tasks)
	}
	if err := c.TaskDone("b", tasks[0].Plan.ID, wire.ErrTransferFail); err != nil {
		t.Fatal(err)
	}
	if got := hotNow(c); got.failed != 1 || got.added != 0 || c.Totals().Used != used {
		t.Fatalf("%+v, used %d", got, c.Totals().Used)
	}
}

// TestHotReplicasGoFirstUnderPressure: above the high watermark the extra
// replicas are dropped before any object is evicted; one a reader holds
// waits for its lease.
func TestHotReplicasGoFirstUnderPressure(t *testing.T) {
	c, clk := hotCore(t, DynamicReplicationEnforce, 2)
	putOn(t, c, "hot", 200<<10, "seg-a")
	readN(c, 5, "hot")
	c.Tick()
	tasks := c.TakeAssignedTasks("b")
	if len(tasks) != 1 {
		t.Fatalf("tasks = %+v", tasks)
	}
	if err := c.TaskDone("b", tasks[0].Plan.ID, wire.OK); err != nil {
		t.Fatal(err)
	}
	// 1000 of 1024 KiB used on each segment: above the 90 % watermark;
	// without the extra, 1800 of 2048, below it.
	putOn(t, c, "cold-a", 800<<10, "seg-a")
	putOn(t, c, "cold-b", 800<<10, "seg-b")
	if u := c.usage(); u <= c.cfg.HighWatermark {
		t.Fatalf("usage %.2f, want above the watermark", u)
	}
	// "hot" is being read (its lease runs): its extra stays.
	if n := c.dropHotReplicas(c.now(), 1<<20); n != 0 || c.HotReplicasLive() != 1 {
		t.Fatalf("dropped %d bytes under a reader's lease", n)
	}
	clk.Advance(2 * time.Second) // past the reads' lease
	c.Ping("a")
	c.Ping("b")
	c.Tick()
	if got := hotNow(c).dropped; got != 1 || c.HotReplicasLive() != 0 {
		t.Fatalf("dropped %d, live %d", got, c.HotReplicasLive())
	}
	if n := c.Stats().EvictionPasses.Load(); n != 0 {
		t.Fatalf("%d eviction passes although dropping the extra made room", n)
	}
	for _, k := range []string{"hot", "cold-a", "cold-b"} {
		if g := c.GetReplicas([]string{k}, false)[0]; g.Code != wire.OK || len(g.Replicas) != 1 {
			t.Fatalf("%s after the drop = %+v", k, g)
		}
	}
}

// TestHotDiskOnlyObjectNotQueued: an object served by its disk copy alone
// has no memory replica to copy from (promotion brings it back instead).
func TestHotDiskOnlyObjectNotQueued(t *testing.T) {
	c, _ := hotCore(t, DynamicReplicationEnforce, 2)
	c.cfg.EnableOffload = true
	c.RecoverDisk("a", "ep-a", "dir-a", []string{"cold"}, []uint64{100})
	readN(c, 5, "cold")
	if got := hotNow(c); got != (hotCounts{hot: 1}) {
		t.Fatalf("%+v", got)
	}
}

// TestHotReplicaDropIsBounded: a shortage takes the extras it needs, not
// all of them.
func TestHotReplicaDropIsBounded(t *testing.T) {
	c, clk := hotCore(t, DynamicReplicationEnforce, 2)
	for _, k := range []string{"h1", "h2"} {
		putOn(t, c, k, 100<<10, "seg-a")
		readN(c, 5, k)
	}
	c.Tick()
	doneHotTasks(t, c, "b")
	if n := c.HotReplicasLive(); n != 2 {
		t.Fatalf("%d extras, want 2", n)
	}
	clk.Advance(2 * time.Second) // past the reads' lease
	if n := c.dropHotReplicas(c.now(), 1); n != 100<<10 || c.HotReplicasLive() != 1 {
		t.Fatalf("freed %d bytes, %d extras left; want one extra's bytes and one left", n, c.HotReplicasLive())
	}
}

// TestHotDropForAWaitingPutIsThePass: a put waiting for room asks for one
// pass; when dropping extras frees a pass's worth, no object is evicted
// on top of it.
func TestHotDropForAWaitingPutIsThePass(t *testing.T) {
	c, clk := hotCore(t, DynamicReplicationEnforce, 2)
	putOn(t, c, "h1", 200<<10, "seg-a")
	putOn(t, c, "cold", 200<<10, "seg-a")
	readN(c, 5, "h1")
	c.Tick()
	doneHotTasks(t, c, "b")
	if n := c.HotReplicasLive(); n != 1 {
		t.Fatalf("%d extras, want 1", n)
	}
	clk.Advance(2 * time.Second) // past the reads' lease
	c.Ping("a")
	c.Ping("b")
	c.evictSoon.Store(true) // a put found no room
	c.Tick()
	if got := hotNow(c).dropped; got != 1 {
		t.Fatalf("dropped %d extras, want 1", got)
	}
	if n := c.Stats().EvictionPasses.Load(); n != 0 {
		t.Fatalf("%d eviction passes after the drop freed a pass's worth", n)
	}
	for _, k := range []string{"h1", "cold"} {
		if g := c.GetReplicas([]string{k}, false)[0]; g.Code != wire.OK {
			t.Fatalf("%s after the drop = %+v", k, g)
		}
	}
}

// TestHotReplicaDropKeepsRangesInUse: a shortage takes an extra only when
// eviction could take the object but for its last copy: not while a lease
// runs (readers or not), a write rewrites it in place, or the SSD tier has
// yet to persist the object.
func TestHotReplicaDropKeepsRangesInUse(t *testing.T) {
	for _, tc := range []struct {
		name    string
		offload bool // seg-a has an SSD tier, which persists "hot"
		then    func(t *testing.T, c *Core)
		freed   uint64
	}{
		{"idle: dropped", false, func(*testing.T, *Core) {}, 100},
		{"leased by a lookup that counts no reader", false, func(t *testing.T, c *Core) {
			if g := c.GetReplicas([]string{"hot"}, false)[0]; g.Code != wire.OK || len(g.Replicas) != 2 {
				t.Fatalf("lookup = %+v", g)
			}
		}, 0},
		{"rewritten in place by an upsert", false, func(t *testing.T, c *Core) {
			res, err := c.UpsertStart("w", "", []string{"hot"}, []uint64{100}, wire.ReplicaConfig{})
			if err != nil || res[0].Code != wire.OK || len(res[0].Replicas) != 2 {
				t.Fatalf("upsert = %+v %v", res, err)
			}
		}, 0},
		{"not yet on the SSD tier", true, func(*testing.T, *Core) {}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, clk := newTestCore(t)
			c.cfg.EnableOffload = tc.offload
			c.cfg.DynamicReplicationMode, c.cfg.DynamicReplicationQPSThreshold = DynamicReplicationEnforce, 0.5
			c.cfg.DynamicReplicationMaxMemoryReplicas = 2
			c.hot.init(&c.cfg)
			if _, err := c.MountSegment(wire.SegmentDesc{Name: "seg-a", ClientID: "a", Size: 1 << 20, ShmPath: "/x/a", Offload: tc.offload}, nil); err != nil {
				t.Fatal(err)
			}
			mount(t, c, "b", "seg-b", 1<<20)
			putOn(t, c, "hot", 100, "seg-a")
			readN(c, 5, "hot")
			c.Tick()
			tasks := c.TakeAssignedTasks("b")
			if len(tasks) != 1 {
				t.Fatalf("tasks = %+v", tasks)
			}
			if err := c.TaskDone("b", tasks[0].Plan.ID, wire.OK); err != nil {
				t.Fatal(err)
			}
			clk.Advance(2 * time.Second) // past the reads' lease
			used := c.Totals().Used
			tc.then(t, c)
			if n := c.dropHotReplicas(c.now(), 1<<20); n != tc.freed {
				t.Fatalf("freed %d bytes, want %d", n, tc.freed)
			}
			if tc.freed == 0 && (c.HotReplicasLive() != 1 || c.Totals().Used != used) {
				t.Fatalf("live %d, used %d (was %d): the extra's range went", c.HotReplicasLive(), c.Totals().Used, used)
			}
		})
	}
}

// hotExtra makes key (on seg-a) hot and runs its replica task on seg-b.
func hotExtra(t *testing.T, c *Core, clk *fakeClock, key string) {
	t.Helper()
	putOn(t, c, key, 100, "seg-a")
	readN(c, 5, key)
	c.Tick()
	tasks := c.TakeAssignedTasks("b")
	if len(tasks) != 1 {
		t.Fatalf("%s: tasks = %+v, stats %+v", key, tasks, hotNow(c))
	}
	if err := c.TaskDone("b", tasks[0].Plan.ID, wire.OK); err != nil {
		t.Fatal(err)
	}
	clk.Advance(2 * time.Second) // past the reads' lease
	c.Ping("a")
	c.Ping("b")
}

// TestHotReplicaExtrasForgotten: an extra that goes with its object
// (removed, rewritten) or its segment is no longer counted nor kept.
func TestHotReplicaExtrasForgotten(t *testing.T) {
	for _, tc := range []struct {
		name string
		gone func(t *testing.T, c *Core, key string)
	}{
		{"removed", func(t *testing.T, c *Core, key string) {
			if codes := c.Remove([]string{key}, false); codes[0] != wire.OK {
				t.Fatalf("remove: %v", codes[0])
			}
		}},
		{"rewritten with another size", func(t *testing.T, c *Core, key string) {
			res, err := c.UpsertStart("w", "", []string{key}, []uint64{200}, wire.ReplicaConfig{Preferred: []string{"seg-a"}})
			if err != nil || res[0].Code != wire.OK {
				t.Fatalf("upsert = %+v %v", res, err)
			}
			if codes := c.PutEnd("w", []string{key}, nil); codes[0] != wire.OK {
				t.Fatalf("PutEnd: %v", codes[0])
			}
		}},
		{"its segment unmounted", func(t *testing.T, c *Core, key string) {
			if err := c.UnmountSegment("b", "seg-b"); err != nil {
				t.Fatal(err)
			}
			mount(t, c, "b", "seg-b", 1<<20)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, clk := hotCore(t, DynamicReplicationEnforce, 2)
			for i := range 20 {
				key := fmt.Sprintf("k%d", i)
				hotExtra(t, c, clk, key)
				if n := c.HotReplicasLive(); n != 1 {
					t.Fatalf("cycle %d: %d extras, want 1", i, n)
				}
				tc.gone(t, c, key)
				if n := c.HotReplicasLive(); n != 0 {
					t.Fatalf("cycle %d: %d extras counted after the extra went", i, n)
				}
			}
			c.hot.mu.Lock()
			defer c.hot.mu.Unlock()
			if len(c.hot.extras) != 0 {
				t.Fatalf("%d keys kept in the extras list", len(c.hot.extras))
			}
		})
	}
}

// TestMasterTaskExpiresWithItsGrant: a hot-replica task never reported
// ends when its write grant does (not PutStartReleaseTimeout later), so
// the object can be removed again; its target range is quarantined, not
// handed to the next put while a late executor may still write into it.
func TestMasterTaskExpiresWithItsGrant(t *testing.T) {
	c, clk := hotCore(t, DynamicReplicationEnforce, 2)
	putOn(t, c, "k", 100, "seg-a")
	readN(c, 5, "k")
	c.Tick()
	if tasks := c.TakeAssignedTasks("b"); len(tasks) != 1 {
		t.Fatalf("tasks = %+v", tasks)
	}
	used := c.Totals().Used // the replica's range and the target's, the same size
	expiry := c.taskGrantExpiry(c.now())
	for c.now() <= expiry {
		clk.Advance(5 * time.Second)
		c.Ping("a")
		c.Ping("b")
		c.Tick()
	}
	if got := hotNow(c).failed; got != 1 {
		t.Fatalf("%d hot tasks failed %v after the grant's end", got, time.Duration(c.now()-expiry+int64(time.Second)))
	}
	if codes := c.Remove([]string{"k"}, false); codes[0] != wire.OK {
		t.Fatalf("remove after the task's end: %v", codes[0])
	}
	if u := c.Totals().Used; u != used/2 {
		t.Fatalf("used %d, want %d: the task's target left the quarantine early", u, used/2)
	}
	clk.Advance(c.cfg.PutStartReleaseTimeout)
	c.Ping("a")
	c.Ping("b")
	c.Tick()
	if u := c.Totals().Used; u != 0 {
		t.Fatalf("used %d after the quarantine, want 0", u)
	}
}

// TestHotTasksPerClientBounded: one client runs at most hotTasksPerClient
// hot-replica tasks at once; the next start once those end.
func TestHotTasksPerClientBounded(t *testing.T) {
	c, clk := hotCore(t, DynamicReplicationEnforce, 2)
	for i := range 2 * hotTasksPerClient {
		key := fmt.Sprintf("k%d", i)
		putOn(t, c, key, 100, "seg-a")
		readN(c, 5, key)
	}
	c.Tick()
	tasks := c.TakeAssignedTasks("b")
	if len(tasks) != hotTasksPerClient {
		t.Fatalf("%d tasks for one client at once, want %d", len(tasks), hotTasksPerClient)
	}
	for _, at := range tasks {
		if err := c.TaskDone("b", at.Plan.ID, wire.OK); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(11 * time.Second) // a new heat window
	c.Ping("a")
	c.Ping("b")
	for i := range 2 * hotTasksPerClient {
		readN(c, 5, fmt.Sprintf("k%d", i)) // hot again (those with an extra are at the cap)
	}
	c.Tick()
	if got := len(c.TakeAssignedTasks("b")); got != hotTasksPerClient {
		t.Fatalf("%d tasks once the first ended, want %d", got, hotTasksPerClient)
	}
}

// TestObserveKeepsReplicaOrder: observe mode counts and changes nothing,
// the order reads see replicas in included.
func TestObserveKeepsReplicaOrder(t *testing.T) {
	c, _ := hotCore(t, DynamicReplicationObserve, 2)
	if r := put(t, c, "k", 100, wire.ReplicaConfig{ReplicaNum: 2}); r.Code != wire.OK {
		t.Fatalf("put: %v", r.Code)
	}
	firsts := map[uint64]int{}
	for range 10 {
		g := c.GetReplicas([]string{"k"}, false)[0]
		if len(g.Replicas) != 2 {
			t.Fatalf("get = %+v", g)
		}
		firsts[g.Replicas[0].SegID]++
	}
	if len(firsts) != 1 {
		t.Fatalf("first replica per segment over 10 reads: %v, want one segment always first", firsts)
	}
}

// TestHeatWindowGoesWithItsObject: removing or rewriting an object drops
// its heat window at once (not when the shard is full and pruned).
func TestHeatWindowGoesWithItsObject(t *testing.T) {
	c, clk := hotCore(t, DynamicReplicationObserve, 2)
	putOn(t, c, "gone", 100, "seg-a")
	putOn(t, c, "rewritten", 100, "seg-a")
	readN(c, 1, "gone", "rewritten")
	clk.Advance(2 * time.Second) // past the reads' lease
	if codes := c.Remove([]string{"gone"}, false); codes[0] != wire.OK {
		t.Fatalf("remove: %v", codes[0])
	}
	if res, err := c.UpsertStart("w", "", []string{"rewritten"}, []uint64{200}, wire.ReplicaConfig{}); err != nil || res[0].Code != wire.OK {
		t.Fatalf("upsert = %+v %v", res, err)
	}
	for _, key := range []string{"gone", "rewritten"} {
		sh := c.shardOf(key)
		sh.mu.Lock()
		n := len(sh.heat)
		sh.mu.Unlock()
		if n != 0 {
			t.Errorf("%s: %d heat windows left in its shard", key, n)
		}
	}
}

// TestHotQueueSkippedAtTheWatermark: at or above the high watermark a Tick
// lets the queued hot objects go without a task, and counts them.
func TestHotQueueSkippedAtTheWatermark(t *testing.T) {
	c, _ := hotCore(t, DynamicReplicationEnforce, 2)
	putOn(t, c, "k", 100, "seg-a")
	putOn(t, c, "fill-a", 1000<<10, "seg-a")
	putOn(t, c, "fill-b", 1000<<10, "seg-b")
	readN(c, 5, "k")
	c.Tick()
	if tasks := c.TakeAssignedTasks("b"); len(tasks) != 0 {
		t.Fatalf("tasks above the watermark: %+v", tasks)
	}
	if got := hotNow(c); got != (hotCounts{hot: 1, queued: 1, skipped: 1}) {
		t.Fatalf("%+v", got)
	}
}

// TestRemoveAndUpsertPreemptMasterTasks: a remove or upsert does not wait
// for a task the master started (-708 until it ends): the task ends, its
// target is quarantined, and its executor's late report is refused.
func TestRemoveAndUpsertPreemptMasterTasks(t *testing.T) {
	for _, tc := range []struct {
		name  string
		write func(c *Core) wire.Code
	}{
		{"remove", func(c *Core) wire.Code { return c.Remove([]string{"k"}, false)[0] }},
		{"remove_all", func(c *Core) wire.Code {
			if c.RemoveAll(false) != 1 {
				return wire.ErrObjectHasReplicationTask
			}
			return wire.OK
		}},
		{"remove_by_regex", func(c *Core) wire.Code {
			if n, err := c.RemoveByRegex("^k$", false); err != nil || n != 1 {
				return wire.ErrObjectHasReplicationTask
			}
			return wire.OK
		}},
		{"upsert", func(c *Core) wire.Code {
			res, _ := c.UpsertStart("w", "", []string{"k"}, []uint64{100}, wire.ReplicaConfig{Preferred: []string{"seg-a"}})
			return res[0].Code
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, clk := hotCore(t, DynamicReplicationEnforce, 2)
			putOn(t, c, "k", 100, "seg-a")
			readN(c, 5, "k")
			c.Tick()
			tasks := c.TakeAssignedTasks("b")
			if len(tasks) != 1 {
				t.Fatalf("tasks = %+v", tasks)
			}
			clk.Advance(2 * time.Second) // past the reads' lease
			if code := tc.write(c); code != wire.OK {
				t.Fatalf("%s during the hot task: %v", tc.name, code)
			}
			if got := hotNow(c).failed; got != 1 {
				t.Fatalf("%d hot tasks failed, want the pre-empted one", got)
			}
			if err := c.TaskDone("b", tasks[0].Plan.ID, wire.OK); err == nil {
				t.Fatal("a pre-empted task's report was taken")
			}
			if n := c.HotReplicasLive(); n != 0 {
				t.Fatalf("%d extras", n)
			}
			used := c.Totals().Used // the quarantined target among it
			clk.Advance(c.cfg.PutStartReleaseTimeout + time.Second)
			c.Ping("a")
			c.Ping("b")
			c.Tick()
			if u := c.Totals().Used; u >= used {
				t.Fatalf("used %d after the quarantine, was %d: the target was never freed", u, used)
			}
		})
	}
}
