package master

import (
	"strings"
	"testing"

	"github.com/gostore/gostore/gostore/wire"
)

// refusal puts key and expects a refusal for space; it returns the reason
// and the outlook the writer is given.
func refusal(t *testing.T, c *Core, key string, size uint64, cfg wire.ReplicaConfig) (string, wire.SpaceOutlook) {
	t.Helper()
	res := put(t, c, key, size, cfg)
	if res.Code != wire.ErrNoAvailableHandle {
		t.Fatalf("put %s (%d bytes) = %v, want -200", key, size, res.Code)
	}
	if res.NoSpace == nil || res.NoSpace.Why == "" {
		t.Fatalf("put %s: -200 without a reason", key)
	}
	return res.NoSpace.Why, res.NoSpace.Space
}

func TestNoSpaceSaysWhyAndWhetherToWait(t *testing.T) {
	c, _ := newTestCore(t)
	// No segment at all: waiting cannot help.
	why, space := refusal(t, c, "k", 100, wire.ReplicaConfig{})
	if space != wire.SpaceNone || !strings.Contains(why, "no segment") {
		t.Fatalf("empty pool: %q %v", why, space)
	}
	mount(t, c, "a", "seg-a", 4096)
	mount(t, c, "b", "seg-b", 8192)
	// Larger than any segment (though not than the pool).
	why, space = refusal(t, c, "big", 10000, wire.ReplicaConfig{})
	if space != wire.SpaceNone || !strings.Contains(why, "larger than any segment") || !strings.Contains(why, "8192") {
		t.Fatalf("too large: %q %v", why, space)
	}
	// Fill the pool with hard-pinned objects: before any pass has looked,
	// the writer may wait for one; after it found nothing, it may not.
	for i, k := range []string{"p1", "p2", "p3"} {
		if r := put(t, c, k, 4096, wire.ReplicaConfig{HardPin: true}); r.Code != wire.OK {
			t.Fatalf("put %d: %v", i, r.Code)
		}
	}
	why, space = refusal(t, c, "x", 1024, wire.ReplicaConfig{})
	if space != wire.SpaceUnknown || !strings.Contains(why, "pool is full") || !strings.Contains(why, "12288 of 12288") {
		t.Fatalf("full before a pass: %q %v", why, space)
	}
	c.Tick() // the pass the refusal asked for
	if _, space = refusal(t, c, "x", 1024, wire.ReplicaConfig{}); space != wire.SpaceUnknown {
		t.Fatalf("pinned pool after a pass: %v, want SpaceUnknown (retry at most once)", space)
	}
	// Unpinned objects: the pass finds them, and the writer is told room
	// is coming; the pass after that frees it.
	c.Remove([]string{"p1", "p2", "p3"}, true)
	for _, k := range []string{"u1", "u2", "u3"} {
		put(t, c, k, 4096, wire.ReplicaConfig{})
	}
	if _, space = refusal(t, c, "y", 4096, wire.ReplicaConfig{}); space != wire.SpaceUnknown {
		t.Fatalf("before a pass found the unpinned objects: %v", space)
	}
	// A pass with a tiny share: it finds them but frees too little.
	c.cfg.EvictionRatio, c.cfg.HighWatermark = 0.01, 1
	c.Tick()
	used := c.Totals().Used
	if _, space = refusal(t, c, "y", 8192, wire.ReplicaConfig{}); space != wire.SpaceComing {
		t.Fatalf("after a pass that found evictable objects: %v, want SpaceComing", space)
	}
	if used == 12288 {
		t.Fatal("the pass evicted nothing")
	}
	c.cfg.EvictionRatio = 1
	c.Tick()
	if r := put(t, c, "y", 8192, wire.ReplicaConfig{}); r.Code != wire.OK {
		t.Fatalf("put after the pass = %v", r.Code)
	}
}

func TestNoSpaceWaitsForDiskCopies(t *testing.T) {
	c, _ := offloadCore(t, false)
	for _, k := range []string{"k1", "k2"} {
		put(t, c, k, 512<<10, wire.ReplicaConfig{})
	}
	refusal(t, c, "k3", 512<<10, wire.ReplicaConfig{})
	c.Tick() // asks for the offloads, evicts nothing
	why, space := refusal(t, c, "k3", 512<<10, wire.ReplicaConfig{})
	if space != wire.SpaceComing || !strings.Contains(why, "disk copy") {
		t.Fatalf("objects waiting for their disk copies: %q %v, want SpaceComing", why, space)
	}
	notify(c, "a", 512<<10, "k1", "k2")
	c.Tick()
	if r := put(t, c, "k3", 512<<10, wire.ReplicaConfig{}); r.Code != wire.OK {
		t.Fatalf("put once the copies exist = %v", r.Code)
	}
}

func TestLeavingClientIsNotExpired(t *testing.T) {
	c, clk := newTestCore(t)
	c.Ping("a")
	c.Ping("reader") // a pure consumer: no segment
	mount(t, c, "a", "seg-a", 1<<20)
	put(t, c, "k", 100, wire.ReplicaConfig{}) // written by client "w", which stays
	if n := c.Clients(); n != 3 {
		t.Fatalf("clients = %d, want 3", n)
	}
	if !c.ClientLeave("a") || !c.ClientLeave("reader") {
		t.Fatal("a known client's leave was not recognised")
	}
	if c.ClientLeave("a") {
		t.Fatal("a second leave counted again")
	}
	// An RPC of the leaving client that was still on the way.
	c.Ping("a")
	c.PutEnd("reader", nil, nil)
	if len(c.Segments()) != 0 || c.Clients() != 1 {
		t.Fatalf("after leave: %d segments, %d clients", len(c.Segments()), c.Clients())
	}
	if _, ok := c.QueryKey("k"); ok {
		t.Fatal("an object living only on the leaving client's segment survived")
	}
	clk.Advance(2 * c.cfg.ClientTTL)
	if exp := c.Tick(); len(exp) != 1 || exp[0] != "w" {
		t.Fatalf("expired %v, want only the silent writer w", exp)
	}
	if l, e := c.Stats().ClientsLeft.Load(), c.Stats().ClientsExpired.Load(); l != 2 || e != 1 {
		t.Fatalf("left %d expired %d, want 2 and 1", l, e)
	}
}

// A tier holder that closes keeps its disk copies known for a ClientTTL,
// as a silent one would, so a restart on its directory claims them back;
// then they are forgotten, and the client is never counted as expired.
func TestLeavingTierKeepsItsDiskCopiesForATTL(t *testing.T) {
	c, clk := offloadCore(t, false)
	c.Ping("a")
	put(t, c, "k", 100, wire.ReplicaConfig{})
	notify(c, "a", 100, "k")
	c.ClientLeave("a")
	g := c.GetReplicas([]string{"k"}, false)
	if g[0].Code != wire.OK || len(g[0].Replicas) != 0 || g[0].Disk != "ep-a" {
		t.Fatalf("after leave: %+v, want a disk-only object", g[0])
	}
	clk.Advance(c.cfg.ClientTTL / 2)
	c.Tick()
	if _, ok := c.QueryKey("k"); !ok {
		t.Fatal("the disk copy was forgotten before a ClientTTL passed")
	}
	clk.Advance(c.cfg.ClientTTL)
	c.Tick()
	if _, ok := c.QueryKey("k"); ok {
		t.Fatal("the disk copy of a client that left a ClientTTL ago is still known")
	}
	if e := c.Stats().ClientsExpired.Load(); e != 1 { // "w", the writer, went silent
		t.Fatalf("expired %d, want only the silent writer", e)
	}
}
