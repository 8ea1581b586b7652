package clientmetrics

import (
	"testing"
	"time"

	"github.com/gostore/gostore/gostore/wire"
)

// BenchmarkRecordPut is what one single-object put costs the metrics: two
// RPCs, one round of transfers and the call itself.
func BenchmarkRecordPut(b *testing.B) {
	m := New(Options{})
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.RPC(wire.OpPutStart, 80*time.Microsecond, nil)
			m.Transfer(Write, 1, 4096, 20*time.Microsecond)
			m.RPC(wire.OpPutEnd, 60*time.Microsecond, nil)
			m.Op(Write, "put", 4096, 170*time.Microsecond)
		}
	})
}
