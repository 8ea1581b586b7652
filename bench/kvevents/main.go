// Command kvevents measures the master's KV events (make bench;
// docs/master-flags.md, "KV events"): what they cost puts, with
// --enable_kv_events off and on in the same run (the modes alternate,
// -rounds times each), and how many events per second the master
// publishes under that load, as a real ZeroMQ subscriber receives them,
// with the events dropped from the queue beside. Beside them, the limits
// measured in the same run: the core's queue alone (push and drain, no
// socket) and the publisher alone (a queue filled in advance, drained,
// encoded and sent to a subscriber on loopback). It prints a table and,
// with -json, writes the figures. It never fails on a number.
//
// Each master runs in a child process (this program with -serve), its
// four 64 GiB segments never touched (objects of 4 KiB, PutStart and
// PutEnd over RPC, as bench/master's "PutStart+PutEnd" rows).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/gostore/gostore/bench/internal/child"
	"github.com/gostore/gostore/gostore/master"
	"github.com/gostore/gostore/gostore/master/server"
	"github.com/gostore/gostore/gostore/rpc"
	"github.com/gostore/gostore/gostore/wire"
)

type putRow struct {
	Events  string  `json:"events"` // off, on
	Batch   int     `json:"batch"`
	Callers int     `json:"callers"`
	KeysPS  float64 `json:"keys_per_s"` // the best round
	// CPUUSPerKey: the master process's CPU time (user + system, its
	// whole life) per key put, the best round: what a put costs the
	// master, which a loaded machine's throughput hides.
	CPUUSPerKey float64 `json:"master_cpu_us_per_key"`
	// Published: events the subscriber received per second of the load
	// (on only), and the events the queue dropped for room.
	EventsPS float64 `json:"events_received_per_s,omitempty"`
	Dropped  uint64  `json:"events_dropped,omitempty"`
	Received uint64  `json:"events_received,omitempty"`
	Produced uint64  `json:"events_produced,omitempty"`
}

type result struct {
	Rows []putRow `json:"puts"`
	// Limits: the queue alone (events pushed then drained per second,
	// one pusher) and the publisher alone (events per second a
	// subscriber receives from a full queue).
	QueuePS     float64 `json:"queue_events_per_s"`
	PublisherPS float64 `json:"publisher_events_per_s"`
	// PublisherKeptUp: the publisher kept up with the core's in-process
	// puts, so PublisherPS is a lower bound of its rate.
	PublisherKeptUp bool   `json:"publisher_kept_up"`
	Rounds          int    `json:"rounds"`
	GOMAXPROCS      int    `json:"gomaxprocs"`
	Time            string `json:"time"`
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-serve" {
		serve(os.Args[2:])
		return
	}
	jsonOut := flag.String("json", "", "write results here")
	dur := flag.Duration("duration", 2*time.Second, "time per measurement")
	rounds := flag.Int("rounds", 2, "rounds of each mode (off, on alternate)")
	limitsOnly := flag.Bool("limits", false, "measure the limits only")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the limits here")
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			panic(err)
		}
		pprof.StartCPUProfile(f)
	}

	res := result{Rounds: *rounds, GOMAXPROCS: runtime.GOMAXPROCS(0), Time: time.Now().UTC().Format(time.RFC3339)}
	res.QueuePS = queueLimit()
	res.PublisherPS, res.PublisherKeptUp = publisherLimit()
	if *cpuProfile != "" {
		pprof.StopCPUProfile()
	}
	if *limitsOnly {
		print(res)
		return
	}
	for _, shape := range []struct{ batch, callers int }{{1, 64}, {128, 8}} {
		best := map[bool]putRow{}
		for r := 0; r < 2**rounds; r++ {
			on := r%2 == 1
			row := putRound(*dur, shape.batch, shape.callers, on)
			b := best[on]
			if row.KeysPS > b.KeysPS {
				cpu := b.CPUUSPerKey
				b = row
				if cpu > 0 && cpu < row.CPUUSPerKey {
					b.CPUUSPerKey = cpu
				}
			} else if row.CPUUSPerKey < b.CPUUSPerKey {
				b.CPUUSPerKey = row.CPUUSPerKey
			}
			best[on] = b
		}
		res.Rows = append(res.Rows, best[false], best[true])
	}
	print(res)
	if *jsonOut != "" {
		b, _ := json.MarshalIndent(res, "", "  ")
		os.WriteFile(*jsonOut, b, 0o644)
	}
}

