package master

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gostore/gostore/gostore/wire"
)

// fillAged puts n objects of size bytes, one clock step apart, so that key i
// is the i-th least recently used.
func fillAged(t *testing.T, c *Core, clk *fakeClock, prefix string, n int, size uint64, cfg wire.ReplicaConfig) []string {
	t.Helper()
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s%03d", prefix, i)
		if r := put(t, c, keys[i], size, cfg); r.Code != wire.OK {
			t.Fatalf("put %s: %v", keys[i], r.Code)
		}
		clk.Advance(time.Millisecond)
	}
	return keys
}

func present(c *Core, keys []string) []string {
	var out []string
	for _, k := range keys {
		if _, ok := c.QueryKey(k); ok {
			out = append(out, k)
		}
	}
	return out
}

func TestEvictionTakesTheOldestUnprotected(t *testing.T) {
	c, clk := newTestCore(t)
	c.cfg.AllowEvictSoftPinned = true
	mount(t, c, "a", "seg", 1<<20)
	plain := fillAged(t, c, clk, "plain", 40, 1024, wire.ReplicaConfig{})
	hard := fillAged(t, c, clk, "hard", 10, 1024, wire.ReplicaConfig{HardPin: true})
	soft := fillAged(t, c, clk, "soft", 10, 1024, wire.ReplicaConfig{SoftPin: true})
	// Reading the two oldest plain objects leases them and makes them recent.
	c.GetReplicas(plain[:2], false)
	// An unfinished put is never evicted.
	c.PutStart("w", "", []string{"unfinished"}, []uint64{1024}, wire.ReplicaConfig{})
	used := c.Segments()[0].Used

	if n := c.Census(); n.SoftPinned != 10 || n.InMemory != 60 || n.OnDisk != 0 {
		t.Fatalf("census %+v", n)
	}
	// Candidates: 38 plain (40 less the 2 leased) + 10 soft-pinned = 48;
	// ratio 0.05 of 48 rounds up to 3.
	res := c.Evict()
	if res.Candidates != 48 || res.Objects != 3 || res.Bytes != 3*1024 {
		t.Fatalf("pass: %+v", res)
	}
	if got := present(c, plain); !slices.Equal(got, append(plain[:2:2], plain[5:]...)) {
		t.Fatalf("evicted the wrong plain objects; left %v", got)
	}
	if c.Segments()[0].Used != used-3*1024 {
		t.Fatalf("space not returned: %d -> %d", used, c.Segments()[0].Used)
	}
	// Everything unprotected (ratio 1): plain first, then soft-pinned; the
	// leased, hard-pinned and unfinished objects stay.
	c.cfg.EvictionRatio = 1
	c.Evict()
	if got := present(c, plain); !slices.Equal(got, plain[:2]) {
		t.Fatalf("plain left: %v", got)
	}
	if len(present(c, soft)) != 0 || len(present(c, hard)) != 10 || len(present(c, []string{"unfinished"})) != 1 {
		t.Fatalf("soft %v hard %v", present(c, soft), present(c, hard))
	}
	// After the lease the read objects go too; hard pins never.
	clk.Advance(2 * time.Second)
	c.Evict()
	if len(present(c, plain)) != 0 || len(present(c, hard)) != 10 {
		t.Fatal("lease expiry or hard pin not honoured")
	}
	// Nothing evictable is left: a pass that frees nothing is not effective.
	if res := c.Evict(); res.Objects != 0 || c.Stats().EvictionPasses.Load() != 4 || c.Stats().EvictionPassesEffective.Load() != 3 {
		t.Fatalf("pass %+v: %d passes, %d effective", res, c.Stats().EvictionPasses.Load(), c.Stats().EvictionPassesEffective.Load())
	}
}

func TestSoftPinnedKeptWhenNotAllowed(t *testing.T) {
	c, clk := newTestCore(t)
	c.cfg.AllowEvictSoftPinned = false
	c.cfg.EvictionRatio = 1
	mount(t, c, "a", "seg", 1<<20)
	soft := fillAged(t, c, clk, "soft", 5, 1024, wire.ReplicaConfig{SoftPin: true})
	plain := fillAged(t, c, clk, "plain", 5, 1024, wire.ReplicaConfig{})
	c.Evict()
	if len(present(c, soft)) != 5 || len(present(c, plain)) != 0 {
		t.Fatalf("soft %v plain %v", present(c, soft), present(c, plain))
	}
	// A soft pin lapses SoftPinTTL after the last read, then it is plain.
	c.cfg.AllowEvictSoftPinned = false
	clk.Advance(c.cfg.SoftPinTTL + time.Second)
	c.Evict()
	if len(present(c, soft)) != 0 {
		t.Fatal("expired soft pin still protects")
	}
}

