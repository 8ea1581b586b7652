// Command prefix measures the master's prefix lookup for routers (make
// bench; docs/operations.md, "Prefix lookup for routers"): requests of 100
// pages, every page stored, against a master holding -objects objects
// (10^6 by default), as queries per second and latency (p50, p99) with one
// caller and with several. Beside them, the limits measured in the same
// run: the same lookups on the core in-process (what HTTP and JSON add to),
// an empty HTTP round trip to the same server (GET /health: what the
// connection and the server's routing cost alone) and the request's JSON
// decoded and the answer encoded in-process. It prints a table and, with
// -json, writes the figures. It never fails on a number.
//
// The HTTP rows' master runs in a child process (this program with
// -serve: server.Start on loopback, no authentication), so its garbage
// collector pays for its own garbage only, not for the callers'; the core
// rows run on a core in this process, dropped before the child starts.
// Each core is filled directly (PutStart+PutEnd in batches, objects of 64
// bytes on four 64 GiB segments that are never touched), as bench/scale
// does: 10^6 objects take about 400 MB.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/gostore/gostore/bench/internal/child"
	"github.com/gostore/gostore/bench/internal/corefill"
	"github.com/gostore/gostore/gostore/master"
	"github.com/gostore/gostore/gostore/master/server"
	"github.com/gostore/gostore/gostore/wire"
)

// pagesPerRequest is the request size the issue asks about.
const pagesPerRequest = 100

// keyOf is the i-th object's key: the shape of an engine's KV pages (as
// bench/scale's).
func keyOf(i int) string { return corefill.KeyOf(i) }

type row struct {
	Name    string  `json:"name"`
	Callers int     `json:"callers"`
	QPS     float64 `json:"queries_per_s"`
	P50US   float64 `json:"p50_us"`
	P99US   float64 `json:"p99_us"`
}

type result struct {
	Objects    int     `json:"objects"`
	Pages      int     `json:"pages_per_request"`
	FillS      float64 `json:"fill_s"`
	GOMAXPROCS int     `json:"gomaxprocs"`
	Rows       []row   `json:"rows"`
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-serve" {
		n, _ := strconv.Atoi(os.Args[2])
		if err := serve(n); err != nil {
			fmt.Fprintln(os.Stderr, "bench/prefix -serve:", err)
			os.Exit(1)
		}
		return
	}
	jsonOut := flag.String("json", "", "write results here")
	objects := flag.Int("objects", 1_000_000, "objects the master holds")
	dur := flag.Duration("duration", 2*time.Second, "time per measurement")
	callers := flag.Int("callers", 2*runtime.GOMAXPROCS(0), "concurrent callers of the loaded rows")
	flag.Parse()
	if err := run(*objects, *dur, *callers, *jsonOut); err != nil {
		fmt.Fprintln(os.Stderr, "bench/prefix:", err)
		os.Exit(1)
	}
}

// measurement is one row's operation, run for both caller counts.
type measurement struct {
	name string
	f    func(request) error
}