func print(res result) {
	fmt.Printf("KV events (GOMAXPROCS %d, best of %d rounds per mode, modes alternating)\n", res.GOMAXPROCS, res.Rounds)
	fmt.Printf("%-7s %6s %8s %14s %16s %18s %10s\n", "events", "batch", "callers", "put keys/s", "master CPU µs/key", "events recv/s", "dropped")
	for _, r := range res.Rows {
		ev, dr := "", ""
		if r.Events == "on" {
			ev, dr = fmt.Sprintf("%.0f", r.EventsPS), fmt.Sprintf("%d/%d", r.Dropped, r.Produced)
		}
		fmt.Printf("%-7s %6d %8d %14.0f %16.2f %18s %10s\n", r.Events, r.Batch, r.Callers, r.KeysPS, r.CPUUSPerKey, ev, dr)
	}
	for i := 0; i+1 < len(res.Rows); i += 2 {
		off, on := res.Rows[i], res.Rows[i+1]
		fmt.Printf("batch %d: puts with events on at %.1f%% of off; the master's CPU per key %+.2f µs (%+.0f%%)\n", off.Batch,
			100*on.KeysPS/off.KeysPS, on.CPUUSPerKey-off.CPUUSPerKey, 100*(on.CPUUSPerKey/off.CPUUSPerKey-1))
	}
	bound := ""
	if res.PublisherKeptUp {
		bound = "at least " // it kept up with the core's in-process puts
	}
	fmt.Printf("limits: queue alone %.0f events/s; publisher alone (encode + PUB to one subscriber) %s%.0f events/s\n",
		res.QueuePS, bound, res.PublisherPS)
}

// serve runs a master (-serve [pub-endpoint]): events on when an endpoint
// is given. It prints its RPC and HTTP addresses, then serves until its
// stdin closes.
func serve(args []string) {
	// No polling for a connection's next request (--rpc_spin_us=0): its
	// CPU would count per second, not per put.
	flags := []string{"--rpc_address=127.0.0.1", "--rpc_port=0", "--metrics_port=0", "--log_level=error", "--client_ttl=3600",
		"--rpc_spin_us=0"}
	if len(args) > 0 {
		flags = append(flags, "--enable_kv_events", "--kv_events_bind_endpoint="+args[0], "--kv_events_backend_id=bench")
	}
	opts, err := server.ParseFlags(flags, nil)
	if err != nil {
		panic(err)
	}
	srv, err := server.Start(opts)
	if err != nil {
		panic(err)
	}
	for i := range 4 {
		srv.Core().MountSegment(wire.SegmentDesc{Name: "seg" + strconv.Itoa(i), ClientID: "c" + strconv.Itoa(i), Size: 64 << 30}, nil)
	}
	if path := os.Getenv("KVEVENTS_SERVE_PROFILE"); path != "" && len(args) > 0 {
		f, err := os.Create(path)
		if err == nil {
			pprof.StartCPUProfile(f)
			defer pprof.StopCPUProfile()
		}
	}
	fmt.Println(srv.Addr(), srv.HTTPAddr())
	io.Copy(io.Discard, os.Stdin)
	srv.Close()
}

func freeEndpoint() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer ln.Close()
	return "tcp://" + ln.Addr().String()
}

// subscriber counts the events of the batches it receives.
type subscriber struct {
	sock   zmq4.Socket
	events atomic.Uint64
	done   chan struct{}
}