func TestEvictionRatioGrowsAboveWatermark(t *testing.T) {
	c, clk := newTestCore(t)
	mount(t, c, "a", "seg", 100*1024)
	fillAged(t, c, clk, "k", 95, 1024, wire.ReplicaConfig{}) // 95% used, watermark 90%
	// max(0.05, 0.95 − 0.90 + 0.05) = 0.10 of 95 → 10 objects.
	if res := c.Evict(); res.Objects != 10 {
		t.Fatalf("evicted %d, want 10", res.Objects)
	}
}

func TestFailedPutTriggersEvictionForTheNext(t *testing.T) {
	c, clk := newTestCore(t)
	c.cfg.HighWatermark = 1 // only the failure triggers a pass
	mount(t, c, "a", "seg", 64*1024)
	fillAged(t, c, clk, "k", 64, 1024, wire.ReplicaConfig{})
	if r := put(t, c, "new", 4096, wire.ReplicaConfig{}); r.Code != wire.ErrNoAvailableHandle {
		t.Fatalf("full pool: %v", r.Code)
	}
	c.Ping("w")
	c.Tick()
	if r := put(t, c, "new", 4096, wire.ReplicaConfig{}); r.Code != wire.OK {
		t.Fatalf("put after the pass: %v", r.Code)
	}
	if st := c.Stats(); st.EvictionPasses.Load() != 1 || st.EvictedObjects.Load() < 4 {
		t.Fatalf("passes %d evicted %d", st.EvictionPasses.Load(), st.EvictedObjects.Load())
	}
	// A Tick without pressure does not evict.
	c.Tick()
	if c.Stats().EvictionPasses.Load() != 1 {
		t.Fatal("eviction without a reason")
	}
}

func TestAbandonedPutIsTakenOverAndQuarantined(t *testing.T) {
	c, clk := newTestCore(t)
	c.cfg.ClientTTL = time.Hour // keep the slow writer alive
	mount(t, c, "a", "seg", 1<<20)
	first, _ := c.PutStart("slow", "", []string{"k"}, []uint64{4096}, wire.ReplicaConfig{})
	clk.Advance(c.cfg.PutStartDiscardTimeout - time.Second)
	if r, _ := c.PutStart("fast", "", []string{"k"}, []uint64{4096}, wire.ReplicaConfig{}); r[0].Code != wire.ErrObjectAlreadyExists {
		t.Fatalf("young unfinished put taken over: %v", r[0].Code)
	}
	clk.Advance(2 * time.Second)
	second, _ := c.PutStart("fast", "", []string{"k"}, []uint64{4096}, wire.ReplicaConfig{})
	if second[0].Code != wire.OK || at(second[0].Replicas[0]) == at(first[0].Replicas[0]) {
		t.Fatalf("takeover: %+v (old %+v)", second[0], first[0])
	}
	if used := c.Segments()[0].Used; used != 2*4096 {
		t.Fatalf("old ranges must stay allocated during quarantine: used %d", used)
	}
	if n, bytes := c.Quarantined(); n != 1 || bytes != 4096 || c.Stats().Discarded.Load() != 1 {
		t.Fatalf("quarantine holds %d writes, %d bytes (discarded %d)", n, bytes, c.Stats().Discarded.Load())
	}
	// The slow writer finishing late must not publish the new put's object
	// (whose bytes are still being written) as its own.
	if r := c.PutEnd("slow", []string{"k"}, nil); r[0] != wire.ErrObjectNotFound {
		t.Fatalf("late PutEnd of a taken-over put: %v", r[0])
	}
	if g := c.GetReplicas([]string{"k"}, false); g[0].Code != wire.ErrReplicaIsNotReady {
		t.Fatalf("taken-over key readable before its new writer ended: %v", g[0].Code)
	}
	if r := c.PutRevoke("slow", []string{"k"}, nil); r[0] != wire.ErrObjectNotFound {
		t.Fatalf("late revoke: %v", r[0])
	}
	c.PutEnd("fast", []string{"k"}, nil)
	clk.Advance(c.cfg.PutStartReleaseTimeout)
	c.Tick()
	if used := c.Segments()[0].Used; used != 4096 {
		t.Fatalf("quarantine not released: used %d", used)
	}
	if c.Stats().PutsTakenOver.Load() != 1 || c.Stats().DiscardedReleased.Load() != 1 {
		t.Fatal("counters")
	}
	if n, bytes := c.Quarantined(); n != 0 || bytes != 0 {
		t.Fatalf("quarantine still holds %d writes, %d bytes", n, bytes)
	}
}

