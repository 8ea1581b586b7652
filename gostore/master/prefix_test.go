package master

import (
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/gostore/gostore/gostore/wire"
)

// pages are the keys every PrefixLookup case asks for, in order.
var pages = []string{"p0", "p1", "p2", "p3", "p4"}

func on(seg string) wire.ReplicaConfig { return wire.ReplicaConfig{Preferred: []string{seg}} }

func pc(matched, memory, disk int) PrefixCount {
	return PrefixCount{Matched: matched, Memory: memory, Disk: disk}
}

func pcDev(matched, memory, device int) PrefixCount {
	return PrefixCount{Matched: matched, Memory: memory, Device: device}
}

func TestPrefixLookup(t *testing.T) {
	cases := []struct {
		name  string
		setup func(t *testing.T, c *Core, clk *fakeClock)
		want  PrefixHit
	}{
		{"all in memory", func(t *testing.T, c *Core, _ *fakeClock) {
			for _, k := range pages {
				put(t, c, k, 100, on("seg-a"))
			}
		}, PrefixHit{pc(5, 5, 0), []HostPrefix{{"seg-a", pc(5, 5, 0)}}}},
		{"nothing stored", func(*testing.T, *Core, *fakeClock) {}, PrefixHit{}},
		{"a hole in the middle", func(t *testing.T, c *Core, _ *fakeClock) {
			for _, k := range []string{"p0", "p1", "p3", "p4"} {
				put(t, c, k, 100, on("seg-a"))
			}
		}, PrefixHit{pc(2, 2, 0), []HostPrefix{{"seg-a", pc(2, 2, 0)}}}},
		{"spread over two hosts", func(t *testing.T, c *Core, _ *fakeClock) {
			put(t, c, "p0", 100, wire.ReplicaConfig{ReplicaNum: 2})
			put(t, c, "p1", 100, on("seg-a"))
			put(t, c, "p2", 100, on("seg-b"))
		}, PrefixHit{pc(3, 3, 0), []HostPrefix{{"seg-a", pc(2, 2, 0)}, {"seg-b", pc(1, 1, 0)}}}},
		{"a page being written is not counted", func(t *testing.T, c *Core, _ *fakeClock) {
			put(t, c, "p0", 100, on("seg-a"))
			if res, _ := c.PutStart("w", "", []string{"p1"}, []uint64{100}, on("seg-a")); res[0].Code != wire.OK {
				t.Fatalf("PutStart p1: %v", res[0].Code)
			}
			put(t, c, "p2", 100, on("seg-a"))
		}, PrefixHit{pc(1, 1, 0), []HostPrefix{{"seg-a", pc(1, 1, 0)}}}},
		{"memory, disk only, memory", func(t *testing.T, c *Core, _ *fakeClock) {
			c.cfg.EnableOffload, c.cfg.EvictionRatio = true, 1
			mountTier(t, c, "t", "seg-t", 1<<20)
			for _, k := range pages[:3] {
				put(t, c, k, 100, on("seg-t"))
			}
			// p1 persisted, then its memory evicted; p0 persisted and kept.
			// The tier answers at its own endpoint, but it is t's: one host.
			if codes := c.NotifyOffloaded("t", "ep-t", "dir", []string{"p1"}, []uint64{100}, nil); codes[0] != wire.OK {
				t.Fatalf("offload p1: %v", codes[0])
			}
			if res := c.Evict(); res.Objects != 1 {
				t.Fatalf("evicted %d, want p1", res.Objects)
			}
			if codes := c.NotifyOffloaded("t", "ep-t", "dir", []string{"p0"}, []uint64{100}, nil); codes[0] != wire.OK {
				t.Fatalf("offload p0: %v", codes[0])
			}
		}, PrefixHit{pc(3, 1, 2), []HostPrefix{{"seg-t", pc(3, 1, 2)}}}},
		{"disk copy on another host", func(t *testing.T, c *Core, _ *fakeClock) {
			c.cfg.EnableOffload = true
			put(t, c, "p0", 100, on("seg-a"))
			put(t, c, "p1", 100, on("seg-a"))
			if codes := c.NotifyOffloaded("b", "ep-b", "dir", []string{"p0", "p1"}, []uint64{100, 100}, nil); codes[0] != wire.OK {
				t.Fatalf("offload: %v", codes)
			}
		}, PrefixHit{pc(2, 2, 2), []HostPrefix{{"seg-a", pc(2, 2, 0)}, {"seg-b", pc(2, 0, 2)}}}},
		{"disk copy of a client with no segment", func(t *testing.T, c *Core, _ *fakeClock) {
			c.cfg.EnableOffload = true
			put(t, c, "p0", 100, on("seg-a"))
			if codes := c.NotifyOffloaded("d", "ep-d", "dir", []string{"p0"}, []uint64{100}, nil); codes[0] != wire.OK {
				t.Fatalf("offload: %v", codes)
			}
		}, PrefixHit{pc(1, 1, 1), []HostPrefix{{"ep-d", pc(1, 0, 1)}, {"seg-a", pc(1, 1, 0)}}}},
		{"host and device memory", func(t *testing.T, c *Core, _ *fakeClock) {
			// A GPU segment (its Location names the device); no GPU is
			// touched: the core only reads the descriptor.
			if _, err := c.MountSegment(wire.SegmentDesc{Name: "gpu-g", ClientID: "g", Size: 1 << 20, Location: "cuda:0"}, nil); err != nil {
				t.Fatal(err)
			}
			put(t, c, "p0", 100, wire.ReplicaConfig{Preferred: []string{"gpu-g", "seg-a"}, ReplicaNum: 2})
			put(t, c, "p1", 100, on("gpu-g"))
			put(t, c, "p2", 100, on("seg-a"))
		}, PrefixHit{pcDev(3, 1, 2), []HostPrefix{{"gpu-g", pcDev(2, 0, 2)}, {"seg-a", pcDev(1, 1, 0)}}}},
		{"the holder of a page expired", func(t *testing.T, c *Core, clk *fakeClock) {
			put(t, c, "p0", 100, on("seg-a"))
			put(t, c, "p1", 100, on("seg-b"))
			put(t, c, "p2", 100, on("seg-a"))
			for range 12 { // b falls silent past ClientTTL
				clk.Advance(time.Second)
				c.Ping("a")
				c.Tick()
			}
		}, PrefixHit{pc(1, 1, 0), []HostPrefix{{"seg-a", pc(1, 1, 0)}}}},
		{"the first page removed", func(t *testing.T, c *Core, _ *fakeClock) {
			for _, k := range pages {
				put(t, c, k, 100, on("seg-a"))
			}
			if codes := c.Remove([]string{"p0"}, false); codes[0] != wire.OK {
				t.Fatalf("remove: %v", codes[0])
			}
		}, PrefixHit{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, clk := newTestCore(t)
			mount(t, c, "a", "seg-a", 1<<20)
			mount(t, c, "b", "seg-b", 1<<20)
			tc.setup(t, c, clk)
			if got := c.PrefixLookup(pages); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("PrefixLookup = %+v\n                 want %+v", got, tc.want)
			}
		})
	}
}

