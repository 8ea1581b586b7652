// bench_test.go defines the data-plane benchmarks; bench/limits reports
// the physical limits (memcpy, one raw loopback stream) they compare with.

package transfer

import (
	"context"
	"testing"
)

const mib16 = 16 << 20

func benchShm(b *testing.B, write bool) {
	seg := localSegment(b, "bench-shm", 64<<20)
	p := shmPeer(seg)
	e := NewEngine(Options{Log: quietLog()})
	defer e.Close()
	buf := make([]byte, mib16)
	copy(buf, pattern(1, mib16))
	ops := []Op{{Peer: p, Offset: 4096, Bufs: [][]byte{buf}, Write: write}}
	mustOK(b, grantDo(e, context.Background(), ops))
	b.SetBytes(mib16)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := grantDo(e, context.Background(), ops)[0]; err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkShmWrite16M(b *testing.B) { benchShm(b, true) }
func BenchmarkShmRead16M(b *testing.B)  { benchShm(b, false) }

func benchTCP(b *testing.B, write bool, opt Options) {
	tp := newTCPPeer(b, 64<<20)
	opt.ForceTCP = true
	opt.Log = quietLog()
	e := NewEngine(opt)
	defer e.Close()
	buf := make([]byte, mib16)
	copy(buf, pattern(1, mib16))
	ops := []Op{{Peer: tp.peer, Offset: 4096, Bufs: [][]byte{buf}, Write: write}}
	mustOK(b, grantDo(e, context.Background(), ops))
	b.SetBytes(mib16)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := grantDo(e, context.Background(), ops)[0]; err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkTCPWrite16M(b *testing.B) { benchTCP(b, true, Options{}) }
func BenchmarkTCPRead16M(b *testing.B)  { benchTCP(b, false, Options{}) }

// BenchmarkTCPBatch4K runs batches of 32 writes of 4 KiB; ops/s is reported.
func BenchmarkTCPBatch4K(b *testing.B)     { benchBatch(b, true) }
func BenchmarkTCPBatch4KRead(b *testing.B) { benchBatch(b, false) }

func benchBatch(b *testing.B, write bool) {
	tp := newTCPPeer(b, 64<<20)
	e := NewEngine(Options{ForceTCP: true, Log: quietLog()})
	defer e.Close()
	ops := make([]Op, 32)
	for i := range ops {
		ops[i] = Op{Peer: tp.peer, Offset: uint64(i) * 8192, Bufs: [][]byte{pattern(uint64(i), 4096)}, Write: write}
	}
	mustOK(b, grantDo(e, context.Background(), ops))
	b.SetBytes(32 * 4096)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for k, err := range grantDo(e, context.Background(), ops) {
			if err != nil {
				b.Fatalf("op %d: %v", k, err)
			}
		}
	}
	b.ReportMetric(float64(b.N*32)/b.Elapsed().Seconds(), "ops/s")
}

// BenchmarkTCPRead4K and BenchmarkTCPWrite4K run one op of 4 KiB per call,
// on the lane and (LaneBytes -1) on the streams: the latency of a small
// get or put's transfer.
func BenchmarkTCPRead4K(b *testing.B)        { benchSmall(b, false, Options{}) }
func BenchmarkTCPWrite4K(b *testing.B)       { benchSmall(b, true, Options{}) }
func BenchmarkTCPRead4KStreams(b *testing.B) { benchSmall(b, false, Options{LaneBytes: -1}) }

func benchSmall(b *testing.B, write bool, opt Options) {
	tp := newTCPPeer(b, 1<<20)
	opt.ForceTCP, opt.Log = true, quietLog()
	e := NewEngine(opt)
	defer e.Close()
	ops := granted([]Op{{Peer: tp.peer, Offset: 4096, Bufs: [][]byte{pattern(1, 4096)}, Write: write}})
	mustOK(b, e.Do(context.Background(), ops))
	b.SetBytes(4096)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := e.Do(context.Background(), ops)[0]; err != nil {
			b.Fatal(err)
		}
	}
}