func TestDeadWritersPutsAreDropped(t *testing.T) {
	c, clk := newTestCore(t)
	mount(t, c, "owner", "seg", 1<<20)
	c.PutStart("doomed", "", []string{"stuck"}, []uint64{4096}, wire.ReplicaConfig{})
	put(t, c, "done", 100, wire.ReplicaConfig{})
	for range 12 {
		clk.Advance(time.Second)
		c.Ping("owner")
		c.Ping("w")
		c.Tick()
	}
	if _, ok := c.QueryKey("stuck"); ok {
		t.Fatal("a dead writer's unfinished put is stuck")
	}
	if r := put(t, c, "stuck", 64, wire.ReplicaConfig{}); r.Code != wire.OK {
		t.Fatalf("key still blocked: %v", r.Code)
	}
	if _, ok := c.QueryKey("done"); !ok || c.Segments()[0].Used != 64+128 {
		t.Fatalf("used %d", c.Segments()[0].Used)
	}
}

func TestNthSmallestMatchesSort(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for trial := range 200 {
		n := 1 + r.IntN(300)
		a := make([]int64, n)
		for i := range a {
			a[i] = int64(r.IntN(50)) // many duplicates
		}
		k := r.IntN(n)
		sorted := slices.Clone(a)
		slices.Sort(sorted)
		if got := nthSmallest(a, k); got != sorted[k] {
			t.Fatalf("trial %d: nth(%d) = %d, want %d", trial, k, got, sorted[k])
		}
	}
}

// Above evictSample objects the cuts come from a sample. A share of at
// least 1/evictSpread is swept whole: about the right number go, and the
// oldest ones.
func TestSampledEvictionTakesAboutTheOldest(t *testing.T) {
	c, clk := newTestCore(t)
	c.cfg.EvictionRatio = 0.2
	mount(t, c, "a", "seg", 1<<30)
	all := fillBatches(c, clk, evictSample*20, 100)
	n := len(all)
	res := c.Evict()
	want := n / 5 // give or take the sample's error (1σ: 4% of want)
	if res.Objects < want*8/10 || res.Objects > want*12/10 {
		t.Fatalf("evicted %d, want about %d", res.Objects, want)
	}
	// Every evicted key is among the oldest 25%, and the oldest 15% all went.
	for i, k := range all {
		_, ok := c.QueryKey(k)
		switch {
		case !ok && i > n*25/100:
			t.Fatalf("evicted %s, the %d-th oldest of %d", k, i, n)
		case ok && i < n*15/100:
			t.Fatalf("kept %s, the %d-th oldest of %d", k, i, n)
		}
	}
}

// fillBatches puts n objects of 64 bytes in batches that share a clock
// reading, one millisecond apart, and returns the keys oldest first.
func fillBatches(c *Core, clk *fakeClock, n, batch int) []string {
	keys := make([]string, 0, batch)
	sizes := make([]uint64, batch)
	for i := range sizes {
		sizes[i] = 64
	}
	all := make([]string, 0, n)
	for len(all) < n {
		keys = keys[:0]
		for j := 0; j < batch && len(all) < n; j++ {
			k := fmt.Sprintf("k%07d", len(all))
			keys = append(keys, k)
			all = append(all, k)
		}
		c.PutStart("w", "", keys, sizes[:len(keys)], wire.ReplicaConfig{})
		c.PutEnd("w", keys, nil)
		clk.Advance(time.Millisecond)
	}
	return all
}

