package ssdtier_test

import (
	"bytes"
	"math"
	"testing"

	"github.com/gostore/gostore/gostore/wire"
)

// A promotion whose target is not a range of the holder's own host-memory
// segment writes nothing and is reported failed: the master's view may
// differ from the client's (a remount), and nothing it sends may make the
// client write outside its segment.
func TestPromotionOutsideTheSegmentWritesNothing(t *testing.T) {
	m := startOffloadMaster(t, "--promotion_on_hit")
	const segment = 1 << 20
	holder := newTierClient(t, m, segment, t.TempDir(), tierEnv(nil))
	v := bytes.Repeat([]byte{7}, 4096)
	putRetrying(t, holder, "k", v)
	res, err := holder.SSD().Peek([]string{"k"})
	if err != nil || len(res[0].Replicas) != 1 {
		t.Fatalf("peek = %+v, %v", res, err)
	}
	own := res[0].Replicas[0].SegID
	bad := []wire.PromotionTask{
		{ID: "1", Key: "k", Size: 4096, Target: wire.Replica{SegID: own + 1000}},
		{ID: "2", Key: "k", Size: 4096, Target: wire.Replica{SegID: own, Offset: math.MaxUint64 - 10}},
		{ID: "3", Key: "k", Size: 4096, Target: wire.Replica{SegID: own, Offset: segment - 100}},
		{ID: "4", Key: "k", Size: math.MaxUint64, Target: wire.Replica{SegID: own}},
	}
	holder.SSD().Promote(bad)
	if st := holder.SSD().Stats(); st.PromoteFailed != int64(len(bad)) || st.Promoted != 0 {
		t.Fatalf("promoted %d, failed %d; want 0 and %d", st.Promoted, st.PromoteFailed, len(bad))
	}
	mustGet(t, holder, "k", v)
}
