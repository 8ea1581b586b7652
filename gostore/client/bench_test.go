package client

import (
	"fmt"
	"testing"

	"github.com/gostore/gostore/gostore/internal/testkit"
	"github.com/gostore/gostore/gostore/wire"
)

// benchSmallBatch runs batches of 32 objects of 4 KiB between a reader and
// an owner on the same host (shared memory), the case where the route
// costs the most per byte. With metrics, the reader runs the client HTTP
// server and so records every call.
func benchSmallBatch(b *testing.B, read, metrics bool) {
	m := testkit.StartMaster(b)
	mk := func(seg uint64) *Client {
		port := 0
		if metrics && seg == 0 {
			port = freePort(b)
		}
		c, err := New(Config{LocalHostname: "127.0.0.1", MasterServerAddr: m.Addr(), GlobalSegmentSize: seg, LocalBufferSize: 1 << 20, HTTPPort: port}, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close() })
		return c
	}
	mk(256 << 20) // the owner: holds every replica
	user := mk(0)
	const n, size = 32, 4096
	src := make([][]byte, n)
	for i := range src {
		src[i] = testkit.Pattern(uint64(i), size)
	}
	items := func(round int) []PutItem {
		it := make([]PutItem, n)
		for i := range it {
			it[i] = PutItem{Key: fmt.Sprintf("k-%d-%d", round, i), Parts: [][]byte{src[i]}}
		}
		return it
	}
	cfg := wire.ReplicaConfig{ReplicaNum: 1}
	if read {
		it := items(0)
		keys := make([]string, n)
		dests := make([][][]byte, n)
		for i := range it {
			keys[i] = it[i].Key
			dests[i] = [][]byte{make([]byte, size)}
		}
		for _, code := range user.Writes().PutBatch(it, cfg) {
			if code != wire.OK {
				b.Fatal(code)
			}
		}
		b.ResetTimer()
		for range b.N {
			for _, r := range user.Reads().GetInto(keys, dests) {
				if r != size {
					b.Fatal(r)
				}
			}
		}
	} else {
		batches := make([][]PutItem, b.N)
		for r := range batches {
			batches[r] = items(r + 1)
		}
		b.ResetTimer()
		for r := range b.N {
			for _, code := range user.Writes().PutBatch(batches[r], cfg) {
				if code != wire.OK {
					b.Fatal(code)
				}
			}
			if r%1000 == 999 {
				b.StopTimer()
				user.Keys().RemoveAll(true)
				b.StartTimer()
			}
		}
	}
	b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "keys/s")
}

func BenchmarkGetInto4KiBx32(b *testing.B)            { benchSmallBatch(b, true, false) }
func BenchmarkPut4KiBx32(b *testing.B)                { benchSmallBatch(b, false, false) }
func BenchmarkGetInto4KiBx32WithMetrics(b *testing.B) { benchSmallBatch(b, true, true) }
func BenchmarkPut4KiBx32WithMetrics(b *testing.B)     { benchSmallBatch(b, false, true) }