// A pass that wants less than 1/evictSpread of a large store takes exactly
// what it wants, from among the oldest, and stops: it looks at a number of
// objects bound by what it evicts, not by the store.
func TestSmallPassOnALargeStoreStopsEarly(t *testing.T) {
	c, clk := newTestCore(t)
	mount(t, c, "a", "seg", 1<<30)
	all := fillBatches(c, clk, 200_000, 100)
	n := len(all)
	const want = 500
	c.cfg.EvictionRatio = float64(want) / float64(n)
	res := c.Evict()
	if res.Objects != want {
		t.Fatalf("evicted %d, want %d exactly", res.Objects, want)
	}
	// The sample, the sweep up to about evictSpread per eviction, and the
	// shards whose iteration was under way when the count was met.
	if limit := evictSample + 3*evictSpread*want; res.Visited > limit {
		t.Fatalf("visited %d objects for %d evictions (limit %d)", res.Visited, want, limit)
	}
	// Each evicted key is among the oldest 1/evictSpread, give or take
	// the sample's error.
	for i, k := range all {
		if _, ok := c.QueryKey(k); !ok && i > n*3/(2*evictSpread) {
			t.Fatalf("evicted %s, the %d-th oldest of %d", k, i, n)
		}
	}
}

// Per class: a bounded pass takes the plain objects first and the
// soft-pinned only for what the plain ones could not give; hard-pinned
// and leased ones never.
func TestSmallPassKeepsTheClassOrder(t *testing.T) {
	c, clk := newTestCore(t)
	c.cfg.AllowEvictSoftPinned = true
	mount(t, c, "a", "seg", 1<<30)
	soft := fillAgedQuiet(c, clk, "soft", 20_000, wire.ReplicaConfig{SoftPin: true})
	hard := fillAgedQuiet(c, clk, "hard", 20_000, wire.ReplicaConfig{HardPin: true})
	plain := fillAgedQuiet(c, clk, "plain", 20_000, wire.ReplicaConfig{})
	c.GetReplicas(plain[:1000], false) // leased
	// The candidates' count is estimated from the sample: about 400 go.
	c.cfg.EvictionRatio = 400.0 / 39_000
	res := c.Evict()
	if res.Objects < 340 || res.Objects > 460 {
		t.Fatalf("evicted %d, want about 400", res.Objects)
	}
	if left := len(present(c, plain)); left != 20_000-res.Objects {
		t.Fatalf("plain left %d, want %d", left, 20_000-res.Objects)
	}
	if len(present(c, soft)) != 20_000 || len(present(c, hard)) != 20_000 || len(present(c, plain[:1000])) != 1000 {
		t.Fatal("a soft-pinned, hard-pinned or leased object went before the plain ones")
	}
	// With the plain ones gone but for the leased, the soft-pinned follow.
	c.Remove(plain[1000:], false)
	c.cfg.EvictionRatio = 300.0 / 21_000
	if res := c.Evict(); res.Objects < 255 || res.Objects > 345 || len(present(c, soft)) != 20_000-res.Objects {
		t.Fatalf("soft pass %+v; soft left %d", res, len(present(c, soft)))
	}
	if len(present(c, hard)) != 20_000 || len(present(c, plain[:1000])) != 1000 {
		t.Fatal("a hard-pinned or leased object went")
	}
}

// fillAgedQuiet is fillAged for many objects: batches of 100 share a clock
// reading.
func fillAgedQuiet(c *Core, clk *fakeClock, prefix string, n int, cfg wire.ReplicaConfig) []string {
	keys := make([]string, n)
	sizes := make([]uint64, 100)
	for i := range sizes {
		sizes[i] = 64
	}
	for i := range keys {
		keys[i] = fmt.Sprintf("%s%06d", prefix, i)
	}
	for i := 0; i < n; i += 100 {
		b := keys[i:min(i+100, n)]
		c.PutStart("w", "", b, sizes[:len(b)], cfg)
		c.PutEnd("w", b, nil)
		clk.Advance(time.Millisecond)
	}
	return keys
}

