package master

import (
	"testing"
	"time"

	"github.com/gostore/gostore/gostore/wire"
)

// promotionCore is a core with the SSD tier and promotion on: client "a"
// holds a host-memory segment (1 MiB) and the disk copies of keys, each
// 1000 bytes and in memory nowhere (as after their eviction).
func promotionCore(t *testing.T, threshold, limit, perHeartbeat int, keys ...string) (*Core, *fakeClock) {
	t.Helper()
	c, clk := newTestCore(t)
	c.cfg.EnableOffload, c.cfg.PromotionOnHit = true, true
	c.cfg.PromotionAdmissionThreshold, c.cfg.PromotionQueueLimit, c.cfg.PromotionMaxPerHeartbeat = threshold, limit, perHeartbeat
	c.promo.sketch = new(countMinSketch) // New makes it when the config asks
	mountTier(t, c, "a", "seg-a", 1<<20)
	sizes := make([]uint64, len(keys))
	for i := range sizes {
		sizes[i] = 1000
	}
	for i, code := range c.RecoverDisk("a", "ep-a", "dir-a", keys, sizes) {
		if code != wire.OK {
			t.Fatalf("RecoverDisk %s: %v", keys[i], code)
		}
	}
	return c, clk
}

// readN uses each key n times, as a reader's get does.
func readN(c *Core, n int, keys ...string) {
	for range n {
		c.GetReplicas(keys, true)
	}
}

type promoCounts struct {
	admitted, freq, watermark, cap, completed, cancelled, failed, expired int64
	inFlight                                                              int
}

func promoNow(c *Core) promoCounts {
	s := c.PromotionStats()
	return promoCounts{s.Admitted.Load(), s.RejectedFrequency.Load(), s.RejectedWatermark.Load(), s.RejectedCap.Load(),
		s.Completed.Load(), s.Cancelled.Load(), s.Failed.Load(), s.Expired.Load(), c.PromotionInFlight()}
}

func TestPromotionGates(t *testing.T) {
	for _, tc := range []struct {
		name                           string
		threshold, limit, perHeartbeat int
		keys                           []string
		reads                          int
		fill                           bool // the pool above its high watermark
		want                           promoCounts
		tasks                          []int // tasks each successive heartbeat hands out
	}{
		{name: "below the threshold", threshold: 3, limit: 10, perHeartbeat: 1, keys: []string{"k"}, reads: 2,
			want: promoCounts{freq: 2}, tasks: []int{0}},
		{name: "at the threshold", threshold: 2, limit: 10, perHeartbeat: 1, keys: []string{"k"}, reads: 2,
			want: promoCounts{freq: 1, admitted: 1, inFlight: 1}, tasks: []int{1, 0}},
		{name: "a queued key is counted once", threshold: 1, limit: 10, perHeartbeat: 1, keys: []string{"k"}, reads: 5,
			want: promoCounts{admitted: 1, inFlight: 1}, tasks: []int{1, 0}},
		{name: "queue limit", threshold: 1, limit: 2, perHeartbeat: 10, keys: []string{"k1", "k2", "k3"}, reads: 1,
			want: promoCounts{admitted: 2, cap: 1, inFlight: 2}, tasks: []int{2, 0}},
		{name: "per-heartbeat cap", threshold: 1, limit: 10, perHeartbeat: 2, keys: []string{"k1", "k2", "k3"}, reads: 1,
			want: promoCounts{admitted: 3, inFlight: 3}, tasks: []int{2, 1, 0}},
		{name: "above the high watermark", threshold: 1, limit: 10, perHeartbeat: 1, keys: []string{"k"}, reads: 1, fill: true,
			want: promoCounts{watermark: 1}, tasks: []int{0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := promotionCore(t, tc.threshold, tc.limit, tc.perHeartbeat, tc.keys...)
			if tc.fill {
				put(t, c, "big", 1<<20-100, wire.ReplicaConfig{})
				c.Tick() // the gate reads the usage the last Tick saw
			}
			readN(c, tc.reads, tc.keys...)
			if got := promoNow(c); got != tc.want {
				t.Fatalf("after the reads: %+v, want %+v", got, tc.want)
			}
			if want := tc.want.inFlight > 0; c.promotionPending("a") != want || (want && !c.OffloadPending("a")) {
				t.Fatalf("promotion pending = %v, want %v (the ping's offload work tells the holder)", !want, want)
			}
			for i, n := range tc.tasks {
				if got := c.PromotionHeartbeat("a"); len(got) != n {
					t.Fatalf("heartbeat %d handed out %d promotions, want %d: %+v", i, len(got), n, got)
				}
			}
			if got := c.PromotionInFlight(); got != tc.want.inFlight {
				t.Fatalf("in flight after the heartbeats: %d, want %d (queued ones became running tasks)", got, tc.want.inFlight)
			}
		})
	}
}

