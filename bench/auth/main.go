// Command auth measures what authentication costs the TCP data path (make
// bench): a transfer server over a segment on 127.0.0.1 and an engine
// moving bytes to and from it, with authentication off, with a shared
// secret and with mutual TLS, in turns within one run. Beside the figures,
// the limits measured in the same run: as many raw TCP streams on
// loopback at once as the engine opens to a peer, as many TLS 1.3 streams
// (what encryption leaves), and memcpy. It prints a
// table and, with -json, writes the figures. It never fails on a number.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"slices"
	"time"

	"github.com/gostore/gostore/bench/limits"
	"github.com/gostore/gostore/gostore/auth"
	"github.com/gostore/gostore/gostore/auth/authtest"
	"github.com/gostore/gostore/gostore/transfer"
)

type row struct {
	Mode       string  `json:"mode"`
	WriteGBps  float64 `json:"write_gbps"`
	ReadGBps   float64 `json:"read_gbps"`
	Small4KP50 float64 `json:"read_4k_p50_us"`
	LimitGBps  float64 `json:"limit_gbps"` // the stream this mode's bytes ride on
}

type result struct {
	Rows       []row   `json:"rows"`
	TCPGBps    float64 `json:"loopback_tcp_gbps"`
	TLSGBps    float64 `json:"loopback_tls_gbps"`
	MemcpyGBps float64 `json:"memcpy_gbps"`
	Rounds     int     `json:"rounds"`
	OpBytes    int     `json:"op_bytes"`
	Batch      int     `json:"batch"`
}

// fatal makes authtest's helpers usable outside a test.
type fatal struct{}

func (fatal) Helper() {}
func (fatal) Fatal(args ...any) {
	fmt.Fprintln(os.Stderr, args...)
	os.Exit(1)
}

const (
	segSize = 256 << 20
	opBytes = 4 << 20
	batch   = 16
)

