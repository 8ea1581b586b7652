// Command master measures the master's metadata throughput (make bench):
// the core in-process, the same operations over RPC from several callers,
// one eviction pass over a million objects, and master memory per object.
// It prints a table and, with -json, writes the figures. It never fails on
// a number.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gostore/gostore/bench/internal/child"
	"github.com/gostore/gostore/gostore/master"
	"github.com/gostore/gostore/gostore/master/server"
	"github.com/gostore/gostore/gostore/rpc"
	"github.com/gostore/gostore/gostore/wire"
	"golang.org/x/sys/unix"
)

type row struct {
	Name    string  `json:"name"`
	Where   string  `json:"where"`
	Batch   int     `json:"batch"`
	Callers int     `json:"callers"`
	KeysPS  float64 `json:"keys_per_s"`
	CallsPS float64 `json:"calls_per_s"`
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-serve" {
		serve() // the master half of the RPC figures, in its own process
		return
	}
	jsonOut := flag.String("json", "", "write results here")
	quick := flag.Bool("quick", false, "smaller runs")
	objects := flag.Int("objects", 1_000_000, "objects for the eviction and memory figures")
	readsOnly := flag.Bool("reads-only", false, "only the one-key get cost with the tiers' features off and on")
	flag.Parse()
	if *readsOnly {
		for _, r := range readCost(3 * time.Second) {
			fmt.Printf("%-22s %10.0f gets/s %8.0f ns/get\n", r.Name, r.KeysPS, 1e9/r.KeysPS)
		}
		return
	}
	dur := 2 * time.Second
	if *quick {
		dur = 500 * time.Millisecond
		*objects = 200_000
	}
	var rows []row
	rows = append(rows, inProcess(dur)...)
	rows = append(rows, readCost(dur)...)
	rows = append(rows, overRPC(dur)...)
	evictMS, bytesPerObject, rssPerObject := evictionAndMemory(*objects)
	jrows, disk := journalCost(dur)

	fmt.Printf("\nmaster metadata throughput (GOMAXPROCS=%d)\n", runtime.GOMAXPROCS(0))
	fmt.Printf("%-22s %-10s %6s %8s %14s %12s\n", "operation", "where", "batch", "callers", "keys/s", "calls/s")
	for _, r := range rows {
		fmt.Printf("%-22s %-10s %6d %8d %14.0f %12.0f\n", r.Name, r.Where, r.Batch, r.Callers, r.KeysPS, r.CallsPS)
	}
	printJournalCost(jrows, disk)
	fmt.Printf("\neviction pass over %d objects: %.1f ms (target < 200 ms)\n", *objects, evictMS)
	fmt.Printf("master memory per object at %d objects: %.0f bytes of heap in use, %.0f bytes of RSS growth (target <= 300)\n",
		*objects, bytesPerObject, rssPerObject)
	best := func(where string, batch int) float64 {
		m := 0.0
		for _, r := range rows {
			if strings.HasPrefix(r.Where, where) && r.Batch == batch && r.KeysPS > m && r.Name != "PutStart+PutEnd" {
				m = r.KeysPS
			}
		}
		return m
	}
	fmt.Printf("targets: single ops over RPC %.0f/s (>= 150k), batches of 128 over RPC %.0f keys/s (>= 1M)\n",
		best("rpc", 1), best("rpc", 128))
	if *jsonOut != "" {
		b, _ := json.MarshalIndent(map[string]any{"rows": rows, "journal": jrows, "fsyncs_per_s": disk.FsyncPS, "fdatasyncs_per_s": disk.FdatasyncPS,
			"eviction_ms": evictMS, "objects": *objects,
			"bytes_per_object": bytesPerObject, "rss_bytes_per_object": rssPerObject, "gomaxprocs": runtime.GOMAXPROCS(0), "time": time.Now().UTC()}, "", "  ")
		os.WriteFile(*jsonOut, b, 0o644)
	}
}

