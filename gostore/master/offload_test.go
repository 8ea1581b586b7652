package master

import (
	"slices"
	"testing"
	"time"

	"github.com/gostore/gostore/gostore/wire"
)

func offloadCore(t *testing.T, onEvict bool) (*Core, *fakeClock) {
	c, clk := newTestCore(t)
	c.cfg.EnableOffload, c.cfg.OffloadOnEvict = true, onEvict
	mount(t, c, "a", "seg", 1<<20)
	return c, clk
}

func TestOffloadHeartbeatHandsOutCompletedObjects(t *testing.T) {
	c, _ := offloadCore(t, false)
	put(t, c, "k1", 100, wire.ReplicaConfig{})
	put(t, c, "k2", 200, wire.ReplicaConfig{})
	c.PutStart("w", "", []string{"writing"}, []uint64{10}, wire.ReplicaConfig{})
	keys, sizes := c.OffloadHeartbeat("a", 10)
	if !slices.Equal(keys, []string{"k1", "k2"}) || !slices.Equal(sizes, []uint64{100, 200}) {
		t.Fatalf("heartbeat: %v %v", keys, sizes)
	}
	if keys, _ := c.OffloadHeartbeat("a", 10); len(keys) != 0 {
		t.Fatalf("handed out twice: %v", keys)
	}
	if keys, _ := c.OffloadHeartbeat("other", 10); len(keys) != 0 {
		t.Fatalf("another client got a's objects: %v", keys)
	}
	codes := c.NotifyOffloaded("a", "10.0.0.1:7", []string{"k1", "k2", "nope"}, []uint64{100, 999, 1})
	if !slices.Equal(codes, []wire.Code{wire.OK, wire.ErrInvalidParams, wire.ErrObjectNotFound}) {
		t.Fatalf("notify: %v", codes)
	}
	if g := c.GetReplicas([]string{"k1", "k2"}, false); g[0].Disk != "10.0.0.1:7" || g[1].Disk != "" {
		t.Fatalf("disk endpoints: %q %q", g[0].Disk, g[1].Disk)
	}
}

// With the tier on, eviction frees memory only of objects whose disk copy
// exists, and the object lives on, readable from disk.
func TestEvictionWaitsForTheDiskCopy(t *testing.T) {
	c, _ := offloadCore(t, false)
	c.cfg.EvictionRatio = 1
	for _, k := range []string{"k1", "k2", "k3"} {
		put(t, c, k, 1000, wire.ReplicaConfig{})
	}
	if res := c.Evict(); res.Objects != 0 {
		t.Fatalf("evicted %d objects that have no disk copy", res.Objects)
	}
	c.NotifyOffloaded("a", "ep", []string{"k1"}, []uint64{1000})
	used := c.Segments()[0].Used
	if res := c.Evict(); res.Objects != 1 {
		t.Fatalf("evicted %d, want k1 only", res.Objects)
	}
	if c.Segments()[0].Used != used-1024 {
		t.Fatal("k1's memory not freed")
	}
	g := c.GetReplicas([]string{"k1"}, false)
	if g[0].Code != wire.OK || len(g[0].Replicas) != 0 || g[0].Disk != "ep" || g[0].Size != 1000 {
		t.Fatalf("disk-only object: %+v", g[0])
	}
	if e := c.Exist([]string{"k1"}); e[0] != wire.OK {
		t.Fatal("a disk-only object must exist")
	}
	// Its disk copy evicted too: the object is gone.
	if r := c.EvictDiskReplicas("b", []string{"k1"}); r[0] != wire.ErrReplicaNotFound {
		t.Fatalf("another client's eviction: %v", r[0])
	}
	c.EvictDiskReplicas("a", []string{"k1"})
	if _, ok := c.QueryKey("k1"); ok {
		t.Fatal("object with no replica left survived")
	}
}

func TestOffloadOnEvictAsksForTheVictimsFirst(t *testing.T) {
	c, clk := offloadCore(t, true)
	c.cfg.EvictionRatio = 0.25
	keys := fillAged(t, c, clk, "k", 20, 1000, wire.ReplicaConfig{})
	if got, _ := c.OffloadHeartbeat("a", 100); len(got) != 0 {
		t.Fatalf("offload_on_evict handed out objects before any eviction: %v", got)
	}
	if res := c.Evict(); res.Objects != 0 {
		t.Fatalf("evicted %d without disk copies", res.Objects)
	}
	got, _ := c.OffloadHeartbeat("a", 100)
	slices.Sort(got)
	if !slices.Equal(got, keys[:5]) {
		t.Fatalf("asked to offload %v, want the 5 oldest %v", got, keys[:5])
	}
	sizes := make([]uint64, len(got))
	for i := range sizes {
		sizes[i] = 1000
	}
	c.NotifyOffloaded("a", "ep", got, sizes)
	if res := c.Evict(); res.Objects != 5 {
		t.Fatalf("second pass evicted %d, want the 5 offloaded", res.Objects)
	}
}

func TestRewriteDropsTheStaleDiskCopy(t *testing.T) {
	c, _ := offloadCore(t, false)
	put(t, c, "k", 100, wire.ReplicaConfig{})
	c.NotifyOffloaded("a", "ep", []string{"k"}, []uint64{100})
	b := upsert(t, c, "w", "k", 100, wire.ReplicaConfig{})
	if g := c.GetReplicas([]string{"k"}, false); g[0].Code != wire.ErrReplicaIsNotReady {
		t.Fatalf("read during an in-place rewrite of an offloaded object: %v", g[0].Code)
	}
	c.PutEnd("w", []string{"k"}, []uint64{b.Epoch})
	if g := c.GetReplicas([]string{"k"}, false); g[0].Disk != "" {
		t.Fatal("the old disk copy survived a rewrite")
	}
}

func TestDiskCopiesOfADeadClientAreDropped(t *testing.T) {
	c, clk := offloadCore(t, false)
	c.cfg.EvictionRatio = 1
	mount(t, c, "b", "seg-b", 1<<20)
	put(t, c, "onA", 100, wire.ReplicaConfig{Preferred: []string{"seg"}})
	c.NotifyOffloaded("b", "ep-b", []string{"onA"}, []uint64{100}) // b holds a's object on disk
	c.Evict()                                                      // memory copy goes
	for range 12 {
		clk.Advance(time.Second)
		c.Ping("a")
		c.Ping("w")
		c.Tick()
	}
	if _, ok := c.QueryKey("onA"); ok {
		t.Fatal("an object whose only copy was on a dead client's disk survived")
	}
}

// An object living only on disk has no memory to rewrite in place: an
// upsert of the same size allocates anew.
func TestUpsertOfADiskOnlyObjectAllocates(t *testing.T) {
	c, _ := offloadCore(t, false)
	c.cfg.EvictionRatio = 1
	put(t, c, "k", 100, wire.ReplicaConfig{})
	c.NotifyOffloaded("a", "ep", []string{"k"}, []uint64{100})
	c.Evict()
	r := upsert(t, c, "w", "k", 100, wire.ReplicaConfig{})
	if r.Code != wire.OK || len(r.Replicas) != 1 {
		t.Fatalf("upsert of a disk-only object: %+v", r)
	}
	c.PutEnd("w", []string{"k"}, []uint64{r.Epoch})
	if g := c.GetReplicas([]string{"k"}, false); g[0].Code != wire.OK || len(g[0].Replicas) != 1 || g[0].Disk != "" {
		t.Fatalf("after the upsert: %+v", g[0])
	}
}
