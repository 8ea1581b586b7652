package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strings"
)

// figure is one row of the table: a value per size, the growth exponent
// between consecutive sizes (nil where it means nothing), and the goal.
type figure struct {
	Name   string  `json:"name"`
	Unit   string  `json:"unit"`
	Values []value `json:"values"`
	Growth []value `json:"growth,omitempty"`
	Goal   string  `json:"goal,omitempty"`
	Limit  bool    `json:"limit,omitempty"` // a physical limit, beside the figure above it
}

// value is a figure that may be missing (NaN: not measured, or no
// exponent): JSON null then, "-" in the table.
type value float64

func (v value) MarshalJSON() ([]byte, error) {
	if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
		return []byte("null"), nil
	}
	return json.Marshal(float64(v))
}

type scaleTable struct {
	sizes  []int
	rows   []figure
	errors []string // what could not be measured, per size
}

// table lays the runs out as rows of figures.
func table(runs []run) scaleTable {
	t := scaleTable{}
	for _, r := range runs {
		t.sizes = append(t.sizes, r.Objects)
		if r.Error != "" {
			t.errors = append(t.errors, fmt.Sprintf("N=%s: %s", short(r.Objects), r.Error))
		}
	}
	// A size whose end-to-end or in-process part failed has no figures
	// there: missing panics in v are turned into NaN by the accessors.
	add := func(name, unit, goal string, limit, grows bool, v func(r run) float64) {
		f := figure{Name: name, Unit: unit, Goal: goal, Limit: limit}
		for _, r := range runs {
			f.Values = append(f.Values, value(measured(r, v)))
		}
		if grows {
			for i := 1; i < len(runs); i++ {
				f.Growth = append(f.Growth, value(growth(float64(runs[i-1].Objects), float64(f.Values[i-1]),
					float64(runs[i].Objects), float64(f.Values[i]))))
			}
		}
		t.rows = append(t.rows, f)
	}
	e := func(r run) *e2eFigures { return r.E2E }
	c := func(r run) *coreFigures { return r.Core }
	// End to end, the real binary.
	add("get p99, no snapshot running", "us", "", false, true, func(r run) float64 { return e(r).Baseline.P99US })
	add("worst get overlapping a snapshot", "us", "<= 2x p99; no wait > 10 ms", false, true, func(r run) float64 { return e(r).Snapshot.MaxUS })
	add("  worst / p99", "x", "<= 2", false, false, func(r run) float64 { return e(r).WorstOverP99 })
	add("  gets over 10 ms during it", "calls", "0", false, false, func(r run) float64 { return float64(e(r).Snapshot.Over10ms) })
	add("false misses (not found, key exists)", "calls", "0", false, false, func(r run) float64 { return float64(e(r).FalseMisses) })
	add("answers later than their lease", "calls", "0", false, false, func(r run) float64 { return float64(e(r).OverLease) })
	add("snapshot: started -> file in place", "s", "", false, true, func(r run) float64 { return e(r).SnapshotS })
	add("snapshot: .tmp seen -> in place", "s", "", false, true, func(r run) float64 { return e(r).SnapshotFileS })
	add("snapshot file", "MB", "", false, true, func(r run) float64 { return float64(e(r).SnapshotBytes) / 1e6 })
	add("memcpy of the snapshot's bytes", "s", "", true, true, func(r run) float64 { return e(r).MemcpyS })
	add("write + 1 fsync of its bytes", "s", "", true, true, func(r run) float64 { return e(r).WriteFsyncS })
	add("restart: kill -9 -> first old get", "s", "<= 5 s at 10^7, growth <= 1", false, true, func(r run) float64 { return e(r).RestartS })
	add("  same, all in the journal", "s", "", false, true, func(r run) float64 { return e(r).RestartJournalS })
	add("state directory", "MB", "", false, true, func(r run) float64 { return float64(e(r).StateBytes) / 1e6 })
	add("read the state dir (warm cache)", "s", "", true, true, func(r run) float64 { return e(r).ReadStateS })
	add("fill: batched puts over RPC, journal on", "keys/s", "", false, false, func(r run) float64 { return e(r).FillKeysPS })
	add("  slowest put call of the fill", "s", "", false, true, func(r run) float64 { return e(r).FillWorstS })
	add("master peak RSS (VmHWM)", "MB", "", false, true, func(r run) float64 { return float64(e(r).MasterPeakRSS) / 1e6 })
	add("  per object", "B", "", false, true, func(r run) float64 { return float64(e(r).MasterPeakRSS) / float64(r.Objects) })
	// In process, master.Core.
	add("heap per object beyond the key", "B", "<= 150", false, true, func(r run) float64 { return c(r).HeapPerObject })
	add("  mean key", "B", "", false, false, func(r run) float64 { return c(r).KeyBytes })
	add("GetReplicas, one random key", "ns", "10^7 <= 1.2x 10^5", false, true, func(r run) float64 { return c(r).GetReplicasNS })
	add("Exist, one random key", "ns", "10^7 <= 1.2x 10^5", false, true, func(r run) float64 { return c(r).ExistNS })
	add("bare map[string]*obj lookup", "ns", "", true, true, func(r run) float64 { return c(r).BareMapNS })
	if len(runs) > 0 && runs[0].Core != nil {
		first := c(runs[0]).GetReplicasNS
		add("  GetReplicas vs the smallest size", "x", "<= 1.2", false, false, func(r run) float64 { return c(r).GetReplicasNS / first })
	}
	add("eviction pass freeing a fixed amount", "ms", "flat (growth 0)", false, true, func(r run) float64 { return c(r).Eviction.PassMS })
	add("  per evicted object", "us", "<= 1", false, true, func(r run) float64 { return c(r).Eviction.PerObjUS })
	add("  evicted per pass", "objects", "", false, false, func(r run) float64 {
		return float64(c(r).Eviction.Evicted) / float64(max(c(r).Eviction.Passes, 1))
	})
	return t
}

