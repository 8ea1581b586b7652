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