func newCore() *master.Core {
	c := master.New(master.Config{ClientTTL: time.Hour})
	for i := range 4 {
		c.MountSegment(wire.SegmentDesc{Name: "seg" + strconv.Itoa(i), ClientID: "c" + strconv.Itoa(i), Size: 64 << 30}, grantKey(i))
	}
	return c
}

// grantKey is segment i's grant key: with one, the master signs a grant
// for every replica it hands out, as it does for real clients.
func grantKey(i int) []byte {
	k := make([]byte, 32)
	k[0] = byte(i + 1)
	return k
}

// keys returns n distinct keys of a realistic shape.
func keys(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s/layer%02d/block%08d", prefix, i%61, i)
	}
	return out
}

// runFor calls f from callers goroutines until d passes; f returns keys done.
func runFor(d time.Duration, callers int, f func(g int, i int) int) float64 {
	var total atomic.Int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(d)
	start := time.Now()
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := 0
			for i := 0; time.Now().Before(deadline); i++ {
				n += f(g, i)
			}
			total.Add(int64(n))
		}()
	}
	wg.Wait()
	return float64(total.Load()) / time.Since(start).Seconds()
}

func inProcess(d time.Duration) []row {
	c := newCore()
	callers := runtime.GOMAXPROCS(0)
	var rows []row
	for _, batch := range []int{1, 128} {
		ks := make([][]string, callers)
		sizes := make([]uint64, batch)
		for i := range sizes {
			sizes[i] = 4096
		}
		var seq atomic.Int64
		kps := runFor(d, callers, func(g, i int) int {
			base := seq.Add(int64(batch)) - int64(batch)
			b := make([]string, batch)
			for j := range b {
				b[j] = "p/" + strconv.FormatInt(base+int64(j), 10)
			}
			ks[g] = b
			c.PutStart("w", "", b, sizes, wire.ReplicaConfig{})
			c.PutEnd("w", b, nil)
			return batch
		})
		rows = append(rows, row{"PutStart+PutEnd", "in-process", batch, callers, kps, kps / float64(batch)})
		existing := keys("p", 0)
		for i := range 100_000 {
			existing = append(existing, "p/"+strconv.Itoa(i))
		}
		for _, op := range []string{"GetReplicas", "Exist"} {
			kps := runFor(d, callers, func(g, i int) int {
				off := (i * batch * 7919) % (len(existing) - batch)
				b := existing[off : off+batch]
				if op == "Exist" {
					c.Exist(b)
				} else {
					c.GetReplicas(b, false)
				}
				return batch
			})
			rows = append(rows, row{op, "in-process", batch, callers, kps, kps / float64(batch)})
		}
	}
	return rows
}

