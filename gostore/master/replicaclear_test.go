// replicaclear_test.go tests ReplicaClear (Mooncake's BatchReplicaClear):
// who may clear what, and what stays.

package master

import (
	"slices"
	"testing"
	"time"

	"github.com/gostore/gostore/gostore/wire"
)

func TestReplicaClear(t *testing.T) {
	c, clk := newTestCore(t)
	mount(t, c, "a", "s1", 1<<20)
	mount(t, c, "b", "s2", 1<<20)
	two := wire.ReplicaConfig{ReplicaNum: 2}
	put(t, c, "both", 4096, two)
	put(t, c, "whole", 4096, two)
	put(t, c, "leased", 4096, wire.ReplicaConfig{})
	put(t, c, "other", 4096, wire.ReplicaConfig{})
	// "other" is another client's; "open" is still being written.
	c.shardOf("other").objects["other"].setWriter("someone-else")
	if res, _ := c.PutStart("w", "", []string{"open"}, []uint64{10}, wire.ReplicaConfig{}); res[0].Code != wire.OK {
		t.Fatal(res[0].Code)
	}
	clk.Advance(2 * time.Second) // past every put's lease
	c.GetReplicas([]string{"leased"}, false)
	free := func(name string) uint64 {
		for _, s := range c.Segments() {
			if s.Name == name {
				return s.Size - s.Used
			}
		}
		t.Fatalf("no segment %s", name)
		return 0
	}
	freeBefore := free("s1")
	// A running lease, another client's object, an unfinished put: skipped.
	if got := c.ReplicaClear("w", []string{"leased", "other", "open"}, ""); len(got) != 0 {
		t.Fatalf("cleared %v", got)
	}

	got := c.ReplicaClear("w", []string{"both", "", "missing", "leased", "other", "open"}, "s1")
	if !slices.Equal(got, []string{"both"}) {
		t.Fatalf("clear on s1 cleared %v, want [both]", got)
	}
	g := c.GetReplicas([]string{"both"}, false)[0]
	if g.Code != wire.OK || len(g.Replicas) != 1 {
		t.Fatalf("after clearing its s1 replica: %+v", g)
	}
	if free("s1") != freeBefore+4096 {
		t.Fatalf("s1 free %d, want %d", free("s1"), freeBefore+4096)
	}
	// No replica of "both" left on s1: skipped; an unknown segment clears nothing.
	if got := c.ReplicaClear("w", []string{"both"}, "s1"); len(got) != 0 {
		t.Fatalf("second clear on s1: %v", got)
	}
	if got := c.ReplicaClear("w", []string{"whole"}, "nope"); len(got) != 0 {
		t.Fatalf("clear on an unknown segment: %v", got)
	}
	// The last replica cleared takes the object; "" takes every replica.
	clk.Advance(2 * time.Second)
	got = c.ReplicaClear("w", []string{"both", "whole", "leased", "other", "open"}, "")
	if !slices.Equal(got, []string{"both", "whole", "leased"}) {
		t.Fatalf("clear of whole objects: %v", got)
	}
	if e := c.Exist([]string{"both", "whole", "leased", "other"}); !slices.Equal(e, []wire.Code{
		wire.ErrObjectNotFound, wire.ErrObjectNotFound, wire.ErrObjectNotFound, wire.OK}) {
		t.Fatalf("exist after clearing: %v", e)
	}
}