// A router's lookup is not a use: it grants no lease, so the page can be
// removed at once, and it leaves the eviction order alone.
func TestPrefixLookupGrantsNoLease(t *testing.T) {
	c, _ := newTestCore(t)
	mount(t, c, "a", "seg-a", 1<<20)
	put(t, c, "p0", 100, on("seg-a"))
	before, _ := c.QueryKey("p0")
	if hit := c.PrefixLookup(pages); hit.Matched != 1 {
		t.Fatalf("matched %d, want 1", hit.Matched)
	}
	if after, _ := c.QueryKey("p0"); !after.LeaseUntil.Equal(before.LeaseUntil) {
		t.Fatalf("lease moved from %v to %v", before.LeaseUntil, after.LeaseUntil)
	}
	if codes := c.Remove([]string{"p0"}, false); codes[0] != wire.OK {
		t.Fatalf("remove after the lookup: %v", codes[0])
	}
}

// The walk allocates the answer (the first page's hosts) and nothing per key.
func TestPrefixLookupAllocatesPerHostNotPerKey(t *testing.T) {
	c, _ := newTestCore(t)
	mount(t, c, "a", "seg-a", 1<<24)
	keys := make([]string, 100)
	for i := range keys {
		keys[i] = fmt.Sprint("page-", i)
		put(t, c, keys[i], 100, on("seg-a"))
	}
	var hit PrefixHit
	allocs := testing.AllocsPerRun(100, func() { hit = c.PrefixLookup(keys) })
	if hit.Matched != 100 || allocs > 2 {
		t.Fatalf("matched %d with %.0f allocations, want 100 with at most 2 (hosts and their runs)", hit.Matched, allocs)
	}
}

// TestPrefixLookupRacesWrites runs lookups while the same pages are put,
// removed, persisted and their segment unmounted (with -race it checks the
// walk's reads under the shard locks): every answer stays within its
// request and its hosts' counts within the total.
func TestPrefixLookupRacesWrites(t *testing.T) {
	c, _ := newTestCore(t)
	c.cfg.EnableOffload = true
	mount(t, c, "a", "seg-a", 1<<22)
	mountTier(t, c, "b", "seg-b", 1<<22)
	keys := make([]string, 64)
	for i := range keys {
		keys[i] = fmt.Sprint("page-", i)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				k := keys[(n*7+g)%len(keys)]
				switch n % 4 {
				case 0, 1:
					if res, _ := c.PutStart("w", "", []string{k}, []uint64{64}, wire.ReplicaConfig{ReplicaNum: 1 + n%2}); res[0].Code == wire.OK {
						c.PutEnd("w", []string{k}, nil)
					}
				case 2:
					c.NotifyOffloaded("b", "disk-b", "dir", []string{k}, []uint64{64}, nil)
				case 3:
					c.Remove([]string{k}, true)
				}
			}
		}()
	}
	// Until 2000 lookups have run, 200 of them finding pages (the writers
	// start slower than the lookups), or 10 s.
	found := 0
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; (i < 2000 || found < 200) && time.Now().Before(deadline); i++ {
		if i == 1000 {
			c.UnmountSegment("a", "seg-a")
		}
		hit := c.PrefixLookup(keys)
		if hit.Matched > 0 {
			found++
		}
		if hit.Matched > len(keys) || hit.Memory > hit.Matched || hit.Disk > hit.Matched {
			t.Fatalf("answer out of bounds: %+v", hit)
		}
		for _, h := range hit.Hosts {
			if h.Matched > hit.Matched || h.Memory > h.Matched || h.Disk > h.Matched {
				t.Fatalf("host %s out of bounds: %+v", h.Host, hit)
			}
		}
	}
	close(stop)
	wg.Wait()
	if found < 200 {
		t.Fatalf("%d lookups found a page in 10 s: the race was not run", found)
	}
}