func main() {
	jsonOut := flag.String("json", "", "write results here")
	quick := flag.Bool("quick", false, "fewer rounds")
	flag.Parse()
	rounds, per := 5, time.Second
	if *quick {
		rounds, per = 3, 300*time.Millisecond
	}
	dir, err := os.MkdirTemp("", "gostore-bench-auth-")
	if err != nil {
		fatal{}.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ca := authtest.NewCA(fatal{}, dir, "bench")
	tlsServer := authtest.Must(fatal{}, ca.Issue(fatal{}, "owner"))
	tlsClient := authtest.Must(fatal{}, ca.Issue(fatal{}, "reader"))
	secret := authtest.Must(fatal{}, authtest.Secret(fatal{}, dir, "secret", "bench-secret-0123456789abcdef"))
	modes := []struct {
		name           string
		server, client *auth.Auth
		encrypts       bool
	}{{"off", nil, nil, false}, {"shared secret", secret, secret, false}, {"mutual TLS", tlsServer, tlsClient, true}}

	samples := make([]struct{ w, r, p50 []float64 }, len(modes))
	var tcpS, tlsS, memS []float64
	for range rounds {
		tcpS = append(tcpS, streams(nil, nil))
		tlsS = append(tlsS, streams(func(c net.Conn) (net.Conn, error) { return tlsServer.Server(c) },
			func(c net.Conn) (net.Conn, error) { return tlsClient.Client(context.Background(), c) }))
		memS = append(memS, limits.MemcpyGBps(64<<20, 8))
		for i, m := range modes {
			w, r, p50 := measure(m.server, m.client, per)
			samples[i].w = append(samples[i].w, w)
			samples[i].r = append(samples[i].r, r)
			samples[i].p50 = append(samples[i].p50, p50)
		}
	}
	res := result{TCPGBps: median(tcpS), TLSGBps: median(tlsS), MemcpyGBps: median(memS), Rounds: rounds, OpBytes: opBytes, Batch: batch}
	for i, m := range modes {
		lim := res.TCPGBps
		if m.encrypts {
			lim = res.TLSGBps
		}
		res.Rows = append(res.Rows, row{Mode: m.name, WriteGBps: median(samples[i].w), ReadGBps: median(samples[i].r),
			Small4KP50: median(samples[i].p50), LimitGBps: lim})
	}
	fmt.Printf("TCP transfers on loopback by authentication mode: batches of %d ops of %d MiB, median of %d rounds\n",
		batch, opBytes>>20, rounds)
	fmt.Printf("limits, same run, %d streams at once as the engine opens: raw TCP %.2f GB/s, TLS 1.3 %.2f GB/s; memcpy %.2f GB/s\n\n",
		transfer.DefaultStreamsPerPeer, res.TCPGBps, res.TLSGBps, res.MemcpyGBps)
	fmt.Printf("| mode | write GB/s | read GB/s | 4 KiB read p50 µs | stream limit GB/s | read/limit |\n|---|---|---|---|---|---|\n")
	for _, r := range res.Rows {
		fmt.Printf("| %s | %.2f | %.2f | %.0f | %.2f | %.0f%% |\n", r.Mode, r.WriteGBps, r.ReadGBps, r.Small4KP50,
			r.LimitGBps, 100*r.ReadGBps/max(r.LimitGBps, 1e-9))
	}
	if *jsonOut != "" {
		b, _ := json.MarshalIndent(res, "", "  ")
		if err := os.WriteFile(*jsonOut, b, 0o644); err != nil {
			fatal{}.Fatal(err)
		}
	}
}

// measure serves a fresh segment (every op carrying its grant, as the
// master would mint it) with server's auth and moves bytes to it
// and back with an engine using client's, for per each: write GB/s, read
// GB/s, and the p50 of a single 4 KiB read in µs.
func measure(server, client *auth.Auth, per time.Duration) (float64, float64, float64) {
	seg, err := transfer.NewLocalSegment("bench-auth", segSize)
	if err != nil {
		fatal{}.Fatal(err)
	}
	defer seg.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fatal{}.Fatal(err)
	}
	srv := transfer.NewServer(ln, seg.Bytes(), nil)
	srv.SetAuth(server)
	srv.SetSegID(1)
	go srv.Serve()
	defer srv.Close()
	e := transfer.NewEngine(transfer.Options{ForceTCP: true, Auth: client})
	defer e.Close()
	peer := transfer.Peer{SegID: 1, HostID: "elsewhere", TransferAddr: ln.Addr().String(), Size: segSize}
	buf := make([]byte, opBytes*batch)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	ops := func(write bool) []transfer.Op {
		out := make([]transfer.Op, batch)
		for i := range out {
			off := uint64(i * opBytes)
			out[i] = transfer.Op{Peer: peer, Offset: off, Bufs: [][]byte{buf[i*opBytes : (i+1)*opBytes]}, Write: write,
				Grant: srv.Mint(off, opBytes, write, time.Now().Add(time.Hour))}
		}
		return out
	}
	ctx := context.Background()
	rate := func(write bool) float64 {
		o := ops(write)
		check(e.Do(ctx, o)) // warm: connections, handshakes, pages
		n, start := 0, time.Now()
		for time.Since(start) < per {
			check(e.Do(ctx, o))
			n++
		}
		return float64(n*batch*opBytes) / time.Since(start).Seconds() / 1e9
	}
	w, r := rate(true), rate(false)
	small := []transfer.Op{{Peer: peer, Offset: 4096, Bufs: [][]byte{make([]byte, 4096)},
		Grant: srv.Mint(4096, 4096, false, time.Now().Add(time.Hour))}}
	var lat []float64
	start := time.Now()
	for time.Since(start) < per/2 || len(lat) < 100 {
		t := time.Now()
		check(e.Do(ctx, small))
		lat = append(lat, float64(time.Since(t).Nanoseconds())/1e3)
	}
	return w, r, median(lat)
}

// streams is the sum of DefaultStreamsPerPeer loopback streams run at
// once (each through accept and dial, as LoopbackStreamGBpsOver): the
// most the engine's connections to one peer could carry.
func streams(accept, dial func(net.Conn) (net.Conn, error)) float64 {
	k := transfer.DefaultStreamsPerPeer
	out := make(chan float64, k)
	for range k {
		go func() { out <- limits.LoopbackStreamGBpsOver(16<<20, 16, accept, dial) }()
	}
	sum := 0.0
	for range k {
		sum += <-out
	}
	return sum
}

func check(errs []error) {
	for _, err := range errs {
		if err != nil {
			fatal{}.Fatal("transfer failed:", err)
		}
	}
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
