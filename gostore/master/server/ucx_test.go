package server

import (
	"bytes"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/gostore/gostore/gostore/master"
	"github.com/gostore/gostore/gostore/wire/wiretest"
)

// A version-1 state (the msgpack envelope) written before
// SegmentDesc.UCX reads back with its segments whole and no UCX desc.
func TestVersion1StateFromBeforeUCX(t *testing.T) {
	type stateBeforeUCX struct {
		Segments  map[uint64]wiretest.SegmentDescBeforeUCX `msgpack:"segs"`
		NextSegID uint64                                   `msgpack:"nid"`
	}
	type envelope struct {
		Version int             `msgpack:"v"`
		State   *stateBeforeUCX `msgpack:"s"`
	}
	b, err := msgpack.Marshal(envelope{Version: stateVersion, State: &stateBeforeUCX{NextSegID: 2,
		Segments: map[uint64]wiretest.SegmentDescBeforeUCX{2: {ID: 2, Name: "h:1", ClientID: "c", Size: 1 << 20, TransferAddr: "127.0.0.1:9", Base: 7}}}})
	if err != nil {
		t.Fatal(err)
	}
	st, err := stateOf(b, 1, nil)
	if err != nil {
		t.Fatalf("a version-1 state from before UCX: %v", err)
	}
	d, ok := st.Segments[2]
	if !ok || d.Name != "h:1" || d.ClientID != "c" || d.Size != 1<<20 || d.TransferAddr != "127.0.0.1:9" || d.Base != 7 || d.UCX != nil {
		t.Fatalf("read back %+v", st.Segments)
	}
	c := master.New(master.Config{})
	c.Restore(st)
	if got := c.QuerySegments([]uint64{2}); len(got) != 1 || got[0].Name != "h:1" || !bytes.Equal(got[0].UCX, nil) {
		t.Fatalf("restored %+v", got)
	}
}