// readCost is one-key GetReplicas in process, one caller, over 100k
// objects read in a skewed order (a tenth of the keys take nine reads in
// ten), with the read-following features off and on: what they add to
// every read. The configurations take turns, three rounds, and each
// reports its best round: a shared machine's noise only slows a round.
func readCost(d time.Duration) []row {
	cases := []struct {
		name string
		cfg  master.Config
	}{
		{"get, tiers off", master.Config{}},
		{"get, promotion on", master.Config{EnableOffload: true, Promotion: master.Promotion{PromotionOnHit: true}}},
		{"get, dyn. observe", master.Config{DynamicReplication: master.DynamicReplication{DynamicReplicationMode: master.DynamicReplicationObserve}}},
		{"get, dyn. enforce", master.Config{DynamicReplication: master.DynamicReplication{DynamicReplicationMode: master.DynamicReplicationEnforce}}},
	}
	ks := keys("r", 100_000)
	cores := make([]*master.Core, len(cases))
	for n, tc := range cases {
		cfg := tc.cfg
		cfg.ClientTTL = time.Hour
		c := master.New(cfg)
		for i := range 4 {
			c.MountSegment(wire.SegmentDesc{Name: "seg" + strconv.Itoa(i), ClientID: "c" + strconv.Itoa(i), Size: 64 << 30}, grantKey(i))
		}
		for i := 0; i < len(ks); i += 128 {
			b := ks[i:min(i+128, len(ks))]
			sizes := make([]uint64, len(b))
			for j := range sizes {
				sizes[j] = 4096
			}
			c.PutStart("w", "", b, sizes, wire.ReplicaConfig{})
			c.PutEnd("w", b, nil)
		}
		cores[n] = c
	}
	best := make([]float64, len(cases))
	for range 3 {
		for n, c := range cores {
			next := time.Now()
			kps := runFor(d/3, 1, func(_, i int) int {
				k := (i * 7919) % len(ks)
				if i%10 != 0 {
					k %= len(ks) / 10
				}
				c.GetReplicas(ks[k:k+1], false)
				if i%256 == 0 && time.Now().After(next) {
					c.Tick() // as the master's default tick_interval_ms: hot replicas start at ticks
					next = time.Now().Add(100 * time.Millisecond)
				}
				return 1
			})
			best[n] = max(best[n], kps)
		}
	}
	var rows []row
	for n, tc := range cases {
		rows = append(rows, row{tc.name, "in-process", 1, 1, best[n], best[n]})
	}
	return rows
}

// serve runs a master for overRPC in this process (started by overRPC as a
// child, so that caller and master are separate processes as in a real
// deployment) and prints its address.
func serve() {
	opts, _ := server.ParseFlags([]string{"--rpc_address=127.0.0.1", "--rpc_port=0", "--metrics_port=-1", "--log_level=error", "--client_ttl=3600"}, nil)
	for _, a := range os.Args[2:] { // -state=DIR: journal there; -ack: acknowledge before the sync
		if dir, ok := strings.CutPrefix(a, "-state="); ok {
			opts.StateDir = dir
		}
		opts.AckBeforeSync = opts.AckBeforeSync || a == "-ack"
	}
	srv, err := server.Start(opts)
	if err != nil {
		panic(err)
	}
	for i := range 4 {
		srv.Core().MountSegment(wire.SegmentDesc{Name: "seg" + strconv.Itoa(i), ClientID: "c" + strconv.Itoa(i), Size: 64 << 30}, grantKey(i))
	}
	fmt.Println(srv.Addr())
	io.Copy(io.Discard, os.Stdin) // until the parent closes our stdin
	srv.Close()
}

func overRPC(d time.Duration) []row {
	addr, stop := startServer()
	defer stop()
	var rows []row
	// Three ways to call: calls pipelined over two shared connections
	// (muxClient, for many concurrent callers), and one connection per
	// caller read with blocking syscalls (the client library's choice for
	// calls from Python) or through the netpoller.
	mux, err := dialMux(addr, 2)
	if err != nil {
		panic(err)
	}
	defer mux.Close()
	rows = append(rows, rpcRows(d, mux, "rpc-pipelined")...)
	for _, mode := range []struct {
		where string
		opt   rpc.ClientOptions
	}{{"rpc-blocking", rpc.ClientOptions{}}, {"rpc-netpoll", rpc.ClientOptions{Netpoll: true}}} {
		cl := rpc.NewClientWith(addr, mode.opt)
		rows = append(rows, rpcRows(d, cl, mode.where)...)
		cl.Close()
	}
	return rows
}

// startServer runs a master in a child process (args after -serve) and
// returns its address and how to stop it.
func startServer(args ...string) (string, func()) {
	p, f, err := child.Start(args...)
	if err != nil || len(f) < 1 {
		panic(fmt.Sprintf("master child: %v, printed %q", err, f))
	}
	return f[0], func() { p.Stop() }
}

