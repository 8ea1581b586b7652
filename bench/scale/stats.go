package main

import (
	"math"
	"slices"
	"time"
)

// growth is the exponent k in t ∝ N^k between two sizes: 1 is linear, 0
// flat, 2 quadratic. NaN when either figure is missing (0 or negative) or
// the sizes are equal, so a table shows "-" instead of a made-up number.
func growth(n1, t1, n2, t2 float64) float64 {
	if !(t1 > 0) || !(t2 > 0) || !(n1 > 0) || !(n2 > 0) || n1 == n2 {
		return math.NaN()
	}
	return math.Log(t2/t1) / math.Log(n2/n1)
}

// percentile is the p-th percentile (0 < p <= 100) of ds by the
// nearest-rank method: the smallest value with at least p% of the values
// at or below it, so p99 of 100 values is the 99th smallest and p100 the
// largest. 0 for no values. ds is sorted in place.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	rank := int(math.Ceil(p / 100 * float64(len(ds))))
	return ds[min(max(rank, 1), len(ds))-1]
}

// latencies summarises one series of call latencies.
type latencies struct {
	Calls int     `json:"calls"`
	P50US float64 `json:"p50_us"`
	P99US float64 `json:"p99_us"`
	MaxUS float64 `json:"max_us"`
	// Over10ms counts the calls that waited longer than 10 ms: the issue's
	// bound on a wait caused by a snapshot, compaction or eviction.
	Over10ms int `json:"over_10ms"`
}

func summarize(ds []time.Duration) latencies {
	l := latencies{Calls: len(ds)}
	for _, d := range ds {
		if d > 10*time.Millisecond {
			l.Over10ms++
		}
	}
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	l.P50US = us(percentile(ds, 50))
	l.P99US = us(percentile(ds, 99))
	l.MaxUS = us(percentile(ds, 100))
	return l
}

// evictionRatio is the Config.EvictionRatio that makes one pass over n
// evictable objects free want of them (Mooncake's eviction_ratio is a
// share of the objects; the benchmark wants a fixed amount at every n).
func evictionRatio(want, n int) float64 {
	if n <= 0 {
		return 0
	}
	return min(1, float64(want)/float64(n))
}
