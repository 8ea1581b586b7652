package master

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/gostore/gostore/gostore/wire"
)

// fakeClock is the injected clock: time moves only when a test says so.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (f *fakeClock) Now() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.now }
func (f *fakeClock) Advance(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	f.mu.Unlock()
}

func newTestCore(t *testing.T) (*Core, *fakeClock) {
	t.Helper()
	clk := &fakeClock{now: time.Unix(1000, 0)}
	c := New(Config{DefaultKVLeaseTTL: time.Second, ClientTTL: 10 * time.Second, Now: clk.Now,
		Rand: rand.New(rand.NewPCG(1, 2))})
	return c, clk
}

func mount(t *testing.T, c *Core, client, name string, size uint64) uint64 {
	t.Helper()
	id, err := c.MountSegment(wire.SegmentDesc{Name: name, ClientID: client, Size: size, ShmPath: "/x/" + name}, nil)
	if err != nil {
		t.Fatalf("mount %s: %v", name, err)
	}
	return id
}

func put(t *testing.T, c *Core, key string, size uint64, cfg wire.ReplicaConfig) wire.PutStartResult {
	t.Helper()
	res, err := c.PutStart("w", "", []string{key}, []uint64{size}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Code == wire.OK {
		if codes := c.PutEnd("w", []string{key}, nil); codes[0] != wire.OK {
			t.Fatalf("PutEnd %s: %v", key, codes[0])
		}
	}
	return res[0]
}

func TestPutLifecycle(t *testing.T) {
	c, _ := newTestCore(t)
	mount(t, c, "a", "seg-a", 1<<20)
	res, _ := c.PutStart("w", "", []string{"k"}, []uint64{100}, wire.ReplicaConfig{})
	if res[0].Code != wire.OK || len(res[0].Replicas) != 1 {
		t.Fatalf("PutStart = %+v", res[0])
	}
	// Unfinished: not readable, not existing, a second put sees it.
	if g := c.GetReplicas([]string{"k"}, false); g[0].Code != wire.ErrReplicaIsNotReady {
		t.Fatalf("get while processing = %v, want -703", g[0].Code)
	}
	if e := c.Exist([]string{"k"}); e[0] != wire.ErrObjectNotFound {
		t.Fatalf("exist while processing = %v", e[0])
	}
	if r, _ := c.PutStart("w", "", []string{"k"}, []uint64{100}, wire.ReplicaConfig{}); r[0].Code != wire.ErrObjectAlreadyExists {
		t.Fatalf("second PutStart = %v", r[0].Code)
	}
	if codes := c.Remove([]string{"k"}, false); codes[0] != wire.ErrReplicaIsNotReady {
		t.Fatalf("remove while processing = %v, want -703", codes[0])
	}
	c.PutEnd("w", []string{"k"}, nil)
	g := c.GetReplicas([]string{"k"}, false)
	if g[0].Code != wire.OK || g[0].Size != 100 || at(g[0].Replicas[0]) != at(res[0].Replicas[0]) {
		t.Fatalf("get = %+v", g[0])
	}
	if r := c.PutRevoke("w", []string{"k"}, nil); r[0] != wire.ErrInvalidWrite {
		t.Fatalf("revoke of a complete object = %v", r[0])
	}
}

func TestRevokeFreesSpace(t *testing.T) {
	c, _ := newTestCore(t)
	mount(t, c, "a", "seg-a", 4096)
	res, _ := c.PutStart("w", "", []string{"big"}, []uint64{4096}, wire.ReplicaConfig{})
	if res[0].Code != wire.OK {
		t.Fatal(res[0].Code)
	}
	if r := put(t, c, "other", 64, wire.ReplicaConfig{}); r.Code != wire.ErrNoAvailableHandle {
		t.Fatalf("put into a full pool = %v, want -200", r.Code)
	}
	if r := c.PutRevoke("w", []string{"big"}, nil); r[0] != wire.OK {
		t.Fatal(r[0])
	}
	if r := put(t, c, "other", 4096, wire.ReplicaConfig{}); r.Code != wire.OK {
		t.Fatalf("put after revoke = %v", r.Code)
	}
}

func TestInvalidPuts(t *testing.T) {
	c, _ := newTestCore(t)
	mount(t, c, "a", "seg-a", 1<<20)
	res, err := c.PutStart("w", "", []string{"", "z", "ok"}, []uint64{1, 0, 1}, wire.ReplicaConfig{})
	if err != nil {
		t.Fatal(err)
	}
	want := []wire.Code{wire.ErrInvalidParams, wire.ErrInvalidParams, wire.OK}
	for i := range want {
		if res[i].Code != want[i] {
			t.Errorf("key %d: %v, want %v", i, res[i].Code, want[i])
		}
	}
	if _, err := c.PutStart("w", "", []string{"a"}, nil, wire.ReplicaConfig{}); wire.CodeOf(err) != wire.ErrInvalidParams {
		t.Fatalf("mismatched lengths: %v", err)
	}
	if r := put(t, c, "huge", 2<<20, wire.ReplicaConfig{}); r.Code != wire.ErrNoAvailableHandle {
		t.Fatalf("larger than any segment: %v", r.Code)
	}
}

func TestReplicasOnDistinctSegments(t *testing.T) {
	c, _ := newTestCore(t)
	for i := range 3 {
		mount(t, c, fmt.Sprint("c", i), fmt.Sprint("seg", i), 1<<20)
	}
	for _, tc := range []struct{ want, got int }{{1, 1}, {2, 2}, {3, 3}, {5, 3}} {
		r := put(t, c, fmt.Sprint("k", tc.want), 100, wire.ReplicaConfig{ReplicaNum: tc.want})
		if r.Code != wire.OK || len(r.Replicas) != tc.got {
			t.Fatalf("replica_num=%d: %v with %d replicas, want %d", tc.want, r.Code, len(r.Replicas), tc.got)
		}
		seen := map[uint64]bool{}
		for _, rep := range r.Replicas {
			if seen[rep.SegID] {
				t.Fatalf("two replicas on segment %d", rep.SegID)
			}
			seen[rep.SegID] = true
		}
	}
}

func TestPreferredSegmentFirst(t *testing.T) {
	c, _ := newTestCore(t)
	mount(t, c, "a", "seg-a", 1<<20)
	idB := mount(t, c, "b", "seg-b", 1<<20)
	for i := range 20 {
		r := put(t, c, fmt.Sprint("k", i), 100, wire.ReplicaConfig{Preferred: []string{"nope", "seg-b"}})
		if r.Replicas[0].SegID != idB {
			t.Fatalf("put %d landed on %d, want preferred %d", i, r.Replicas[0].SegID, idB)
		}
	}
	// A full preferred segment falls back to the others.
	if r := put(t, c, "big", 1<<20-1024, wire.ReplicaConfig{Preferred: []string{"seg-b"}}); r.Code != wire.OK || r.Replicas[0].SegID == idB {
		t.Fatalf("fallback: %+v", r)
	}
}

func TestLeaseBlocksRemove(t *testing.T) {
	c, clk := newTestCore(t)
	mount(t, c, "a", "seg-a", 1<<20)
	put(t, c, "k", 10, wire.ReplicaConfig{})
	if codes := c.Remove([]string{"k"}, false); codes[0] != wire.OK {
		t.Fatalf("remove without lease (put grants none) = %v", codes[0])
	}
	put(t, c, "k", 10, wire.ReplicaConfig{})
	c.GetReplicas([]string{"k"}, false)
	if codes := c.Remove([]string{"k"}, false); codes[0] != wire.ErrObjectHasLease {
		t.Fatalf("remove of a leased object = %v, want -706", codes[0])
	}
	clk.Advance(500 * time.Millisecond)
	c.Exist([]string{"k"}) // extends to now+1s
	clk.Advance(700 * time.Millisecond)
	if codes := c.Remove([]string{"k"}, false); codes[0] != wire.ErrObjectHasLease {
		t.Fatalf("exist must extend the lease: %v", codes[0])
	}
	clk.Advance(400 * time.Millisecond)
	if codes := c.Remove([]string{"k", "k"}, false); codes[0] != wire.OK || codes[1] != wire.ErrObjectNotFound {
		t.Fatalf("remove after the lease = %v", codes)
	}
	put(t, c, "k", 10, wire.ReplicaConfig{})
	c.GetReplicas([]string{"k"}, false)
	if codes := c.Remove([]string{"k"}, true); codes[0] != wire.OK {
		t.Fatalf("forced remove = %v", codes[0])
	}
}

func TestRemoveByRegexAndAll(t *testing.T) {
	c, _ := newTestCore(t)
	mount(t, c, "a", "seg-a", 1<<20)
	for _, k := range []string{"layer1/a", "layer1/b", "layer2/a", "x"} {
		put(t, c, k, 10, wire.ReplicaConfig{})
	}
	c.GetReplicas([]string{"layer1/b"}, false) // leased
	c.PutStart("w", "", []string{"layer1/unfinished"}, []uint64{10}, wire.ReplicaConfig{})
	if _, err := c.RemoveByRegex("(", false); wire.CodeOf(err) != wire.ErrInvalidParams {
		t.Fatalf("bad regex: %v", err)
	}
	if n, _ := c.RemoveByRegex("yer1", false); n != 1 {
		t.Fatalf("regex search removed %d, want 1 (leased and unfinished skipped)", n)
	}
	if n := c.RemoveAll(false); n != 2 {
		t.Fatalf("remove_all removed %d, want 2", n)
	}
	if n := c.RemoveAll(true); n != 2 {
		t.Fatalf("forced remove_all removed %d, want 2", n)
	}
	if s := c.Segments(); s[0].Used != 0 {
		t.Fatalf("space not returned: %d used", s[0].Used)
	}
}

func TestUnmountDropsReplicas(t *testing.T) {
	c, _ := newTestCore(t)
	idA := mount(t, c, "a", "seg-a", 1<<20)
	mount(t, c, "b", "seg-b", 1<<20)
	// Two replicas survive the loss of one segment; one replica on A does not.
	put(t, c, "both", 10, wire.ReplicaConfig{ReplicaNum: 2})
	only := put(t, c, "onlyA", 10, wire.ReplicaConfig{Preferred: []string{"seg-a"}})
	if only.Replicas[0].SegID != idA {
		t.Fatal("setup: onlyA not on A")
	}
	if err := c.UnmountSegment("b", "seg-a"); wire.CodeOf(err) != wire.ErrIllegalClient {
		t.Fatalf("unmount by a stranger: %v", err)
	}
	if err := c.UnmountSegment("a", "seg-a"); err != nil {
		t.Fatal(err)
	}
	if g := c.GetReplicas([]string{"both", "onlyA"}, false); g[0].Code != wire.OK || len(g[0].Replicas) != 1 || g[1].Code != wire.ErrObjectNotFound {
		t.Fatalf("after unmount: %+v", g)
	}
	if err := c.UnmountSegment("a", "seg-a"); wire.CodeOf(err) != wire.ErrSegmentNotFound {
		t.Fatalf("second unmount: %v", err)
	}
	if len(c.QuerySegments([]uint64{idA})) != 0 {
		t.Fatal("unmounted segment still resolvable")
	}
}

func TestMountRules(t *testing.T) {
	c, _ := newTestCore(t)
	id := mount(t, c, "a", "seg", 1<<20)
	if again := mount(t, c, "a", "seg", 1<<20); again != id {
		t.Fatalf("retried mount got id %d, want %d", again, id)
	}
	if _, err := c.MountSegment(wire.SegmentDesc{Name: "seg", ClientID: "b", Size: 1 << 20}, nil); wire.CodeOf(err) != wire.ErrSegmentAlreadyExists {
		t.Fatalf("name taken by another client: %v", err)
	}
	if _, err := c.MountSegment(wire.SegmentDesc{Name: "tiny", ClientID: "b", Size: 1}, nil); wire.CodeOf(err) != wire.ErrInvalidParams {
		t.Fatalf("tiny segment: %v", err)
	}
	if _, err := c.MountSegment(wire.SegmentDesc{Name: "huge", ClientID: "b", Size: 1 << 63}, nil); wire.CodeOf(err) != wire.ErrInvalidParams {
		t.Fatalf("implausible segment size accepted: %v", err)
	}
	c.UnmountSegment("a", "seg")
	if id2 := mount(t, c, "a", "seg", 1<<20); id2 == id {
		t.Fatal("segment IDs must not be reused")
	}
}

func TestSilentClientExpires(t *testing.T) {
	c, clk := newTestCore(t)
	mount(t, c, "quiet", "seg-q", 1<<20)
	mount(t, c, "alive", "seg-l", 1<<20)
	put(t, c, "onQuiet", 10, wire.ReplicaConfig{Preferred: []string{"seg-q"}})
	put(t, c, "onAlive", 10, wire.ReplicaConfig{Preferred: []string{"seg-l"}})
	for range 12 {
		clk.Advance(time.Second)
		c.Ping("alive")
		if exp := c.Tick(); len(exp) > 0 && exp[0] != "quiet" {
			t.Fatalf("expired %v", exp)
		}
	}
	if g := c.GetReplicas([]string{"onQuiet", "onAlive"}, false); g[0].Code != wire.ErrObjectNotFound || g[1].Code != wire.OK {
		t.Fatalf("after expiry: %v %v", g[0].Code, g[1].Code)
	}
	if len(c.Segments()) != 1 {
		t.Fatalf("segments left: %+v", c.Segments())
	}
	if c.Ping("quiet") {
		t.Fatal("an expired client must be told to remount")
	}
	if !c.Ping("quiet") {
		t.Fatal("the second ping is from a known client")
	}
}

// TestConcurrentPutsAndUnmount races puts, gets and an unmount (with -race
// it checks the shared state for data races); afterwards every surviving
// replica must be on a mounted segment.
func TestConcurrentPutsAndUnmount(t *testing.T) {
	c, _ := newTestCore(t)
	for i := range 4 {
		mount(t, c, fmt.Sprint("c", i), fmt.Sprint("s", i), 1<<22)
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 300 {
				k := fmt.Sprintf("g%d-%d", g, i)
				res, _ := c.PutStart("w", "", []string{k}, []uint64{512}, wire.ReplicaConfig{ReplicaNum: 2})
				if res[0].Code == wire.OK {
					c.PutEnd("w", []string{k}, nil)
				}
				c.GetReplicas([]string{k}, false)
				if i%3 == 0 {
					c.Remove([]string{k}, true)
				}
			}
		}()
	}
	c.UnmountSegment("c1", "s1")
	wg.Wait()
	mounted := map[uint64]bool{}
	for _, s := range c.Segments() {
		mounted[s.ID] = true
	}
	for i := range c.shards {
		for k, o := range c.shards[i].objects {
			for _, r := range o.reps() {
				if !mounted[r.seg.desc.ID] {
					t.Fatalf("%s has a replica on unmounted segment %d", k, r.seg.desc.ID)
				}
			}
		}
	}
}