// journalRow is one cell of the journal's cost: puts (PutStart+PutEnd of
// 4 KiB objects) against a master without a state directory, with one
// (each answer after its sync), and with one acknowledging first.
type journalRow struct {
	Mode     string  `json:"mode"`
	Batch    int     `json:"batch"`
	Callers  int     `json:"callers"`
	KeysPS   float64 `json:"keys_per_s"`
	PutUS    float64 `json:"us_per_put_call"` // PutStart+PutEnd of one batch, one caller's view
	BytesPer float64 `json:"journal_bytes_per_object,omitempty"`
	// SyncBoundPS (journal on, one caller): the most keys/s the caller
	// could get if each put call took the journal-off row's time plus one
	// sync of the log (its PutEnd's), the disk's own limit for a caller
	// that waits. Several callers share syncs: no such bound.
	SyncBoundPS float64 `json:"sync_bound_keys_per_s,omitempty"`
}

// diskLimits are the disk's own rates under the journal's directory.
type diskLimits struct {
	FsyncPS     float64 // 4 KiB append + fsync round trips per second
	FdatasyncPS float64 // 128 B write + fdatasync into a preallocated file: a put's records, as the journal writes them
}

// journalCost measures puts with the journal off, on, and on with
// acknowledgement before the sync, in one run, beside the disk's own
// limits in the same directory, measured before and after the rows (the
// better of the two: the disk is shared).
func journalCost(d time.Duration) ([]journalRow, diskLimits) {
	tmp, err := os.MkdirTemp("", "gostore-journal-bench-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(tmp)
	disk := syncRates(tmp, d/2)
	var rows []journalRow
	for _, mode := range []string{"off", "on", "on, ack before sync"} {
		dir := filepath.Join(tmp, strings.ReplaceAll(mode, " ", "_"))
		var args []string
		switch mode {
		case "on":
			args = []string{"-state=" + dir}
		case "on, ack before sync":
			args = []string{"-state=" + dir, "-ack"}
		}
		addr, stop := startServer(args...)
		ctx := context.Background()
		var written atomic.Int64
		for _, shape := range []struct{ batch, callers int }{{1, 1}, {1, 16}, {32, 1}, {128, 4}} {
			cls := make([]*rpc.Client, shape.callers)
			for i := range cls {
				cls[i] = rpc.NewClientWith(addr, rpc.ClientOptions{})
			}
			sizes := make([]uint64, shape.batch)
			for i := range sizes {
				sizes[i] = 4096
			}
			var calls atomic.Int64
			kps := runFor(d, shape.callers, func(g, i int) int {
				b := make([]string, shape.batch)
				for j := range b {
					b[j] = fmt.Sprintf("j/%d/%d/%d/%d", shape.batch, g, i, j)
				}
				var ps wire.PutStartResp
				cls[g].Call(ctx, wire.OpPutStart, &wire.PutStartReq{ClientID: "w", Keys: b, Sizes: sizes}, &ps)
				cls[g].Call(ctx, wire.OpPutEnd, &wire.KeysReq{ClientID: "w", Keys: b}, &wire.CodesResp{})
				calls.Add(1)
				written.Add(int64(shape.batch))
				return shape.batch
			})
			for _, cl := range cls {
				cl.Close()
			}
			us := 0.0
			if n := calls.Load(); n > 0 {
				us = d.Seconds() * 1e6 * float64(shape.callers) / float64(n)
			}
			rows = append(rows, journalRow{Mode: mode, Batch: shape.batch, Callers: shape.callers, KeysPS: kps, PutUS: us})
		}
		stop()
		if mode != "off" {
			// Journal bytes per object: measured before the snapshot at
			// stop folds them (the files are read after the server ends,
			// so count the log files the snapshot left plus the snapshot).
			per := float64(dirBytes(dir)) / float64(max(written.Load(), 1))
			for i := range rows {
				if rows[i].Mode == mode {
					rows[i].BytesPer = per
				}
			}
		}
	}
	after := syncRates(tmp, d/2)
	disk.FsyncPS, disk.FdatasyncPS = max(disk.FsyncPS, after.FsyncPS), max(disk.FdatasyncPS, after.FdatasyncPS)
	for i, r := range rows {
		if off := offRow(rows, r); r.Mode == "on" && r.Callers == 1 && off != nil && disk.FdatasyncPS > 0 {
			callUS := off.PutUS + 1e6/disk.FdatasyncPS
			rows[i].SyncBoundPS = float64(r.Batch) * 1e6 / callUS
		}
	}
	return rows, disk
}

// offRow is the journal-off row of r's shape.
func offRow(rows []journalRow, r journalRow) *journalRow {
	for i, o := range rows {
		if o.Mode == "off" && o.Batch == r.Batch && o.Callers == r.Callers {
			return &rows[i]
		}
	}
	return nil
}

// printJournalCost prints the journal's rows, each beside the journal-off
// row of its shape and, for the journal on, beside the disk's bound.
func printJournalCost(rows []journalRow, disk diskLimits) {
	fmt.Printf("\nthe journal's cost (--snapshot_backup_dir): 4 KiB puts, PutStart+PutEnd over RPC\n")
	fmt.Printf("limits of this disk: %.0f 4 KiB append+fsync/s, %.0f 128 B write+fdatasync/s into a preallocated file (a put's records, the journal's way)\n",
		disk.FsyncPS, disk.FdatasyncPS)
	fmt.Printf("%-22s %6s %8s %14s %14s %16s %10s %16s\n", "journal", "batch", "callers", "keys/s", "us/put call", "bytes/object", "vs off", "sync bound")
	for _, r := range rows {
		off := 0.0
		if o := offRow(rows, r); o != nil {
			off = o.KeysPS
		}
		bound := ""
		if r.SyncBoundPS > 0 {
			bound = fmt.Sprintf("%.0f (%.0f%%)", r.SyncBoundPS, 100*r.SyncBoundPS/max(off, 1))
		}
		fmt.Printf("%-22s %6d %8d %14.0f %14.1f %16.0f %9.0f%% %16s\n", r.Mode, r.Batch, r.Callers, r.KeysPS, r.PutUS, r.BytesPer,
			100*r.KeysPS/max(off, 1), bound)
	}
	fmt.Println("sync bound (one caller): the off row's call time plus one fdatasync per call (the PutEnd's answer waits " +
		"for it); a caller that waits for each put can go no faster, whatever the journal does (several callers share " +
		"syncs). \"ack before sync\" vs off is the CPU cost of journaling (encode, frame, write); the rest of the gap " +
		"of \"on\" is waiting for the disk.")
}

// syncRates measures the disk's limits in dir (see diskLimits), each for d.
func syncRates(dir string, d time.Duration) diskLimits {
	return diskLimits{FsyncPS: syncRate(dir, d, false), FdatasyncPS: syncRate(dir, d, true)}
}

// syncRate is how many write+sync round trips per second the disk under
// dir does: 4 KiB appends synced with fsync, or (prealloc) 128 B writes
// (about one put's records) into a preallocated file synced with
// fdatasync.
func syncRate(dir string, d time.Duration, prealloc bool) float64 {
	f, err := os.Create(filepath.Join(dir, "sync-probe"))
	if err != nil {
		return 0
	}
	defer os.Remove(f.Name())
	defer f.Close()
	sync := f.Sync
	if prealloc {
		if unix.Fallocate(int(f.Fd()), 0, 0, 64<<20) != nil || f.Sync() != nil {
			return 0
		}
		sync = func() error { return unix.Fdatasync(int(f.Fd())) }
	}
	buf := make([]byte, 4096)
	if prealloc {
		buf = buf[:128]
	}
	n := 0
	start := time.Now()
	for time.Since(start) < d {
		if _, err := f.Write(buf); err != nil {
			return 0
		}
		if sync() != nil {
			return 0
		}
		n++
	}
	return float64(n) / time.Since(start).Seconds()
}

func dirBytes(dir string) int64 {
	var n int64
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if info, err := e.Info(); err == nil && !e.IsDir() {
			n += info.Size()
		}
	}
	return n
}

