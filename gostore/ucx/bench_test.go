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
	}
}