func TestSameNodeFirst(t *testing.T) {
	c, _ := newTestCore(t)
	for i := range 4 {
		host := "far"
		if i == 2 {
			host = "near"
		}
		c.MountSegment(wire.SegmentDesc{Name: fmt.Sprint("s", i), ClientID: fmt.Sprint("c", i), Size: 1 << 20, HostID: host}, nil)
	}
	for i := range 20 {
		res, _ := c.PutStart("w", "near", []string{fmt.Sprint("k", i)}, []uint64{64}, wire.ReplicaConfig{SameNode: true})
		segs := c.QuerySegments([]uint64{res[0].Replicas[0].SegID})
		if segs[0].HostID != "near" {
			t.Fatalf("put %d placed on %s", i, segs[0].Name)
		}
	}
}

// A client whose first call to a (restarted) master is not a ping is
// still told by its first ping that the master does not know it, so it
// mounts its segment again.
func TestOnlyAPingMakesAClientKnown(t *testing.T) {
	c, _ := newTestCore(t)
	c.PutStart("a", "", []string{"k"}, []uint64{10}, wire.ReplicaConfig{})
	c.OffloadHeartbeat("a", "dir", 10)
	if c.Ping("a") {
		t.Fatal("the first ping found a known client")
	}
	if !c.Ping("a") {
		t.Fatal("the second ping found an unknown client")
	}
}