type caller interface {
	Call(ctx context.Context, op wire.Op, req, resp any) error
}

func rpcRows(d time.Duration, cl caller, where string) []row {
	ctx := context.Background()
	var rows []row
	for _, batch := range []int{1, 128} {
		callers := 64
		if batch > 1 {
			callers = 8
		}
		sizes := make([]uint64, batch)
		for i := range sizes {
			sizes[i] = 4096
		}
		var seq atomic.Int64
		kps := runFor(d, callers, func(g, i int) int {
			base := seq.Add(int64(batch)) - int64(batch)
			b := make([]string, batch)
			for j := range b {
				b[j] = "r/" + strconv.FormatInt(base+int64(j), 10)
			}
			var ps wire.PutStartResp
			cl.Call(ctx, wire.OpPutStart, &wire.PutStartReq{ClientID: "w", Keys: b, Sizes: sizes}, &ps)
			cl.Call(ctx, wire.OpPutEnd, &wire.KeysReq{ClientID: "w", Keys: b}, &wire.CodesResp{})
			return batch
		})
		rows = append(rows, row{"PutStart+PutEnd", where, batch, callers, kps, 2 * kps / float64(batch)})
		n := int(seq.Load())
		for _, op := range []string{"GetReplicas", "Exist"} {
			wop := wire.OpGetReplicas
			if op == "Exist" {
				wop = wire.OpExist
			}
			kps := runFor(d, callers, func(g, i int) int {
				off := rand.IntN(max(n-batch, 1))
				b := make([]string, batch)
				for j := range b {
					b[j] = "r/" + strconv.Itoa(off+j)
				}
				if wop == wire.OpExist {
					cl.Call(ctx, wop, &wire.KeysReq{Keys: b}, &wire.CodesResp{})
				} else {
					cl.Call(ctx, wop, &wire.KeysReq{Keys: b}, &wire.GetReplicasResp{})
				}
				return batch
			})
			rows = append(rows, row{op, where, batch, callers, kps, kps / float64(batch)})
		}
	}
	return rows
}

