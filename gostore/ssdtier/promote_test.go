package ssdtier_test

import (
	"bytes"
	"math"
	"testing"
	"time"

	"github.com/gostore/gostore/gostore/grant"
	"github.com/gostore/gostore/gostore/internal/testkit"
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

// A promotion that runs after its write grant expired writes nothing: the
// master has ended the task and quarantined its range by then.
func TestPromotionAfterItsGrantWritesNothing(t *testing.T) {
	m := startOffloadMaster(t, "--promotion_on_hit")
	const segment = 1 << 20
	holder := newTierClient(t, m, segment, t.TempDir(), tierEnv(nil))
	v := bytes.Repeat([]byte{7}, 4096)
	putRetrying(t, holder, "k", v)
	testkit.WaitFor(t, "the copy on disk", func() bool { _, ok := holder.SSD().Storage().Backend().Size("k"); return ok })
	res, err := holder.SSD().Peek([]string{"k"})
	if err != nil || len(res[0].Replicas) != 1 {
		t.Fatalf("peek = %+v, %v", res, err)
	}
	own, at := res[0].Replicas[0].SegID, (res[0].Replicas[0].Offset+segment/2)%segment&^4095
	k, _ := grant.NewKey(bytes.Repeat([]byte{1}, 32))
	tok := grant.Mint(nil, k, grant.Fields{SegID: own, Offset: at, Length: 4096, Write: true,
		Expiry: time.Now().Add(-time.Second).UnixNano()})
	holder.SSD().Promote([]wire.PromotionTask{{ID: "1", Key: "k", Size: 4096, Target: wire.Replica{SegID: own, Offset: at, Grant: tok}}})
	if st := holder.SSD().Stats(); st.PromoteFailed != 1 || st.Promoted != 0 {
		t.Fatalf("promoted %d, failed %d; want 0 and 1", st.Promoted, st.PromoteFailed)
	}
	mustGet(t, holder, "k", v)
}
