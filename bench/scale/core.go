package main

import (
	"math"
	"math/rand/v2"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/gostore/gostore/bench/internal/corefill"
	"github.com/gostore/gostore/gostore/master"
	"github.com/gostore/gostore/gostore/wire"
)

// objectSize is every benchmark object's size: small, so the pool never
// fills and nothing but the benchmark's own driver evicts.
const objectSize = 64

// keyOf is the i-th benchmark key: the shape of an engine's KV pages.
func keyOf(i int) string { return corefill.KeyOf(i) }

// meanKeyBytes is the mean length of keyOf(0..n-1), computed, not sampled.
func meanKeyBytes(n int) float64 {
	if n <= 0 {
		return 0
	}
	total := 0
	for digits, lo := 8, 0; lo < n; digits++ {
		hi := min(n, pow10(digits))
		total += (hi - lo) * (len("model/layer00/block") + digits)
		lo = hi
	}
	return float64(total) / float64(n)
}

func pow10(k int) int {
	p := 1
	for range k {
		p *= 10
	}
	return p
}

// fakeClock is the core's injected clock: eviction needs leases over
// without waiting for them.
type fakeClock struct{ ns atomic.Int64 }

func (f *fakeClock) now() time.Time          { return time.Unix(0, f.ns.Load()) }
func (f *fakeClock) advance(d time.Duration) { f.ns.Add(int64(d)) }

// coreFigures are the in-process figures at one size.
type coreFigures struct {
	Objects int     `json:"objects"`
	FillS   float64 `json:"fill_s"`
	// HeapPerObject: live heap after GC, per object, beyond the key's
	// bytes (KeyBytes, the mean key length).
	HeapPerObject float64 `json:"heap_bytes_per_object_beyond_key"`
	KeyBytes      float64 `json:"key_bytes"`
	// Lookups of one random existing key, ns per call; BareMapNS is a
	// map[string]*bareObject of the same keys: the limit.
	GetReplicasNS float64      `json:"get_replicas_ns"`
	ExistNS       float64      `json:"exist_ns"`
	BareMapNS     float64      `json:"bare_map_ns"`
	Eviction      evictFigures `json:"eviction"`
}

// evictFigures: passes that each free about Want objects.
type evictFigures struct {
	Want     int     `json:"want_per_pass"`
	Passes   int     `json:"passes"`
	Evicted  int     `json:"evicted"`
	PassMS   float64 `json:"ms_per_pass"`
	PerObjUS float64 `json:"us_per_evicted_object"`
}

// newCore is a core with four large segments (each with a grant key, so
// reads sign grants as for real clients) on the fake clock.
func newCore(clk *fakeClock, evictRatio float64) *master.Core {
	c := master.New(master.Config{ClientTTL: 1000 * time.Hour, Now: clk.now, EvictionRatio: evictRatio})
	for i := range 4 {
		key := make([]byte, 32)
		key[0] = byte(i + 1)
		c.MountSegment(wire.SegmentDesc{Name: "127.0.0.1:" + strconv.Itoa(20000+i), ClientID: "w", Size: 64 << 30}, key)
	}
	return c
}

// fillCore puts objects [0, n) in batches, as PutStart+PutEnd.
func fillCore(c *master.Core, n int) error { return corefill.Fill(c, n, objectSize) }

// sampleKeys returns m keys of [0, n) in random order (repeats allowed).
func sampleKeys(n, m int, r *rand.Rand) []string {
	out := make([]string, m)
	for i := range out {
		out[i] = keyOf(r.IntN(n))
	}
	return out
}

// timeLookups is the mean ns of f over the sample in the best of five
// rounds of d/5 each: on a shared machine the least disturbed round is the
// closest to what a lookup costs.
func timeLookups(sample []string, d time.Duration, f func(key string)) float64 {
	best := math.Inf(1)
	for range 5 {
		calls := 0
		start := time.Now()
		for calls == 0 || time.Since(start) < d/5 {
			for _, k := range sample {
				f(k)
			}
			calls += len(sample)
		}
		best = min(best, float64(time.Since(start).Nanoseconds())/float64(calls))
	}
	return best
}

// liveHeap is the heap in use by live objects after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	debug.FreeOSMemory()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// inProcess measures the core at n objects: fill, heap per object,
// lookups beside a bare map, and eviction passes of evictWant objects.
// Everything it allocates is garbage when it returns.
func inProcess(n, evictWant, evictPasses int, lookupFor time.Duration) (coreFigures, error) {
	f := coreFigures{Objects: n, KeyBytes: meanKeyBytes(n)}
	r := rand.New(rand.NewPCG(uint64(n), 33))
	sample := sampleKeys(n, 1<<16, r)
	clk := &fakeClock{}
	clk.ns.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())

	before := liveHeap()
	c := newCore(clk, evictionRatio(evictWant, n))
	start := time.Now()
	if err := fillCore(c, n); err != nil {
		return f, err
	}
	f.FillS = time.Since(start).Seconds()
	after := liveHeap()
	f.HeapPerObject = (float64(after)-float64(before))/float64(n) - f.KeyBytes

	f.GetReplicasNS = timeLookups(sample, lookupFor, func(k string) {
		if res := c.GetReplicas([]string{k}, true); res[0].Code != wire.OK {
			panic("GetReplicas missed an existing key: " + k)
		}
	})
	f.ExistNS = timeLookups(sample, lookupFor, func(k string) {
		if c.Exist([]string{k})[0] != wire.OK {
			panic("Exist missed an existing key: " + k)
		}
	})

	// Leases and holds over: every object is evictable.
	clk.advance(24 * time.Hour)
	f.Eviction = evictFixed(c, evictWant, evictPasses)
	c = nil
	runtime.GC()

	m := bareMap(n)
	f.BareMapNS = timeLookups(sample, lookupFor, func(k string) {
		if o := m[k]; o == nil || o.size != objectSize {
			panic("bare map missed " + k)
		}
	})
	runtime.KeepAlive(m)
	return f, nil
}

// evictFixed runs passes eviction passes on a core created with
// evictionRatio(want, its object count) and reports the median pass time
// and that time per object a pass freed on average. A pass that frees
// nothing still counts (its time is what a pass costs when nothing can go).
func evictFixed(c *master.Core, want, passes int) evictFigures {
	e := evictFigures{Want: want, Passes: passes}
	times := make([]time.Duration, 0, passes)
	for range passes {
		start := time.Now()
		res := c.Evict()
		times = append(times, time.Since(start))
		e.Evicted += res.Objects
	}
	med := percentile(times, 50)
	e.PassMS = float64(med.Nanoseconds()) / 1e6
	if e.Evicted > 0 {
		e.PerObjUS = float64(med.Nanoseconds()) / 1e3 / (float64(e.Evicted) / float64(passes))
	}
	return e
}

// bareObject is what a bare map's entry points to: a lookup that reads
// it pays the same pointer chase as the core's.
type bareObject struct{ size, lastUse int64 }

// bareMap is the limit of a lookup: the keys in one Go map.
func bareMap(n int) map[string]*bareObject {
	m := make(map[string]*bareObject, n)
	for i := range n {
		m[keyOf(i)] = &bareObject{size: objectSize}
	}
	return m
}