func TestPromotionMakesAMemoryReplica(t *testing.T) {
	c, _ := promotionCore(t, 2, 10, 1, "k")
	readN(c, 2, "k")
	if c.PromotionHeartbeat("b") != nil {
		t.Fatal("a client that does not hold the disk copy got its promotion")
	}
	tasks := c.PromotionHeartbeat("a")
	if len(tasks) != 1 || tasks[0].Key != "k" || tasks[0].Size != 1000 {
		t.Fatalf("promotions = %+v", tasks)
	}
	// While the task runs the object is still served by its disk copy,
	// and further disk reads do not queue it again.
	readN(c, 3, "k")
	if g := c.GetReplicas([]string{"k"}, false)[0]; len(g.Replicas) != 0 || g.Disk != "ep-a" {
		t.Fatalf("get during the promotion = %+v", g)
	}
	if got := promoNow(c); got.admitted != 1 || got.inFlight != 1 {
		t.Fatalf("during the promotion: %+v", got)
	}
	if err := c.TaskDone("a", tasks[0].ID, wire.OK); err != nil {
		t.Fatal(err)
	}
	g := c.GetReplicas([]string{"k"}, false)[0]
	if len(g.Replicas) != 1 || at(g.Replicas[0]) != at(tasks[0].Target) || g.Disk != "ep-a" {
		t.Fatalf("get after the promotion = %+v, want the target %+v and the disk copy", g, tasks[0].Target)
	}
	if got := promoNow(c); got != (promoCounts{admitted: 1, freq: 1, completed: 1}) {
		t.Fatalf("after the promotion: %+v", got)
	}
	if n := c.PromotionStats().CompletedBytes.Load(); n != 1000 {
		t.Fatalf("completed bytes = %d", n)
	}
}

func TestPromotionEnds(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(t *testing.T, c *Core, clk *fakeClock, task wire.PromotionTask)
		want promoCounts
	}{
		{name: "holder reports a failure", want: promoCounts{admitted: 1, failed: 1},
			end: func(t *testing.T, c *Core, _ *fakeClock, p wire.PromotionTask) {
				if err := c.TaskDone("a", p.ID, wire.ErrChecksumMismatch); err != nil {
					t.Fatal(err)
				}
			}},
		{name: "holder never reports", want: promoCounts{admitted: 1, expired: 1},
			end: func(t *testing.T, c *Core, clk *fakeClock, _ wire.PromotionTask) {
				// It expires with its write grant; its range then waits
				// out the quarantine (the holder may still be writing).
				for expiry := c.taskGrantExpiry(c.now()); c.now() <= expiry; {
					clk.Advance(5 * time.Second)
					c.Ping("a")
					c.Tick()
				}
				clk.Advance(c.cfg.PutStartReleaseTimeout + time.Second)
				c.Ping("a")
				c.Tick()
			}},
		{name: "holder dies", want: promoCounts{admitted: 1, cancelled: 1},
			end: func(t *testing.T, c *Core, clk *fakeClock, _ wire.PromotionTask) {
				clk.Advance(c.cfg.ClientTTL + time.Second)
				c.Tick()
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, clk := promotionCore(t, 1, 10, 1, "k")
			c.cfg.PutStartReleaseTimeout = 5 * time.Second
			readN(c, 1, "k")
			tasks := c.PromotionHeartbeat("a")
			if len(tasks) != 1 {
				t.Fatalf("promotions = %+v", tasks)
			}
			tc.end(t, c, clk, tasks[0])
			if got := promoNow(c); got != tc.want {
				t.Fatalf("%+v, want %+v", got, tc.want)
			}
			if used := c.Totals().Used; used != 0 {
				t.Fatalf("the target range is still allocated: %d bytes used", used)
			}
		})
	}
}

