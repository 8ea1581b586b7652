package master

import (
	"fmt"
	"testing"
	"time"

	"github.com/gostore/gostore/gostore/wire"
)

func TestPlanRanksInJoinOrder(t *testing.T) {
	c, _ := newTestCore(t)
	for _, n := range []string{"a", "b", "c"} {
		mount(t, c, n, "seg-"+n, 1<<20)
	}
	for want, n := range []string{"b", "a", "c"} {
		if r, err := c.PlanJoin(n, "seg-"+n); err != nil || r != want {
			t.Fatalf("join %s: rank %d, %v; want %d", n, r, err, want)
		}
	}
	if r, _ := c.PlanJoin("a", "seg-a"); r != 1 {
		t.Fatalf("a joined again: rank %d, want its own 1", r)
	}
	if _, err := c.PlanJoin("a", "seg-b"); wire.CodeOf(err) != wire.ErrSegmentNotFound {
		t.Fatalf("joining another client's segment: %v", err)
	}
	if _, err := c.PlanJoin("a", "nope"); wire.CodeOf(err) != wire.ErrSegmentNotFound {
		t.Fatalf("joining an unknown segment: %v", err)
	}
	c.UnmountSegment("a", "seg-a")
	m := c.PlanMembers()
	if len(m) != 2 || m[0].Rank != 0 || m[0].Seg.Name != "seg-b" || m[1].Rank != 2 || m[1].Seg.Name != "seg-c" {
		t.Fatalf("members after a left: %+v", m)
	}
	mount(t, c, "d", "seg-d", 1<<20)
	if r, _ := c.PlanJoin("d", "seg-d"); r != 3 {
		t.Fatalf("a newcomer got rank %d: ranks are never reused", r)
	}
}

func TestEvictUntilGetsBelowTheTarget(t *testing.T) {
	c, clk := newTestCore(t)
	mount(t, c, "a", "seg", 1<<20)
	for i := range 200 {
		put(t, c, fmt.Sprint("k", i), 4000, wire.ReplicaConfig{})
		clk.Advance(1)
	}
	before := c.usage()
	res, usage := c.EvictUntil(0.3)
	if usage >= 0.3 || res.Objects == 0 || before < 0.7 {
		t.Fatalf("usage %.2f → %.2f after evicting %d", before, usage, res.Objects)
	}
	if _, ok := c.QueryKey("k199"); !ok {
		t.Fatal("the newest object went before older ones")
	}
	if res, _ := c.EvictUntil(0.9); res.Objects != 0 {
		t.Fatalf("evicted %d below the target already", res.Objects)
	}
}

// A write whose writer is alive but never finishes (a plan never
// committed) is reclaimed after PutStartDiscardTimeout: the key frees up
// and its ranges wait out the quarantine.
func TestAbandonedWritesAreReclaimed(t *testing.T) {
	c, clk := newTestCore(t)
	c.cfg.PutStartDiscardTimeout = 30 * time.Second
	mount(t, c, "a", "seg", 1<<20)
	res, _ := c.PutStart("w", "", []string{"stuck"}, []uint64{1000}, wire.ReplicaConfig{})
	put(t, c, "done", 1000, wire.ReplicaConfig{})
	clk.Advance(20 * time.Second)
	c.PutStart("w", "", []string{"young"}, []uint64{1000}, wire.ReplicaConfig{})
	clk.Advance(11 * time.Second)
	used := c.Segments()[0].Used
	for range NumShards / reclaimShardsPerTick {
		c.Ping("a")
		c.Ping("w")
		c.Tick()
	}
	if _, ok := c.QueryKey("stuck"); ok {
		t.Fatal("a write stuck for 31 s was not reclaimed")
	}
	if _, ok := c.QueryKey("young"); !ok {
		t.Fatal("a write 11 s old was reclaimed")
	}
	if _, ok := c.QueryKey("done"); !ok {
		t.Fatal("a finished object was reclaimed")
	}
	if c.Segments()[0].Used != used || c.Stats().PutsReclaimed.Load() != 1 {
		t.Fatal("reclaimed ranges must wait out the quarantine, not be freed at once")
	}
	if codes := c.PutEnd("w", []string{"stuck"}, []uint64{res[0].Epoch}); codes[0] != wire.ErrObjectNotFound {
		t.Fatalf("the stuck writer's late PutEnd: %v", codes[0])
	}
}