// A batch shares one clock reading. When the cut falls inside a batch, every
// older object must still go and only the remainder come from the tie.
func TestEvictionTiesNeverPushOutOlder(t *testing.T) {
	c, clk := newTestCore(t)
	c.cfg.EvictionRatio = 0.5
	mount(t, c, "a", "seg", 1<<20)
	batch := func(prefix string) []string {
		keys := make([]string, 20)
		sizes := make([]uint64, 20)
		for i := range keys {
			keys[i], sizes[i] = fmt.Sprintf("%s%02d", prefix, i), 64
		}
		c.PutStart("w", "", keys, sizes, wire.ReplicaConfig{})
		c.PutEnd("w", keys, nil)
		clk.Advance(time.Millisecond)
		return keys
	}
	a, b, cc := batch("a"), batch("b"), batch("c")
	if res := c.Evict(); res.Objects != 30 {
		t.Fatalf("evicted %d, want 30", res.Objects)
	}
	if n := len(present(c, a)); n != 0 {
		t.Fatalf("%d of the oldest batch survived while newer ones went", n)
	}
	if n := len(present(c, b)); n != 10 {
		t.Fatalf("%d of the middle batch left, want 10", n)
	}
	if n := len(present(c, cc)); n != 20 {
		t.Fatalf("the newest batch lost %d", 20-n)
	}
}

// Issue 32, bug 4: a put call that waits for room ends its first rounds
// held (PutEndHold), so the eviction that makes the room takes older
// objects, never the call's own: those have no disk copy and would be
// lost while the call answers 0 for them. The holds end with the call
// (PutUnhold), or at the latest after PutStartDiscardTimeout.
func TestEvictionSparesTheObjectsOfAPutCallTranscript(t *testing.T) {
	c, clk := newTestCore(t)
	runTranscript(t, c, clk, `
		mount a seg 2097152 => ok
		# An object of an earlier call, older than the batch.
		start old 786432 => seg
		end old 0 => ok
		advance 1ms => ok
		# One call of five 768 KiB items: the first round places b0 only.
		start b0 786432 => seg
		start b1 786432 => -200
		# The round ends b0 held, b1 waits; the pass takes the older object.
		end b0 10s => ok
		evict => 1
		present old => no
		present b0 => yes
		advance 1ms => ok
		# The next round places b1 in old's room; b2 finds none.
		start b1 786432 => seg
		start b2 786432 => -200
		end b1 10s => ok
		# Only the call's own objects are left: the pass takes nothing, so
		# b2..b4 answer -200 and b0, b1 (answered 0) stay.
		evict => 0
		present b0 => yes
		present b1 => yes
		start b2 786432 => -200
		# The call is over. It ended with refusals, which asked for a pass:
		# the holds end a moment later, so that pass does not take b0, b1.
		unhold b0 1s => ok
		unhold b1 1s => ok
		evict => 0
		advance 1s => ok
		evict => 1
		present b0 => no
		present b1 => yes

		# A hold whose end never comes (the caller died) runs out: at most
		# PutStartDiscardTimeout (30 s), whatever the caller asked.
		advance 1ms => ok
		start c0 786432 => seg
		end c0 1h => ok
		evict => 1
		present b1 => no
		evict => 0
		advance 29s => ok
		evict => 0
		advance 2s => ok
		evict => 1
		present c0 => no

		# An unhold without grace ends the hold at once (every item of the
		# call found room).
		start e0 786432 => seg
		end e0 10s => ok
		evict => 0
		unhold e0 0 => ok
		evict => 1
		present e0 => no

		# A plain PutEnd of a new write ends an old hold (the hold is the
		# write's, not the key's).
		start d0 786432 => seg
		end d0 10s => ok
		evict => 0
		start d1 786432 => seg
		end d1 0 => ok
		evict => 1
		present d0 => yes
		present d1 => no
	`)
}

// With an SSD tier, a held object that has a disk copy may go: it lives on
// from the disk, which is all the hold is for.
func TestEvictionTakesAHeldObjectWithADiskCopyTranscript(t *testing.T) {
	c, clk := newTestCore(t)
	c.cfg.EnableOffload = true
	mountTier(t, c, "a", "seg", 2097152)
	runTranscript(t, c, clk, `
		start b0 786432 => seg
		start b1 786432 => seg
		start b2 786432 => -200
		end b0 10s => ok
		end b1 10s => ok
		evict => 0
		ondisk a b0 => ok
		evict => 1
		present b0 => yes
		start b2 786432 => seg
	`)
}