// evictionAndMemory fills a core with n objects, reports the heap growth
// per object, then times one eviction pass (5% of the objects).
func evictionAndMemory(n int) (evictMS, bytesPerObject, rssPerObject float64) {
	runtime.GC()
	debug.FreeOSMemory()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	rssBefore := rss()
	c := newCore()
	const batch = 1024
	ks := make([]string, batch)
	sizes := make([]uint64, batch)
	for i := range sizes {
		sizes[i] = 4096
	}
	for done := 0; done < n; done += batch {
		m := min(batch, n-done)
		for j := range m {
			ks[j] = fmt.Sprintf("model/layer%02d/block%08d", (done+j)%61, done+j)
		}
		c.PutStart("w", "", ks[:m], sizes[:m], wire.ReplicaConfig{})
		c.PutEnd("w", ks[:m], nil)
	}
	// Return freed pages first: RSS then counts what the master retains for
	// its objects, not garbage the runtime has yet to give back.
	debug.FreeOSMemory()
	runtime.ReadMemStats(&after)
	bytesPerObject = float64(after.HeapInuse-before.HeapInuse) / float64(n)
	rssPerObject = float64(rss()-rssBefore) / float64(n)
	start := time.Now()
	res := c.Evict()
	evictMS = float64(time.Since(start).Microseconds()) / 1000
	if res.Objects == 0 {
		fmt.Fprintln(os.Stderr, "warning: the eviction pass evicted nothing")
	}
	return evictMS, bytesPerObject, rssPerObject
}

// rss is the process's resident set in bytes (/proc/self/statm).
func rss() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}
