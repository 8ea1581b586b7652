package main

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gostore/gostore/gostore/wire"
)

func TestGrowthExponent(t *testing.T) {
	for _, c := range []struct {
		n1, t1, n2, t2, want float64
	}{
		{1e5, 2, 1e6, 20, 1},      // linear
		{1e5, 3, 1e7, 3, 0},       // flat
		{1e5, 1, 1e6, 100, 2},     // quadratic
		{1e6, 10.3, 4e6, 41.2, 1}, // the 4x objects, 4x time
		{1e6, 8, 1e5, 0.8, 1},     // sizes in either order
	} {
		if got := growth(c.n1, c.t1, c.n2, c.t2); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("growth(%v, %v, %v, %v) = %v, want %v", c.n1, c.t1, c.n2, c.t2, got, c.want)
		}
	}
	// Missing figures and equal sizes give no exponent, not a number.
	for _, c := range [][4]float64{{1e5, 0, 1e6, 1}, {1e5, 1, 1e6, 0}, {1e5, 1, 1e5, 2}, {0, 1, 1e6, 1}, {1e5, math.NaN(), 1e6, 1}} {
		if got := growth(c[0], c[1], c[2], c[3]); !math.IsNaN(got) {
			t.Errorf("growth%v = %v, want NaN", c, got)
		}
	}
}

func TestPercentileNearestRank(t *testing.T) {
	ds := make([]time.Duration, 100)
	for i := range ds { // 100 ms .. 1 ms: unsorted on purpose
		ds[i] = time.Duration(100-i) * time.Millisecond
	}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{50, 50 * time.Millisecond}, {99, 99 * time.Millisecond}, {100, 100 * time.Millisecond}, {1, time.Millisecond}, {0.1, time.Millisecond}} {
		if got := percentile(ds, c.p); got != c.want {
			t.Errorf("p%v of 1..100 ms = %v, want %v", c.p, got, c.want)
		}
	}
	// 10 values: p99 is the largest (rank ceil(9.9) = 10), p90 the 9th.
	ten := []time.Duration{7, 3, 9, 1, 10, 2, 8, 4, 6, 5}
	if got := percentile(ten, 99); got != 10 {
		t.Errorf("p99 of 1..10 = %v, want 10", got)
	}
	if got := percentile(ten, 90); got != 9 {
		t.Errorf("p90 of 1..10 = %v, want 9", got)
	}
	if got := percentile(nil, 99); got != 0 {
		t.Errorf("p99 of nothing = %v, want 0", got)
	}
	l := summarize([]time.Duration{time.Millisecond, 11 * time.Millisecond, 10 * time.Millisecond, 30 * time.Millisecond})
	if l.Calls != 4 || l.Over10ms != 2 || l.MaxUS != 30000 || l.P50US != 10000 {
		t.Errorf("summarize = %+v, want 4 calls, 2 over 10 ms, max 30000 us, p50 10000 us", l)
	}
}

func TestMeanKeyBytes(t *testing.T) {
	for _, n := range []int{1, 999, 12345} {
		total := 0
		for i := range n {
			total += len(keyOf(i))
		}
		if got, want := meanKeyBytes(n), float64(total)/float64(n); math.Abs(got-want) > 1e-9 {
			t.Errorf("meanKeyBytes(%d) = %v, want %v", n, got, want)
		}
	}
	// Past 10^8 the block number takes nine digits.
	if got, want := meanKeyBytes(2e8), 27.5; got != want {
		t.Errorf("meanKeyBytes(2e8) = %v, want %v", got, want)
	}
}

