// Command scale measures the master at 10^5..10^7 objects (make bench;
// 10^7 with make bench-scale): each figure at each size, its growth
// exponent between sizes (log(t2/t1)/log(N2/N1): 0 flat, 1 linear), and
// the physical limit measured in the same run beside it.
//
// End to end, with the real gostore-master binary on a state directory
// (--snapshot_backup_dir, 64-byte objects filled by batched RPC): a
// client's gets with no snapshot possible, then through the first
// snapshot after a kill -9 and restart (the worst get beside the p99
// without one, calls over 10 ms, false misses, the snapshot's duration and
// size beside a memcpy and a sequential write + fsync of its bytes), and
// kill -9 → the first get of an old object answered, beside a sequential
// read of the state directory; the masters' peak RSS. Snapshots are seen
// as new snap-*.gsnap files in the directory, nothing internal. A master
// past -max-master-rss-gb is killed and that size's end-to-end part is
// reported as not measured.
//
// In process, on master.Core with a fake clock: heap per object beyond the
// key's bytes, lookups of random existing keys (GetReplicas, Exist)
// beside a bare Go map of the same keys, and eviction passes that each
// free a fixed number of objects. The journal's on/off put rates are
// bench/master's (its JSON is read and shown here).
//
// It prints a table and, with -json, writes the figures; -markdown turns
// such a file into docs/operations.md's Scale table, with each figure
// carried to 10^8 objects at its measured growth. It never fails on
// a number; it exits non-zero when a part could not run (after printing
// everything else).
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// run is one size's figures.
type run struct {
	Objects int          `json:"objects"`
	Core    *coreFigures `json:"in_process,omitempty"`
	E2E     *e2eFigures  `json:"end_to_end,omitempty"`
	Error   string       `json:"error,omitempty"` // a part that could not run
}

func main() {
	sizesFlag := flag.String("sizes", "100000,1000000", "object counts, comma-separated")
	jsonOut := flag.String("json", "", "write results here")
	masterBin := flag.String("master", "", "gostore-master binary (default: go build it)")
	journalJSON := flag.String("journal", "bench/master-results.json", "bench/master's results, for the journal's on/off rates")
	evictWant := flag.Int("evict", 1000, "objects one eviction pass frees")
	interval := flag.Duration("snapshot-interval", 2*time.Second, "snapshot interval of the snapshot phase")
	maxRSS := flag.Float64("max-master-rss-gb", 8, "kill a master process above this RSS (GB; 0: no bound) and report it")
	md := flag.String("markdown", "", "print docs/operations.md's Scale table from this results file, and exit")
	flag.Parse()
	if *md != "" {
		out, err := markdown(*md)
		if err != nil {
			fmt.Fprintln(os.Stderr, "scale:", err)
			os.Exit(1)
		}
		fmt.Print(out)
		return
	}
	sizes, err := parseSizes(*sizesFlag)
	if err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		os.Exit(2)
	}
	bin := *masterBin
	if bin == "" {
		dir, err := os.MkdirTemp("", "gostore-scale-bin-")
		if err != nil {
			fmt.Fprintln(os.Stderr, "scale:", err)
			os.Exit(1)
		}
		defer os.RemoveAll(dir)
		if bin, err = buildMaster(dir); err != nil {
			fmt.Fprintln(os.Stderr, "scale: building gostore-master:", err)
			os.Exit(1)
		}
	}
	runs, err := measure(sizes, options{master: bin, evictWant: *evictWant, evictPasses: 5,
		interval: *interval, baseline: 2 * time.Second, lookupFor: 500 * time.Millisecond, lease: 100 * time.Millisecond,
		maxRSS: int64(*maxRSS * 1e9), progress: os.Stderr})
	tab := table(runs) // what was measured, also when a part failed
	if len(runs) == 0 {
		fmt.Fprintln(os.Stderr, "scale:", err)
		os.Exit(1)
	}
	fmt.Print(tab.String())
	jrows := journalRates(*journalJSON)
	fmt.Print(jrows.String())
	if *jsonOut != "" {
		b, _ := json.MarshalIndent(map[string]any{"runs": runs, "table": tab.rows, "journal": jrows,
			"gomaxprocs": runtime.GOMAXPROCS(0), "time": time.Now().UTC()}, "", "  ")
		if err := os.WriteFile(*jsonOut, b, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "scale:", err)
			os.Exit(1)
		}
	}
	if err != nil {
		os.Exit(1) // a part could not run (the table says which)
	}
}

func parseSizes(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64) // 1e6 as well as 1000000
		if err != nil || v < 1 || v != math.Trunc(v) {
			return nil, fmt.Errorf("-sizes: %q is not an object count", f)
		}
		out = append(out, int(v))
	}
	return out, nil
}

// options are one measurement's knobs (the test's are tiny).
type options struct {
	master                 string
	evictWant, evictPasses int
	interval, baseline     time.Duration
	lookupFor, lease       time.Duration
	maxRSS                 int64    // bytes of RSS a master may take (0: no bound)
	progress               *os.File // where each phase is announced (nil: nowhere)
}

// measure runs every size, end to end first (the master holds the objects
// in its own process), then in process; each size's memory is garbage
// before the next starts. A part that fails is reported in its run
// (Error) and the rest goes on; the error returned joins them.
func measure(sizes []int, o options) ([]run, error) {
	var runs []run
	var errs []error
	for _, n := range sizes {
		r := run{Objects: n}
		say(o.progress, "scale: %d objects, end to end", n)
		// A restart or a snapshot takes ~1 µs..10 µs per object today:
		// the bound only catches a master that hangs.
		timeout := 60*time.Second + time.Duration(n)*60*time.Microsecond
		e, err := endToEnd(n, e2eOptions{master: o.master, interval: o.interval, baseline: o.baseline, timeout: timeout, lease: o.lease, maxRSS: o.maxRSS})
		if err != nil {
			err = fmt.Errorf("%d objects end to end: %w", n, err)
			say(o.progress, "scale: %v", err)
			r.Error, errs = err.Error(), append(errs, err)
		} else {
			r.E2E = &e
		}
		say(o.progress, "scale: %d objects, in process", n)
		c, err := inProcess(n, o.evictWant, o.evictPasses, o.lookupFor)
		if err != nil {
			err = fmt.Errorf("%d objects in process: %w", n, err)
			r.Error, errs = strings.TrimPrefix(r.Error+"; "+err.Error(), "; "), append(errs, err)
		} else {
			r.Core = &c
		}
		runs = append(runs, r)
	}
	return runs, errors.Join(errs...)
}

func say(w *os.File, format string, args ...any) {
	if w != nil {
		fmt.Fprintf(w, format+"\n", args...)
	}
}
