// limits_test.go checks the probes measure something and reports them at
// 16 MiB (BenchmarkLimits, moved here from gostore/transfer).

package limits

import "testing"

func TestProbesMeasure(t *testing.T) {
	if g := MemcpyGBps(1<<20, 8); g <= 0 {
		t.Errorf("MemcpyGBps(1 MiB, 8) = %v", g)
	}
	if g := LoopbackStreamGBps(1<<20, 8); g <= 0 {
		t.Errorf("LoopbackStreamGBps(1 MiB, 8) = %v", g)
	}
	for _, f := range []func(uint64, int) float64{MemcpyGBps, LoopbackStreamGBps} {
		if f(0, 8) != 0 || f(4096, 0) != 0 {
			t.Error("an empty measurement is not 0")
		}
	}
}

const mib16 = 16 << 20

// BenchmarkLimits reports MemcpyGBps and LoopbackStreamGBps at 16 MiB, the
// ceilings of the shm and TCP paths (gostore/transfer's benchmarks).
func BenchmarkLimits(b *testing.B) {
	iters := max(b.N, 10)
	b.ReportMetric(MemcpyGBps(mib16, iters), "memcpy-GB/s")
	b.ReportMetric(LoopbackStreamGBps(mib16, iters), "loopback-GB/s")
}