// TestEvictFixedAmount checks the driver: a pass on a core made with
// evictionRatio(want, n) frees about want objects whatever n is, and the
// count it reports is the objects that are really gone.
func TestEvictFixedAmount(t *testing.T) {
	if got := evictionRatio(1000, 100000); got != 0.01 {
		t.Errorf("evictionRatio(1000, 1e5) = %v, want 0.01", got)
	}
	if got := evictionRatio(1000, 10); got != 1 {
		t.Errorf("evictionRatio(1000, 10) = %v, want 1 (everything)", got)
	}
	if got := evictionRatio(1000, 0); got != 0 {
		t.Errorf("evictionRatio(1000, 0) = %v, want 0", got)
	}
	for _, n := range []int{5000, 20000} {
		const want, passes = 300, 2
		clk := &fakeClock{}
		c := newCore(clk, evictionRatio(want, n))
		if err := fillCore(c, n); err != nil {
			t.Fatal(err)
		}
		clk.advance(24 * time.Hour)
		e := evictFixed(c, want, passes)
		gone := 0
		keys := make([]string, n)
		for i := range keys {
			keys[i] = keyOf(i)
		}
		for _, code := range c.Exist(keys) {
			if code != wire.OK {
				gone++
			}
		}
		if e.Evicted != gone {
			t.Errorf("n=%d: the driver counted %d evicted, %d keys are gone", n, e.Evicted, gone)
		}
		// A pass places its cut from the candidates' ages: allow 20%.
		if per := float64(gone) / passes; per < 0.8*want || per > 1.2*want {
			t.Errorf("n=%d: %.0f objects per pass, want about %d", n, per, want)
		}
		if e.Passes != passes || !(e.PassMS > 0) || !(e.PerObjUS > 0) {
			t.Errorf("n=%d: figures %+v", n, e)
		}
	}
}

