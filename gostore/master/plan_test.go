package master

import (
	"fmt"
	"testing"

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
