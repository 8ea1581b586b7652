package main

import (
	"bytes"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"time"

	"github.com/gostore/gostore/gostore/client"
	"github.com/gostore/gostore/gostore/master/server"
	"github.com/gostore/gostore/gostore/storage"
	"github.com/gostore/gostore/gostore/wire"
)

// e2eResult is the tier as a user sees it: a writer puts objects through a
// holder whose segment is a small fraction of them (the master evicts
// what the holder's tier has persisted), then a reader gets them all back,
// most from the holder's disk through its staging buffer.
type e2eResult struct {
	ObjectSize   int     `json:"object_size"`
	Objects      int     `json:"objects"`
	Transport    string  `json:"transport"`
	PutGBps      float64 `json:"put_gbps"`     // writing 8x the pool, offload included
	OffloadGBps  float64 `json:"offload_gbps"` // bytes persisted per second over the same span
	GetGBps      float64 `json:"get_gbps"`
	FromDisk     int64   `json:"from_disk"` // objects the holder staged for the reader
	GetPctOfRaw  float64 `json:"get_pct_of_raw"`
	Verified     bool    `json:"verified"`
	SetupFailure string  `json:"error,omitempty"`
}

// e2e runs one end-to-end cell in dir: master, holder (bucket backend,
// io_uring) and reader in this process, over shared memory or TCP.
func e2e(dir string, size int, total int64, tcp bool) (r e2eResult) {
	r = e2eResult{ObjectSize: size, Transport: "shm"}
	if tcp {
		r.Transport = "tcp"
	}
	fail := func(err error) e2eResult { r.SetupFailure = err.Error(); return r }
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	opts, err := server.ParseFlags([]string{"--rpc_address=127.0.0.1", "--rpc_port=0", "--metrics_port=-1",
		"--enable_offload", "--tick_interval_ms=10", "--eviction_high_watermark_ratio=0.8",
		"--eviction_ratio=0.2", "--log_level=warn"}, nil)
	if err != nil {
		return fail(err)
	}
	m, err := server.Start(opts)
	if err != nil {
		return fail(err)
	}
	defer m.Close()
	pool := uint64(total / 8)
	env := map[string]string{
		storage.EnvHeartbeat:  "0.1",
		storage.EnvBufferSize: fmt.Sprint(256 << 20),
		storage.EnvGCTTL:      "30000",
	}
	holder, err := client.New(client.Config{LocalHostname: "127.0.0.1", MasterServerAddr: m.Addr(),
		GlobalSegmentSize: pool, LocalBufferSize: 1 << 20, EnableSSDOffload: true, SSDOffloadPath: dir,
		ForceTCP: tcp, Getenv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }}, quiet)
	if err != nil {
		return fail(err)
	}
	defer holder.Close()
	user, err := client.New(client.Config{LocalHostname: "127.0.0.1", MasterServerAddr: m.Addr(),
		LocalBufferSize: 1 << 20, ForceTCP: tcp}, quiet)
	if err != nil {
		return fail(err)
	}
	defer user.Close()

	n := int(total / int64(size))
	r.Objects = n
	src := make([]byte, size+4096)
	rng := rand.New(rand.NewPCG(7, uint64(size)))
	for i := range src {
		src[i] = byte(rng.Uint32())
	}
	valueOf := func(i int) []byte { return src[i%4096 : i%4096+size] }
	key := func(i int) string { return fmt.Sprintf("e2e/%d/%d", size, i) }

	start := time.Now()
	for i := 0; i < n; i++ {
		for {
			code := user.Writes().PutBatch([]client.PutItem{{Key: key(i), Parts: [][]byte{valueOf(i)}}}, wire.ReplicaConfig{})[0]
			if code == wire.OK {
				break
			}
			if code != wire.ErrNoAvailableHandle || time.Since(start) > 5*time.Minute {
				return fail(fmt.Errorf("put %d: %v", i, code))
			}
			time.Sleep(time.Millisecond)
		}
	}
	r.PutGBps = float64(total) / time.Since(start).Seconds() / 1e9
	for deadline := time.Now().Add(2 * time.Minute); ; {
		st, _ := holder.SSDStats()
		if st.Offloaded >= int64(n) {
			break
		}
		if time.Now().After(deadline) {
			return fail(fmt.Errorf("only %d of %d objects offloaded", st.Offloaded, n))
		}
		time.Sleep(5 * time.Millisecond)
	}
	r.OffloadGBps = float64(total) / time.Since(start).Seconds() / 1e9

	dropCache(dir)
	before, _ := holder.SSDStats()
	per := max(1, min(n, (64<<20)/size)) // one get of up to 64 MiB
	dsts := make([][][]byte, per)
	bufs := make([][]byte, per)
	for j := range bufs {
		bufs[j] = make([]byte, size)
		dsts[j] = [][]byte{bufs[j]}
	}
	r.Verified = true
	var elapsed time.Duration
	for lo := 0; lo < n; lo += per {
		hi := min(n, lo+per)
		keys := make([]string, 0, hi-lo)
		for i := lo; i < hi; i++ {
			keys = append(keys, key(i))
		}
		t0 := time.Now()
		got := user.Reads().GetInto(keys, dsts[:hi-lo])
		elapsed += time.Since(t0)
		for j, code := range got {
			if code != int64(size) {
				return fail(fmt.Errorf("get %s: %d", keys[j], code))
			}
			if !bytes.Equal(bufs[j], valueOf(lo+j)) {
				r.Verified = false
			}
		}
	}
	r.GetGBps = float64(total) / elapsed.Seconds() / 1e9
	after, _ := holder.SSDStats()
	r.FromDisk = after.Staged - before.Staged
	return r
}
