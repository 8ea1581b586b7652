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
	mountTier(t, c, "a", "seg", 1<<20)
	return c, clk
}

// mountTier mounts a segment whose owner runs an SSD tier.
func mountTier(t *testing.T, c *Core, client, name string, size uint64) uint64 {
	t.Helper()
	id, err := c.MountSegment(wire.SegmentDesc{Name: name, ClientID: client, Size: size, ShmPath: "/x/" + name, Offload: true}, nil)
	if err != nil {
		t.Fatalf("mount %s: %v", name, err)
	}
	return id
}

// notify reports disk copies of keys, each of size bytes, held by client in
// directory "dir-"+client, without epochs.
func notify(c *Core, client string, size uint64, keys ...string) []wire.Code {
	sizes := make([]uint64, len(keys))
	for i := range sizes {
		sizes[i] = size
	}
	return c.NotifyOffloaded(client, "ep-"+client, "dir-"+client, keys, sizes, nil)
}

func TestOffloadHeartbeatHandsOutCompletedObjects(t *testing.T) {
	c, _ := offloadCore(t, false)
	put(t, c, "k1", 100, wire.ReplicaConfig{})
	put(t, c, "k2", 200, wire.ReplicaConfig{})
	c.PutStart("w", "", []string{"writing"}, []uint64{10}, wire.ReplicaConfig{})
	if !c.OffloadPending("a") || c.OffloadPending("other") {
		t.Fatal("the ping does not tell a about its pending work")
	}
	keys, sizes, _ := c.OffloadHeartbeat("a", "dir-a", 10)
	if c.OffloadPending("a") {
		t.Fatal("work still pending after the heartbeat took it")
	}
	if !slices.Equal(keys, []string{"k1", "k2"}) || !slices.Equal(sizes, []uint64{100, 200}) {
		t.Fatalf("heartbeat: %v %v", keys, sizes)
	}
	if keys, _, _ := c.OffloadHeartbeat("a", "dir-a", 10); len(keys) != 0 {
		t.Fatalf("handed out twice: %v", keys)
	}
	if keys, _, _ := c.OffloadHeartbeat("other", "dir-other", 10); len(keys) != 0 {
		t.Fatalf("another client got a's objects: %v", keys)
	}
	codes := c.NotifyOffloaded("a", "10.0.0.1:7", "d", []string{"k1", "k2", "nope"}, []uint64{100, 999, 1}, nil)
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
	notify(c, "a", 1000, "k1")
	used := c.Segments()[0].Used
	if res := c.Evict(); res.Objects != 1 {
		t.Fatalf("evicted %d, want k1 only", res.Objects)
	}
	if c.Segments()[0].Used != used-1024 {
		t.Fatal("k1's memory not freed")
	}
	g := c.GetReplicas([]string{"k1"}, false)
	if g[0].Code != wire.OK || len(g[0].Replicas) != 0 || g[0].Disk != "ep-a" || g[0].Size != 1000 {
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
	if got, _, _ := c.OffloadHeartbeat("a", "dir-a", 100); len(got) != 0 {
		t.Fatalf("offload_on_evict handed out objects before any eviction: %v", got)
	}
	if res := c.Evict(); res.Objects != 0 {
		t.Fatalf("evicted %d without disk copies", res.Objects)
	}
	got, _, _ := c.OffloadHeartbeat("a", "dir-a", 100)
	slices.Sort(got)
	if !slices.Equal(got, keys[:5]) {
		t.Fatalf("asked to offload %v, want the 5 oldest %v", got, keys[:5])
	}
	notify(c, "a", 1000, got...)
	if res := c.Evict(); res.Objects != 5 {
		t.Fatalf("second pass evicted %d, want the 5 offloaded", res.Objects)
	}
}

func TestRewriteDropsTheStaleDiskCopy(t *testing.T) {
	c, _ := offloadCore(t, false)
	put(t, c, "k", 100, wire.ReplicaConfig{})
	notify(c, "a", 100, "k")
	c.OffloadHeartbeat("a", "dir-a", 10) // takes k's offload request
	b := upsert(t, c, "w", "k", 100, wire.ReplicaConfig{})
	if g := c.GetReplicas([]string{"k"}, false); g[0].Code != wire.ErrReplicaIsNotReady {
		t.Fatalf("read during an in-place rewrite of an offloaded object: %v", g[0].Code)
	}
	c.PutEnd("w", []string{"k"}, []uint64{b.Epoch})
	if g := c.GetReplicas([]string{"k"}, false); g[0].Disk != "" {
		t.Fatal("the old disk copy survived a rewrite")
	}
	keys, _, drop := c.OffloadHeartbeat("a", "dir-a", 10)
	if !slices.Equal(drop, []string{"k"}) || !slices.Equal(keys, []string{"k"}) {
		t.Fatalf("after a rewrite: offload %v, drop %v; want the new k offloaded and the old copy dropped", keys, drop)
	}
}

// A rewrite that never ends, revoked by its writer or taken over by a new
// put, removes the object: its old disk copy must be dropped too, or a
// restart of its directory would bring the old value back.
func TestAbandonedRewriteDropsTheDiskCopy(t *testing.T) {
	for _, how := range []string{"revoke", "takeover"} {
		t.Run(how, func(t *testing.T) {
			c, clk := offloadCore(t, false)
			put(t, c, "k", 100, wire.ReplicaConfig{})
			notify(c, "a", 100, "k")
			c.OffloadHeartbeat("a", "dir-a", 10) // takes k's offload request
			b := upsert(t, c, "w", "k", 100, wire.ReplicaConfig{})
			if how == "revoke" {
				if r := c.PutRevoke("w", []string{"k"}, []uint64{b.Epoch}); r[0] != wire.OK {
					t.Fatalf("revoke: %v", r[0])
				}
			} else {
				clk.Advance(c.cfg.PutStartDiscardTimeout + time.Second)
				r, err := c.PutStart("w2", "", []string{"k"}, []uint64{50}, wire.ReplicaConfig{})
				if err != nil || r[0].Code != wire.OK {
					t.Fatalf("takeover: %v %v", r, err)
				}
			}
			if _, _, drop := c.OffloadHeartbeat("a", "dir-a", 10); !slices.Equal(drop, []string{"k"}) {
				t.Fatalf("drop %v after the rewrite was abandoned; want the old copy of k", drop)
			}
		})
	}
}

func TestDiskCopiesOfADeadClientAreDropped(t *testing.T) {
	c, clk := offloadCore(t, false)
	c.cfg.EvictionRatio = 1
	mount(t, c, "b", "seg-b", 1<<20)
	put(t, c, "onA", 100, wire.ReplicaConfig{Preferred: []string{"seg"}})
	notify(c, "b", 100, "onA") // b holds a's object on disk
	c.Evict()                  // memory copy goes
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
	notify(c, "a", 100, "k")
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

// Segments whose owner has no SSD tier are evicted as without the tier:
// nothing would ever persist their objects.
func TestObjectsWithoutATierHolderAreEvictedAtOnce(t *testing.T) {
	c, _ := offloadCore(t, false)
	c.cfg.EvictionRatio = 1
	mount(t, c, "b", "plain", 1<<20)
	put(t, c, "onTier", 100, wire.ReplicaConfig{Preferred: []string{"seg"}})
	put(t, c, "onPlain", 100, wire.ReplicaConfig{Preferred: []string{"plain"}})
	if keys, _, _ := c.OffloadHeartbeat("b", "dir-b", 10); len(keys) != 0 {
		t.Fatalf("a client without a tier was asked to offload %v", keys)
	}
	if res := c.Evict(); res.Objects != 1 {
		t.Fatalf("evicted %d objects, want only the one without a tier holder", res.Objects)
	}
	if _, ok := c.QueryKey("onPlain"); ok {
		t.Fatal("onPlain survived eviction")
	}
	if _, ok := c.QueryKey("onTier"); !ok {
		t.Fatal("onTier was evicted before its disk copy existed")
	}
}

// A request lost on the way (the client was busy, crashed, or its write
// failed) is repeated by the eviction that needs it.
func TestEvictionRepeatsALostOffloadRequest(t *testing.T) {
	c, _ := offloadCore(t, false)
	put(t, c, "k", 100, wire.ReplicaConfig{})
	if keys, _, _ := c.OffloadHeartbeat("a", "dir-a", 10); !slices.Equal(keys, []string{"k"}) {
		t.Fatalf("first request: %v", keys)
	}
	c.Evict() // the client never reported k: eviction asks again,
	c.Evict() // once however many passes ask
	if keys, _, _ := c.OffloadHeartbeat("a", "dir-a", 10); !slices.Equal(keys, []string{"k"}) {
		t.Fatalf("after eviction: %v, want k once again", keys)
	}
}

func TestNotifyRefusesACopyOfAReplacedObject(t *testing.T) {
	c, _ := offloadCore(t, false)
	first := put(t, c, "k", 100, wire.ReplicaConfig{})
	b := upsert(t, c, "w", "k", 100, wire.ReplicaConfig{})
	c.PutEnd("w", []string{"k"}, []uint64{b.Epoch})
	codes := c.NotifyOffloaded("a", "ep", "d", []string{"k"}, []uint64{100}, []uint64{first.Epoch})
	if codes[0] != wire.ErrInvalidParams {
		t.Fatalf("copy of the first version accepted: %v", codes[0])
	}
	codes = c.NotifyOffloaded("a", "ep", "d", []string{"k"}, []uint64{100}, []uint64{b.Epoch})
	if codes[0] != wire.OK {
		t.Fatalf("copy of the current version: %v", codes[0])
	}
	if codes := c.NotifyOffloaded("a", "ep", "d", []string{"k"}, nil, nil); codes[0] != wire.ErrInvalidParams {
		t.Fatalf("sizes missing: %v", codes)
	}
}

func TestRemoveTellsTheDiskHolderToDelete(t *testing.T) {
	c, _ := offloadCore(t, false)
	mountTier(t, c, "b", "seg-b", 1<<20)
	for _, k := range []string{"r1", "r2", "keep"} {
		put(t, c, k, 100, wire.ReplicaConfig{})
	}
	notify(c, "b", 100, "r1", "r2", "keep")
	c.OffloadHeartbeat("b", "dir-b", 10) // b's tier runs on dir-b
	if c.OffloadPending("b") {
		t.Fatal("b has nothing to do yet")
	}
	c.Remove([]string{"r1"}, false)
	c.RemoveByRegex("^r", false)
	if !c.OffloadPending("b") {
		t.Fatal("b's ping does not tell it about the drops")
	}
	if _, _, drop := c.OffloadHeartbeat("a", "dir-a", 10); len(drop) != 0 {
		t.Fatalf("a was told to drop %v, held by b", drop)
	}
	_, _, drop := c.OffloadHeartbeat("b", "dir-b", 10)
	slices.Sort(drop)
	if !slices.Equal(drop, []string{"r1", "r2"}) {
		t.Fatalf("b told to drop %v, want r1 r2", drop)
	}
	// A second holder's copy is refused: the first stays.
	if codes := notify(c, "a", 100, "keep"); codes[0] != wire.ErrReplicaAlreadyExists {
		t.Fatalf("second disk copy: %v", codes[0])
	}
	if g := c.GetReplicas([]string{"keep"}, false); g[0].Disk != "ep-b" {
		t.Fatalf("keep's copy moved to %q", g[0].Disk)
	}
}

func TestRecoverDiskAfterARestart(t *testing.T) {
	c, _ := offloadCore(t, false)
	put(t, c, "inMemory", 100, wire.ReplicaConfig{})
	put(t, c, "mine", 100, wire.ReplicaConfig{})
	put(t, c, "theirs", 100, wire.ReplicaConfig{})
	c.NotifyOffloaded("old", "ep-old", "dirA", []string{"mine"}, []uint64{100}, nil)
	put(t, c, "removed", 100, wire.ReplicaConfig{})
	c.NotifyOffloaded("old", "ep-old", "dirA", []string{"removed"}, []uint64{100}, nil)
	c.Remove([]string{"removed"}, true) // while dirA's holder is down
	c.NotifyOffloaded("other", "ep-o", "dirB", []string{"theirs"}, []uint64{100}, nil)
	codes := c.RecoverDisk("new", "ep-new", "dirA",
		[]string{"gone", "mine", "theirs", "inMemory", "", "zero", "mine", "removed"},
		[]uint64{50, 100, 100, 100, 1, 0, 999, 100})
	want := []wire.Code{wire.OK, wire.OK, wire.ErrObjectAlreadyExists, wire.ErrObjectAlreadyExists,
		wire.ErrInvalidParams, wire.ErrInvalidParams, wire.ErrObjectAlreadyExists, wire.ErrObjectAlreadyExists}
	if !slices.Equal(codes, want) {
		t.Fatalf("recover: %v, want %v", codes, want)
	}
	g := c.GetReplicas([]string{"gone", "mine", "theirs"}, false)
	if g[0].Code != wire.OK || g[0].Size != 50 || g[0].Disk != "ep-new" || len(g[0].Replicas) != 0 {
		t.Fatalf("recovered disk-only object: %+v", g[0])
	}
	if g[1].Disk != "ep-new" || g[2].Disk != "ep-o" {
		t.Fatalf("rebinding: mine at %q, theirs at %q", g[1].Disk, g[2].Disk)
	}
	// The copies now belong to the new process: the old one's death
	// does not take them away.
	if r := c.EvictDiskReplicas("old", []string{"mine"}); r[0] != wire.ErrReplicaNotFound {
		t.Fatalf("old process still owns the copy: %v", r[0])
	}
	if _, ok := c.QueryKey("removed"); ok {
		t.Fatal("an object removed while its disk holder was down came back")
	}
	if _, _, drop := c.OffloadHeartbeat("new", "dirA", 10); len(drop) != 0 {
		t.Fatalf("the drop answered by recovery is handed out again: %v", drop)
	}
	if codes := c.RecoverDisk("new", "ep", "", []string{"x"}, []uint64{1}); codes[0] != wire.ErrInvalidParams {
		t.Fatalf("no storage id: %v", codes)
	}
}

// An object whose memory replicas go with their segment, or whose rewrite
// dies with its writer, lives on from its disk copy.
func TestTheDiskCopyOutlivesTheMemory(t *testing.T) {
	c, clk := offloadCore(t, false)
	mountTier(t, c, "b", "seg-b", 1<<20)
	put(t, c, "k", 100, wire.ReplicaConfig{Preferred: []string{"seg"}})
	put(t, c, "rewritten", 100, wire.ReplicaConfig{Preferred: []string{"seg-b"}})
	notify(c, "b", 100, "k", "rewritten")
	if _, err := c.UpsertStart("w2", "", []string{"rewritten"}, []uint64{100}, wire.ReplicaConfig{}); err != nil {
		t.Fatal(err)
	}
	if err := c.UnmountSegment("a", "seg"); err != nil {
		t.Fatal(err)
	}
	if g := c.GetReplicas([]string{"k"}, false); g[0].Code != wire.OK || g[0].Disk != "ep-b" || len(g[0].Replicas) != 0 {
		t.Fatalf("after its segment went: %+v", g[0])
	}
	for range 12 { // w2 never ends its upsert and falls silent
		clk.Advance(time.Second)
		c.Ping("b")
		c.Ping("w")
		c.Tick()
	}
	if g := c.GetReplicas([]string{"rewritten"}, false); g[0].Code != wire.OK || g[0].Disk != "ep-b" || len(g[0].Replicas) != 0 {
		t.Fatalf("after its writer died mid-rewrite: %+v", g[0])
	}
}

// The SSD tier's reads leave the object as they find it: no lease that
// would hold off eviction, no reader, no recency.
func TestPeekReplicasUsesNothing(t *testing.T) {
	c, clk := offloadCore(t, false)
	put(t, c, "k", 100, wire.ReplicaConfig{})
	before, _ := c.QueryKey("k")
	clk.Advance(time.Second)
	g := c.PeekReplicas([]string{"k", "missing"})
	if g[0].Code != wire.OK || len(g[0].Replicas) != 1 || g[0].Size != 100 || g[1].Code != wire.ErrObjectNotFound {
		t.Fatalf("peek: %+v", g)
	}
	if after, _ := c.QueryKey("k"); after.LeaseUntil != before.LeaseUntil {
		t.Fatalf("peek extended the lease to %v", after.LeaseUntil)
	}
	notify(c, "a", 100, "k")
	c.cfg.EvictionRatio = 1
	if res := c.Evict(); res.Objects != 1 {
		t.Fatalf("a peeked and persisted object was not evicted: %+v", res)
	}
}