func (t scaleTable) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "\nthe master at scale: growth = log(t2/t1)/log(N2/N1) between sizes (0 flat, 1 linear); \"limit:\" rows are the physical limit of the row above, same run\n")
	fmt.Fprintf(&b, "%-42s %-7s", "figure", "unit")
	for _, n := range t.sizes {
		fmt.Fprintf(&b, " %11s", "N="+short(n))
	}
	for i := 1; i < len(t.sizes); i++ {
		fmt.Fprintf(&b, " %9s", "growth")
	}
	fmt.Fprintf(&b, "  goal\n")
	for _, f := range t.rows {
		name := f.Name
		if f.Limit {
			name = "  limit: " + strings.TrimSpace(name)
		}
		fmt.Fprintf(&b, "%-42s %-7s", name, f.Unit)
		for _, v := range f.Values {
			fmt.Fprintf(&b, " %11s", num(float64(v)))
		}
		for i := 1; i < len(t.sizes); i++ {
			g := "-"
			if i-1 < len(f.Growth) && !math.IsNaN(float64(f.Growth[i-1])) {
				g = fmt.Sprintf("%.2f", f.Growth[i-1])
			}
			fmt.Fprintf(&b, " %9s", g)
		}
		fmt.Fprintf(&b, "  %s\n", f.Goal)
	}
	for _, e := range t.errors {
		fmt.Fprintf(&b, "not measured: %s\n", e)
	}
	return b.String()
}

// measured is v(r), or NaN where r lacks the part v reads.
func measured(r run, v func(r run) float64) (out float64) {
	defer func() {
		if recover() != nil {
			out = math.NaN()
		}
	}()
	return v(r)
}

// short writes 100000 as 1e5 and 2000 as 2000.
func short(n int) string {
	for k := 2; k <= 12; k++ {
		if n == pow10(k) {
			return fmt.Sprintf("1e%d", k)
		}
	}
	return fmt.Sprint(n)
}

func num(v float64) string {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return "-"
	case v == 0:
		return "0"
	case math.Abs(v) >= 1e7:
		return fmt.Sprintf("%.3g", v)
	case math.Abs(v) >= 1000:
		return fmt.Sprintf("%.0f", v)
	default:
		return fmt.Sprintf("%.3g", v)
	}
}

// journalRow is one row of bench/master's journal section (its JSON).
type journalRow struct {
	Mode    string  `json:"mode"`
	Batch   int     `json:"batch"`
	Callers int     `json:"callers"`
	KeysPS  float64 `json:"keys_per_s"`
	OfOff   float64 `json:"share_of_off"` // this mode's rate / the journal-off rate, same shape
}

type journalTable struct {
	From string       `json:"from"`
	Rows []journalRow `json:"rows"`
	Note string       `json:"note,omitempty"`
}

// journalRates reads bench/master's journal rows (make bench runs it just
// before this command) and puts each beside the journal-off rate of the
// same shape, measured in the same run there.
func journalRates(path string) journalTable {
	t := journalTable{From: path}
	b, err := os.ReadFile(path)
	var res struct {
		Journal []journalRow `json:"journal"`
	}
	if err == nil {
		err = json.Unmarshal(b, &res)
	}
	if err != nil || len(res.Journal) == 0 {
		t.Note = fmt.Sprintf("no journal rows in %s (go run ./bench/master --json %s measures them): %v", path, path, err)
		return t
	}
	for _, r := range res.Journal {
		for _, o := range res.Journal {
			if o.Mode == "off" && o.Batch == r.Batch && o.Callers == r.Callers && o.KeysPS > 0 {
				r.OfOff = r.KeysPS / o.KeysPS
			}
		}
		t.Rows = append(t.Rows, r)
	}
	return t
}

func (t journalTable) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "\njournal on/off put rates (bench/master's journal section, from %s; goal: batched >= 80%%, single >= 50%% of off)\n", t.From)
	if t.Note != "" {
		fmt.Fprintln(&b, t.Note)
		return b.String()
	}
	fmt.Fprintf(&b, "%-22s %6s %8s %14s %8s\n", "journal", "batch", "callers", "keys/s", "of off")
	for _, r := range t.Rows {
		fmt.Fprintf(&b, "%-22s %6d %8d %14.0f %7.0f%%\n", r.Mode, r.Batch, r.Callers, r.KeysPS, 100*r.OfOff)
	}
	return b.String()
}