func TestPromotionCancelledWhenItsPremiseGoes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		before func(t *testing.T, c *Core)
	}{
		{"object removed", func(t *testing.T, c *Core) { c.Remove([]string{"k"}, true) }},
		{"disk copy evicted", func(t *testing.T, c *Core) { c.EvictDiskReplicas("a", []string{"k"}) }},
		{"holder's tier unmounted", func(t *testing.T, c *Core) {
			if err := c.UnmountLocalDisk("a"); err != nil {
				t.Fatal(err)
			}
		}},
		{"no room on the holder", func(t *testing.T, c *Core) { put(t, c, "big", 1<<20-100, wire.ReplicaConfig{}) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := promotionCore(t, 1, 10, 1, "k")
			readN(c, 1, "k")
			tc.before(t, c)
			if got := c.PromotionHeartbeat("a"); len(got) != 0 {
				t.Fatalf("promotions = %+v", got)
			}
			if got := promoNow(c); got != (promoCounts{admitted: 1, cancelled: 1}) {
				t.Fatalf("%+v", got)
			}
		})
	}
}

// TestPromotionWithNoRoomEvictsNothing: a promotion the holder's segments
// have no room for is cancelled; it does not make every Tick run an
// eviction pass while the pool is below its high watermark.
func TestPromotionWithNoRoomEvictsNothing(t *testing.T) {
	c, _ := promotionCore(t, 1, 10, 1, "k")
	mount(t, c, "b", "seg-b", 16<<20) // the pool: 1 + 16 MiB, far below the watermark
	if r := put(t, c, "big", 1<<20-100, wire.ReplicaConfig{Preferred: []string{"seg-a"}}); r.Code != wire.OK {
		t.Fatalf("put: %v", r.Code)
	}
	readN(c, 1, "k")
	if got := c.PromotionHeartbeat("a"); len(got) != 0 {
		t.Fatalf("promotions = %+v", got)
	}
	for range 3 {
		c.Tick()
	}
	if n := c.Stats().EvictionPasses.Load(); n != 0 {
		t.Fatalf("%d eviction passes below the watermark", n)
	}
	if got := promoNow(c); got != (promoCounts{admitted: 1, cancelled: 1}) {
		t.Fatalf("%+v", got)
	}
}

func TestPromotionOff(t *testing.T) {
	c, _ := newTestCore(t)
	c.cfg.EnableOffload = true
	mountTier(t, c, "a", "seg-a", 1<<20)
	c.RecoverDisk("a", "ep-a", "dir-a", []string{"k"}, []uint64{1000})
	readN(c, 10, "k")
	if got := promoNow(c); got != (promoCounts{}) || c.PromotionHeartbeat("a") != nil || c.OffloadPending("a") {
		t.Fatalf("promotion acted while off: %+v", got)
	}
}

func TestCountMinSketch(t *testing.T) {
	var s countMinSketch
	for i := range uint32(5) {
		if got := s.add(42); got != i+1 {
			t.Fatalf("count %d = %d", i+1, got)
		}
	}
	// Aging halves every counter: the counts follow recent reads.
	s.age()
	if got := s.add(42); got != 3 {
		t.Fatalf("after aging: %d, want 5/2+1", got)
	}
}