func subscribe(ctx context.Context, ep string) *subscriber {
	s := &subscriber{sock: zmq4.NewSub(ctx), done: make(chan struct{})}
	if err := s.sock.Dial(ep); err != nil {
		panic(err)
	}
	s.sock.SetOption(zmq4.OptionSubscribe, "")
	go func() {
		defer close(s.done)
		for {
			msg, err := s.sock.Recv()
			if err != nil {
				return
			}
			if len(msg.Frames) == 3 {
				s.events.Add(uint64(batchLen(msg.Frames[2])))
			}
		}
	}()
	return s
}

// batchLen reads how many events a batch holds, [ts, [events...], rank].
func batchLen(payload []byte) int {
	d := msgpack.NewDecoder(strings.NewReader(string(payload)))
	if _, err := d.DecodeArrayLen(); err != nil {
		return 0
	}
	if err := d.Skip(); err != nil {
		return 0
	}
	n, _ := d.DecodeArrayLen()
	return n
}

// putRound starts a master (events on or off), runs puts for d and, with
// events on, counts what a subscriber received.
func putRound(d time.Duration, batch, callers int, on bool) (row putRow) {
	row = putRow{Events: "off", Batch: batch, Callers: callers}
	var args []string
	ep := ""
	if on {
		row.Events = "on"
		ep = freeEndpoint()
		args = []string{ep}
	}
	addr, httpAddr, stop := startServer(args...)
	defer func() {
		if cpu := stop(); row.KeysPS > 0 {
			row.CPUUSPerKey = float64(cpu.Microseconds()) / float64(row.Produced)
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clients := make([]*rpc.Client, callers)
	for i := range clients {
		clients[i] = rpc.NewClientWith(addr, rpc.ClientOptions{})
		defer clients[i].Close()
	}
	var seq atomic.Int64
	put := func(cl *rpc.Client, prefix string) int {
		base := seq.Add(int64(batch)) - int64(batch)
		keys := make([]string, batch)
		sizes := make([]uint64, batch)
		for j := range keys {
			keys[j], sizes[j] = prefix+strconv.FormatInt(base+int64(j), 10), 4096
		}
		var ps wire.PutStartResp
		cl.Call(ctx, wire.OpPutStart, &wire.PutStartReq{ClientID: "w", Keys: keys, Sizes: sizes}, &ps)
		cl.Call(ctx, wire.OpPutEnd, &wire.KeysReq{ClientID: "w", Keys: keys}, &wire.CodesResp{})
		return batch
	}
	var sub *subscriber
	var before uint64
	if on {
		sub = subscribe(ctx, ep)
		// A SUB socket hears nothing before its subscription reached the
		// publisher: put until an event arrives.
		for deadline := time.Now().Add(10 * time.Second); sub.events.Load() == 0 && time.Now().Before(deadline); {
			put(clients[0], "probe/")
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(200 * time.Millisecond)
		before = sub.events.Load()
	}
	seq.Store(0)
	start := time.Now()
	deadline := start.Add(d)
	var total atomic.Int64
	var wg sync.WaitGroup
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := 0
			for time.Now().Before(deadline) {
				n += put(clients[g], "k/")
			}
			total.Add(int64(n))
		}()
	}
	wg.Wait()
	took := time.Since(start)
	row.KeysPS = float64(total.Load()) / took.Seconds()
	row.Produced = uint64(total.Load())
	if on {
		// Wait for the publisher to catch up: received and dropped account
		// for every event produced, or nothing more arrives for a second.
		last, lastAt := sub.events.Load(), time.Now()
		for {
			st := status(httpAddr)
			got := sub.events.Load() - before
			if got+st.DroppedEvents >= row.Produced || time.Since(lastAt) > time.Second {
				row.Received, row.Dropped = got, st.DroppedEvents
				break
			}
			if n := sub.events.Load(); n != last {
				last, lastAt = n, time.Now()
			}
			time.Sleep(20 * time.Millisecond)
		}
		row.EventsPS = float64(row.Received) / time.Since(start).Seconds()
		sub.sock.Close()
	}
	return row
}

type kvStatus struct {
	PublishedEvents uint64 `json:"published_events"`
	DroppedEvents   uint64 `json:"dropped_events"`
}

func status(httpAddr string) kvStatus {
	var st kvStatus
	r, err := http.Get("http://" + httpAddr + "/kv_events/status")
	if err != nil {
		return st
	}
	defer r.Body.Close()
	json.NewDecoder(r.Body).Decode(&st)
	return st
}

// startServer runs a master in a child process (args after -serve) and
// returns its addresses and how to stop it (which returns the CPU time it
// used).
func startServer(args ...string) (string, string, func() time.Duration) {
	p, f, err := child.Start(args...)
	if err != nil || len(f) < 2 {
		panic(fmt.Sprintf("master child: %v, printed %q", err, f))
	}
	return f[0], f[1], p.Stop
}

// queueLimit: events pushed and drained (64 at a time) per second through
// the core's queue, one goroutine each.
func queueLimit() float64 {
	const n = 2_000_000
	q := master.NewEventQueue(65536)
	done := make(chan struct{})
	var got int
	start := time.Now()
	go func() {
		defer close(done)
		var buf []master.Event
		for got < n {
			buf, _ = q.Drain(buf[:0], 64)
			got += len(buf)
			if len(buf) == 0 {
				runtime.Gosched()
			}
		}
	}()
	e := master.Event{Kind: master.EventStored, Medium: master.MediumCPU, Key: "k/123456"}
	for range n {
		q.Push(e)
	}
	for q.Len() > 0 || got+int(q.Dropped()) < n {
		select {
		case <-done:
		default:
			runtime.Gosched()
			continue
		}
		break
	}
	return float64(n) / time.Since(start).Seconds()
}

// publisherLimit: a master's publisher (server.Start with events on, no
// puts) is handed a queue of events in advance, by the core of a master
// in this process; a subscriber counts them. The figure is events
// received per second, from the first to the last.
func publisherLimit() (float64, bool) {
	ep := freeEndpoint()
	opts, err := server.ParseFlags([]string{"--rpc_address=127.0.0.1", "--rpc_port=0", "--metrics_port=-1",
		"--log_level=error", "--enable_kv_events", "--kv_events_bind_endpoint=" + ep, "--kv_events_backend_id=bench",
		"--kv_events_queue_capacity=0", "--client_ttl=3600"}, nil)
	if err != nil {
		panic(err)
	}
	opts.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := server.Start(opts)
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	c := srv.Core()
	c.MountSegment(wire.SegmentDesc{Name: "seg", ClientID: "c", Size: 64 << 30}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sub := subscribe(ctx, ep)
	defer sub.sock.Close()
	putKeys := func(prefix string, n int) {
		keys := make([]string, n)
		sizes := make([]uint64, n)
		for i := range keys {
			keys[i], sizes[i] = prefix+strconv.Itoa(i), 64
		}
		c.PutStart("w", "", keys, sizes, wire.ReplicaConfig{})
		c.PutEnd("w", keys, nil)
	}
	for deadline := time.Now().Add(10 * time.Second); sub.events.Load() == 0 && time.Now().Before(deadline); {
		putKeys("probe/"+strconv.FormatInt(time.Now().UnixNano(), 10)+"/", 1)
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	before := sub.events.Load()
	const n = 500_000
	// The core makes the events as fast as it puts in-process (no RPC):
	// faster than any client reaches it. The publisher either falls
	// behind (a backlog in the queue, unbounded here: the figure is its
	// own rate, counted from the moment the last event was made) or keeps
	// up (the figure is a lower bound: the rate they were made at).
	start := time.Now()
	for i := 0; i < n; i += 10_000 {
		putKeys("k/"+strconv.Itoa(i)+"/", 10_000)
	}
	made, madeAt := sub.events.Load(), time.Now()
	lastAt, last := madeAt, made
	for sub.events.Load()-before < n && time.Since(lastAt) < 2*time.Second {
		if v := sub.events.Load(); v != last {
			lastAt, last = time.Now(), v
		}
		time.Sleep(time.Millisecond)
	}
	if backlog := before + n - made; backlog > n/10 {
		return float64(last-made) / lastAt.Sub(madeAt).Seconds(), false
	}
	return float64(last-before) / lastAt.Sub(start).Seconds(), true
}
