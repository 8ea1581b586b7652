package ucx

import (
	"context"
	"fmt"
	"testing"
)

// BenchmarkPutGet: one op per Do (a put includes its flush) between two
// workers of one process over tcp on loopback. The limit to compare with
// is UCX's own: ucx_perftest -t ucp_put_bw / ucp_get_bw with UCX_TLS=tcp
// at the same sizes (see the package's report in the issue).
func BenchmarkPutGet(b *testing.B) {
	for _, tls := range []string{"tcp"} {
		r := newRig(b, tls, 16<<20)
		for _, n := range []int{4 << 10, 1 << 20, 16 << 20} {
			buf := make([]byte, n)
			for _, write := range []bool{true, false} {
				name := "get"
				if write {
					name = "put"
				}
				b.Run(fmt.Sprintf("%s/%s/%dKiB", tls, name, n>>10), func(b *testing.B) {
					op := []Op{{Desc: r.x.Desc(), Parts: []Part{{Host: buf}}, Write: write}}
					b.SetBytes(int64(n))
					for b.Loop() {
						if err := r.w.Do(context.Background(), op)[0]; err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
		// 32 ops of 4 KiB per Do: what batching buys over one round trip
		// (and one flush) per op.
		for _, write := range []bool{true, false} {
			name := "get"
			if write {
				name = "put"
			}
			b.Run(fmt.Sprintf("%s/%s/32x4KiB", tls, name), func(b *testing.B) {
				ops := make([]Op, 32)
				for i := range ops {
					ops[i] = Op{Desc: r.x.Desc(), Offset: uint64(i) << 12, Parts: []Part{{Host: make([]byte, 4096)}}, Write: write}
				}
				b.SetBytes(32 << 12)
				for b.Loop() {
					for _, err := range r.w.Do(context.Background(), ops) {
						if err != nil {
							b.Fatal(err)
						}
					}
				}
			})
		}
	}
}

// BenchmarkCanaryRecheck: what the canary read on each Do costs on an
// endpoint whose RMA bypasses the peer's worker (cma in UCX >= 1.16, see
// bypass.go): 4 KiB puts and gets, 1 and 32 per Do, with the read ("on",
// as shipped) and without ("off": the same endpoint, recheck cleared, as
// before the read existed), on and off adjacent (run the binary several
// times with -count=1 to interleave them on a loaded machine). Over
// tcp (and any UCX without cma RMA lanes) the endpoint never rechecks:
// "as-is" there is the unchanged path.
func BenchmarkCanaryRecheck(b *testing.B) {
	for _, tls := range []string{"cma,posix", "tcp"} {
		r := newRig(b, tls, 1<<20)
		buf := make([]byte, 4<<10)
		if err := r.w.Do(context.Background(), []Op{{Desc: r.x.Desc(), Parts: []Part{{Host: buf}}}})[0]; err != nil {
			b.Fatal(err)
		}
		var bypass bool
		r.w.mu.Lock()
		for _, ep := range r.w.eps {
			bypass = ep.recheck
		}
		r.w.mu.Unlock()
		modes := []string{"as-is"}
		if bypass {
			modes = []string{"on", "off"}
		}
		for _, write := range []bool{true, false} {
			name := "get"
			if write {
				name = "put"
			}
			// One op per Do, and 32 (one canary read for them all).
			for _, n := range []int{1, 32} {
				ops := make([]Op, n)
				for i := range ops {
					ops[i] = Op{Desc: r.x.Desc(), Offset: uint64(i) << 12, Parts: []Part{{Host: make([]byte, 4096)}}, Write: write}
				}
				for _, mode := range modes {
					b.Run(fmt.Sprintf("%s/%s/%dx4KiB/%s", tls, name, n, mode), func(b *testing.B) {
						if bypass {
							r.w.mu.Lock()
							for _, ep := range r.w.eps {
								ep.recheck = mode == "on"
							}
							r.w.mu.Unlock()
						}
						b.SetBytes(int64(n) << 12)
						for b.Loop() {
							for _, err := range r.w.Do(context.Background(), ops) {
								if err != nil {
									b.Fatal(err)
								}
							}
						}
					})
				}
			}
		}
	}
}