// TestHarnessTiny runs the whole benchmark at 2000 objects with the real
// gostore-master: every phase happens (a snapshot is seen, both restarts
// answer an old key), nothing is missed, and the table shows the size.
func TestHarnessTiny(t *testing.T) {
	if testing.Short() {
		t.Skip("builds gostore-master and runs it")
	}
	bin, err := buildMaster(t.TempDir())
	if err != nil {
		t.Fatalf("building gostore-master: %v", err)
	}
	const n = 2000
	runs, err := measure([]int{n}, options{master: bin, evictWant: 100, evictPasses: 2,
		interval: 300 * time.Millisecond, baseline: 200 * time.Millisecond, lookupFor: 20 * time.Millisecond,
		lease: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	e, c := runs[0].E2E, runs[0].Core
	if !e.SnapshotSeen || e.SnapshotBytes <= 0 || !(e.SnapshotS > -0.05) {
		t.Errorf("no snapshot seen after the restart: %+v", e)
	}
	if e.FalseMisses != 0 || e.Errors != 0 || e.Baseline.Calls == 0 || e.Snapshot.Calls == 0 {
		t.Errorf("reads: %+v", e)
	}
	if !(e.RestartS > 0) || !(e.RestartJournalS > 0) || e.StateBytes < e.SnapshotBytes {
		t.Errorf("restarts: %+v", e)
	}
	if e.MasterPeakRSS < 1<<20 {
		t.Errorf("master peak RSS %d bytes: not read", e.MasterPeakRSS)
	}
	if !(e.MemcpyS > 0) || !(e.WriteFsyncS > 0) || !(e.ReadStateS > 0) {
		t.Errorf("limits: %+v", e)
	}
	if !(c.HeapPerObject > 0) || !(c.GetReplicasNS > 0) || !(c.ExistNS > 0) || !(c.BareMapNS > 0) || c.Eviction.Evicted == 0 {
		t.Errorf("in process: %+v", c)
	}
	out := table(runs).String()
	if !strings.Contains(out, "N=2000") || !strings.Contains(out, "restart: kill -9 -> first old get") {
		t.Errorf("table:\n%s", out)
	}
}

// TestTableMissingPart: a size whose end-to-end part failed shows "-" for
// those figures (JSON null), keeps its in-process ones, and says why.
func TestTableMissingPart(t *testing.T) {
	runs := []run{
		{Objects: 1000, Core: &coreFigures{HeapPerObject: 200, GetReplicasNS: 100}, E2E: &e2eFigures{RestartS: 1}},
		{Objects: 10000, Core: &coreFigures{HeapPerObject: 200, GetReplicasNS: 100}, Error: "fill: RPC_TIMEOUT"},
	}
	tab := table(runs)
	out := tab.String()
	if !strings.Contains(out, "not measured: N=1e4: fill: RPC_TIMEOUT") {
		t.Errorf("the failure is not shown:\n%s", out)
	}
	for _, f := range tab.rows {
		switch f.Name {
		case "restart: kill -9 -> first old get":
			if f.Values[0] != 1 || !math.IsNaN(float64(f.Values[1])) || !math.IsNaN(float64(f.Growth[0])) {
				t.Errorf("restart row %v %v, want 1, NaN, no growth", f.Values, f.Growth)
			}
		case "heap per object beyond the key":
			if f.Values[1] != 200 || f.Growth[0] != 0 {
				t.Errorf("heap row %v %v, want 200 at both sizes, growth 0", f.Values, f.Growth)
			}
		}
	}
	b, err := json.Marshal(tab.rows)
	if err != nil || !strings.Contains(string(b), `"values":[1,null]`) {
		t.Errorf("JSON %s (%v): want a missing value as null", b, err)
	}
}

// TestProjectTo1e8: a figure at 10^7 carried to 10^8 at its growth.
func TestProjectTo1e8(t *testing.T) {
	for _, c := range []struct{ f, n, g, want float64 }{
		{2, 1e7, 1, 20},      // linear: 10x the objects, 10x the time
		{2, 1e7, 0, 2},       // flat
		{3, 1e6, 2, 30000},   // quadratic over 100x
		{150, 1e8, 1.5, 150}, // measured there already
	} {
		if got := project(c.f, c.n, c.g); math.Abs(got-c.want) > 1e-9*c.want {
			t.Errorf("project(%v, %v, %v) = %v, want %v", c.f, c.n, c.g, got, c.want)
		}
	}
	if got := project(2, 1e7, math.NaN()); !math.IsNaN(got) {
		t.Errorf("no growth: %v, want NaN", got)
	}
	md := markdownTable([]run{
		{Objects: 1e5, Core: &coreFigures{HeapPerObject: 200}, E2E: &e2eFigures{RestartS: 0.5}},
		{Objects: 1e6, Core: &coreFigures{HeapPerObject: 200}, E2E: &e2eFigures{RestartS: 5}},
	})
	if !strings.Contains(md, "| figure | 1e5 | 1e6 | growth, two largest sizes measured |") ||
		!strings.Contains(md, "| restart: kill -9 -> first old get (s) | 0.5 | 5 | 1.00 | 500 |") ||
		!strings.Contains(md, "| heap per object beyond the key (B) | 200 | 200 | 0.00 | 200 |") {
		t.Errorf("markdown:\n%s", md)
	}
	// A largest size whose end-to-end part failed: the growth and the
	// projection come from the two sizes before it.
	md = markdownTable([]run{
		{Objects: 1e5, Core: &coreFigures{HeapPerObject: 200}, E2E: &e2eFigures{RestartS: 0.5}},
		{Objects: 1e6, Core: &coreFigures{HeapPerObject: 200}, E2E: &e2eFigures{RestartS: 5}},
		{Objects: 1e7, Core: &coreFigures{HeapPerObject: 200}, Error: "killed"},
	})
	if !strings.Contains(md, "| restart: kill -9 -> first old get (s) | 0.5 | 5 | - | 1.00 | 500 |") {
		t.Errorf("markdown with a failed part:\n%s", md)
	}
}

// TestMasterOverRSSIsKilled: a master above -max-master-rss is killed and
// the failure says so; the in-process part of that size still runs.
func TestMasterOverRSSIsKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("builds gostore-master and runs it")
	}
	bin, err := buildMaster(t.TempDir())
	if err != nil {
		t.Fatalf("building gostore-master: %v", err)
	}
	runs, err := measure([]int{500}, options{master: bin, evictWant: 10, evictPasses: 1,
		interval: time.Hour, baseline: 100 * time.Millisecond, lookupFor: 5 * time.Millisecond,
		lease: 5 * time.Second, maxRSS: 1 << 20}) // any Go process has more
	if err == nil || !strings.Contains(err.Error(), "over -max-master-rss-gb=0.0") {
		t.Fatalf("err = %v, want the master killed for its RSS", err)
	}
	if len(runs) != 1 || runs[0].E2E != nil || runs[0].Core == nil || !strings.Contains(runs[0].Error, "killed") {
		t.Errorf("runs = %+v, want no end-to-end figures, the in-process ones, and the reason", runs)
	}
}