// A sweep of a shard larger than a chunk sees every object once, lets f
// delete, and keeps the shard's count, which objectCount reads without a
// lock, equal to its map's size.
func TestSweepVisitsALargeShardInChunks(t *testing.T) {
	c, _ := newTestCore(t)
	mount(t, c, "a", "seg", 1<<30)
	sh := &c.shards[0]
	keys := keysInShard(c, sh, 2*sweepChunk+7)
	sizes := make([]uint64, len(keys))
	for i := range sizes {
		sizes[i] = 64
	}
	c.PutStart("w", "", keys, sizes, wire.ReplicaConfig{})
	c.PutEnd("w", keys, nil)
	if got := c.objectCount(); got != len(keys) || sh.n.Load() != int64(len(keys)) {
		t.Fatalf("count %d (shard %d), want %d", got, sh.n.Load(), len(keys))
	}
	seen := map[string]int{}
	sh.sweep(func(key string, o *object) {
		seen[key]++
		if len(seen)%2 == 0 {
			f := o.release()
			c.deleteObject(sh, key, o)
			f.free(&c.stats)
		}
	})
	for _, k := range keys {
		if seen[k] != 1 {
			t.Fatalf("%s seen %d times", k, seen[k])
		}
	}
	if got, want := c.objectCount(), len(keys)-len(keys)/2; got != want || len(sh.objects) != want {
		t.Fatalf("after deleting half: count %d, map %d, want %d", got, len(sh.objects), want)
	}
}

// A dead client's cleanup over a shard larger than a chunk lets a call on
// that shard through between chunks: a get behind the sweep waits for one
// chunk, not for the whole shard (at 10^8 objects, ~10^5 per shard).
func TestCleanupSweepLetsACallThroughBetweenChunks(t *testing.T) {
	c, _ := newTestCore(t)
	mount(t, c, "a", "seg", 1<<30)
	sh := &c.shards[0]
	keys := keysInShard(c, sh, 2*sweepChunk+1)
	sizes := make([]uint64, len(keys))
	for i := range sizes {
		sizes[i] = 64
	}
	if _, err := c.PutStart("dead", "", keys, sizes, wire.ReplicaConfig{}); err != nil {
		t.Fatal(err)
	}
	// Every free below runs under the shard's lock, inside the sweep. At
	// the first, a caller starts waiting for the lock; by the last it must
	// have had it. (It waits over a millisecond, so Go's mutex hands the
	// lock to it at the next unlock instead of letting the sweep take it
	// back.)
	var frees int
	var through atomic.Bool
	waiting := make(chan struct{})
	testHookFree = func(*segment, uint64, uint64) {
		frees++
		switch frees {
		case 1:
			go func() {
				close(waiting)
				sh.mu.Lock()
				through.Store(true)
				sh.mu.Unlock()
			}()
			<-waiting
			waitQueuedOnMutex(t, "TestCleanupSweepLetsACallThroughBetweenChunks")
			time.Sleep(5 * time.Millisecond) // the caller is queued and starving
		case len(keys):
			if !through.Load() {
				t.Errorf("a call on the shard waited for all %d objects of the sweep", len(keys))
			}
		}
	}
	t.Cleanup(func() { testHookFree = nil })
	c.forgetClients(map[string]bool{"dead": true}, false)
	if frees != len(keys) || len(sh.objects) != 0 || c.objectCount() != 0 {
		t.Fatalf("%d frees for %d unfinished puts; %d objects left (count %d)", frees, len(keys), len(sh.objects), c.objectCount())
	}
}

// waitQueuedOnMutex returns once a goroutine started by the test named
// test is blocked acquiring a mutex: a caller that was merely started may
// not have reached Lock yet on a loaded machine (CI once saw it come after
// the whole sweep), and only one queued for over a millisecond is handed
// the lock at the next unlock.
func waitQueuedOnMutex(t *testing.T, test string) {
	buf := make([]byte, 1<<20)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Microsecond) {
		for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
			if strings.Contains(g, "[sync.Mutex.Lock") && strings.Contains(g, test) {
				return
			}
		}
	}
	t.Fatal("the caller never queued on the shard's lock")
}

// keysInShard returns n keys that c places in sh.
func keysInShard(c *Core, sh *shard, n int) []string {
	keys := make([]string, 0, n)
	b := []byte("k")
	for i := 0; len(keys) < n; i++ {
		b = strconv.AppendInt(b[:1], int64(i), 10)
		if c.shardOf(string(b)) == sh { // no allocation: the compiler sees through it
			keys = append(keys, string(b))
		}
	}
	return keys
}
