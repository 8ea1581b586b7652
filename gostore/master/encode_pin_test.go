package master

import (
	"encoding/hex"
	"testing"

	"github.com/gostore/gostore/gostore/wire"
)

// pinnedChanges are changes whose stored form is fixed: journals written
// by earlier masters hold it, so encoding faster must not change a byte.
func pinnedChanges() []Change {
	return []Change{
		{Kind: ObjectSet, Key: "model/layer07/block00000042", Object: DurableObject{Size: 4096, Epoch: 300, Writer: "w",
			HardPin: true, SoftPin: true, Replicas: []DurableReplica{{SegID: 3, Offset: 1 << 20}, {SegID: 4, Offset: 0}},
			Disk: &DurableDisk{Client: "c", Endpoint: "h:1", Storage: "/ssd"}, Writing: []DurableReplica{{SegID: 5, Offset: 4096}}}},
		{Kind: ObjectGone, Key: "model/layer07/block00000042"},
		{Kind: SegmentMounted, Segment: &wire.SegmentDesc{ID: 9, Name: "s", ClientID: "c", Size: 1 << 20}, GrantKey: []byte{1, 2, 3}},
		{Kind: RangesHeld, Hold: &DurableHold{ID: 3, Size: 4096, Ranges: []DurableReplica{{SegID: 7, Offset: 64}}, ReleaseAt: 12345}},
	}
}

func TestStoredChangesKeepTheirBytes(t *testing.T) {
	want := []string{ // as the master of 0c40a3d wrote them
		"011b6d6f64656c2f6c6179657230372f626c6f636b30303030303034328020ac0201770702038080400400016303683a31042f73736401058020",
		"021b6d6f64656c2f6c6179657230372f626c6f636b3030303030303432",
		"0398cc03a098cf0000000000000000cf0000000000000000a0c2c2c0c0c09ccf0000000000000009a173a163cf0000000000100000" +
			"a0a0a0c2a0c0a0cf0000000000000000cf0000000000000000a0c0c0c403010203",
		"0798cc07a098cf0000000000000000cf0000000000000000a0c2c2c0c0c0c0cf0000000000000000a0c094cf0000000000000003" +
			"cf00000000000010009192cf0000000000000007cf0000000000000040d30000000000003039",
	}
	for i, ch := range pinnedChanges() {
		b, err := EncodeChange(nil, ch)
		if err != nil {
			t.Fatal(err)
		}
		if got := hex.EncodeToString(b); got != want[i] {
			t.Errorf("change %d (kind %d) is stored as\n%s, was\n%s", i, ch.Kind, got, want[i])
		}
	}
}

// An object change, nearly every record of a journal, is encoded into the
// caller's buffer without an allocation of its own.
func TestEncodingAnObjectChangeAllocatesNothing(t *testing.T) {
	buf := make([]byte, 0, 512)
	for _, ch := range pinnedChanges()[:2] {
		if n := testing.AllocsPerRun(100, func() { buf, _ = EncodeChange(buf[:0], ch) }); n != 0 {
			t.Errorf("encoding a change of kind %d allocates %.0f times", ch.Kind, n)
		}
	}
}