func run(n int, dur time.Duration, callers int, jsonOut string) error {
	if n < pagesPerRequest {
		return fmt.Errorf("-objects %d: at least %d", n, pagesPerRequest)
	}
	res := result{Objects: n, Pages: pagesPerRequest, GOMAXPROCS: runtime.GOMAXPROCS(0)}
	reqs := requests(n, 1024)
	measureAll := func(ms ...measurement) error {
		for _, m := range ms {
			for _, c := range []int{1, callers} {
				r, err := measure(m.name, c, dur, reqs, m.f)
				if err != nil {
					return err
				}
				res.Rows = append(res.Rows, r)
			}
		}
		return nil
	}

	// The limits in this process: the core alone, then JSON alone.
	core := master.New(master.Config{ClientTTL: 1000 * time.Hour})
	start := time.Now()
	if err := fill(core, n); err != nil {
		return err
	}
	res.FillS = time.Since(start).Seconds()
	if err := measureAll(measurement{"core PrefixLookup (limit)", func(q request) error {
		if hit := core.PrefixLookup(q.keys); hit.Matched != pagesPerRequest {
			return fmt.Errorf("core matched %d of %d pages", hit.Matched, pagesPerRequest)
		}
		return nil
	}}); err != nil {
		return err
	}
	core = nil
	runtime.GC()
	answer, _ := json.Marshal(map[string]any{"longest_matched": 100, "GPU": 0, "CPU": 100, "DISK": 0,
		"instances": map[string]any{"127.0.0.1:20000": map[string]int{"longest_matched": 100, "GPU": 0, "CPU": 100, "DISK": 0}}})
	if err := measureAll(measurement{"JSON decode+encode (limit)", func(q request) error {
		var in struct {
			Keys []string `json:"keys"`
		}
		if err := json.Unmarshal(q.body, &in); err != nil || len(in.Keys) != pagesPerRequest {
			return fmt.Errorf("decode: %v", err)
		}
		var out map[string]any
		json.Unmarshal(answer, &out)
		_, err := json.Marshal(out)
		return err
	}}); err != nil {
		return err
	}

	// Over HTTP to a master in its own process.
	base, stop, err := startServer(n)
	if err != nil {
		return err
	}
	defer stop()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4 * callers}}
	if err := measureAll(measurement{"HTTP GET /health (limit)", func(request) error {
		resp, err := client.Get(base + "/health")
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return nil
	}}, measurement{"HTTP POST /query_prefix", func(q request) error {
		resp, err := client.Post(base+"/query_prefix", "application/json", bytes.NewReader(q.body))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var ans struct {
			LongestMatched int `json:"longest_matched"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&ans); err != nil || resp.StatusCode != 200 {
			return fmt.Errorf("/query_prefix: %d %v", resp.StatusCode, err)
		}
		if ans.LongestMatched != pagesPerRequest {
			return fmt.Errorf("/query_prefix matched %d of %d pages", ans.LongestMatched, pagesPerRequest)
		}
		return nil
	}}); err != nil {
		return err
	}
	print(res)
	if jsonOut != "" {
		b, _ := json.MarshalIndent(res, "", "  ")
		return os.WriteFile(jsonOut, append(b, '\n'), 0o644)
	}
	return nil
}

// serve is the child: a master holding n objects, its HTTP address on
// stdout, until stdin closes.
func serve(n int) error {
	o, err := server.ParseFlags([]string{"--rpc_address=127.0.0.1", "--rpc_port=0", "--metrics_port=0",
		"--log_level=error", "--client_ttl=86400"}, nil)
	if err != nil {
		return err
	}
	s, err := server.Start(o)
	if err != nil {
		return err
	}
	defer s.Close()
	if err := fill(s.Core(), n); err != nil {
		return err
	}
	runtime.GC() // the fill's garbage is not the lookups'
	fmt.Println("http://" + s.HTTPAddr())
	io.Copy(io.Discard, os.Stdin)
	return nil
}

// startServer runs serve in a child process and returns its HTTP base
// address and how to stop it.
func startServer(n int) (string, func(), error) {
	p, f, err := child.Start(strconv.Itoa(n))
	if err != nil {
		return "", nil, err
	}
	if len(f) < 1 {
		p.Stop()
		return "", nil, fmt.Errorf("the master child printed no address")
	}
	return f[0], func() { p.Stop() }, nil
}

// fill puts objects [0, n) on four segments, in batches.
func fill(c *master.Core, n int) error {
	for i := range 4 {
		if _, err := c.MountSegment(wire.SegmentDesc{Name: "127.0.0.1:" + strconv.Itoa(20000+i), ClientID: "w", Size: 64 << 30}, nil); err != nil {
			return err
		}
	}
	return corefill.Fill(c, n, 64)
}

// request is one lookup: 100 consecutive stored pages from a random start,
// as keys and as the JSON body a router posts.
type request struct {
	keys []string
	body []byte
}

func requests(n, m int) []request {
	r := rand.New(rand.NewPCG(uint64(n), 36))
	out := make([]request, m)
	for i := range out {
		first := r.IntN(n - pagesPerRequest + 1)
		keys := make([]string, pagesPerRequest)
		for j := range keys {
			keys[j] = keyOf(first + j)
		}
		body, _ := json.Marshal(map[string]any{"keys": keys})
		out[i] = request{keys: keys, body: body}
	}
	return out
}

// measure runs f from callers goroutines for d, each timing every call,
// and returns the calls per second and the latencies' p50 and p99.
func measure(name string, callers int, d time.Duration, reqs []request, f func(request) error) (row, error) {
	lat := make([][]time.Duration, callers)
	errs := make([]error, callers)
	var wg sync.WaitGroup
	start := time.Now()
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; time.Since(start) < d; i++ {
				t := time.Now()
				if err := f(reqs[i%len(reqs)]); err != nil {
					errs[g] = err
					return
				}
				lat[g] = append(lat[g], time.Since(t))
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	for _, err := range errs {
		if err != nil {
			return row{}, fmt.Errorf("%s: %w", name, err)
		}
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	return row{Name: name, Callers: callers, QPS: float64(len(all)) / took.Seconds(),
		P50US: us(pct(all, 50)), P99US: us(pct(all, 99))}, nil
}

// pct is the p-th percentile of sorted ds by the nearest-rank method.
func pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(ds))))
	return ds[min(max(rank, 1), len(ds))-1]
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

func print(r result) {
	fmt.Printf("\nprefix lookup: %d-page requests, every page stored, %d objects (filled in %.1f s), GOMAXPROCS=%d\n",
		r.Pages, r.Objects, r.FillS, r.GOMAXPROCS)
	fmt.Printf("%-30s %8s %12s %10s %10s\n", "measurement", "callers", "queries/s", "p50 µs", "p99 µs")
	for _, x := range r.Rows {
		fmt.Printf("%-30s %8d %12.0f %10.1f %10.1f\n", x.Name, x.Callers, x.QPS, x.P50US, x.P99US)
	}
}
