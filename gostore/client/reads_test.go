// reads_test.go tests keyBatch's lingering mode: ended reads ride on the
// next request, and only those that waited in vain wake the sender.

package client

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"github.com/gostore/gostore/gostore/internal/testkit"
	"github.com/gostore/gostore/gostore/wire"
)

func woken(r *keyBatch) bool {
	select {
	case <-r.wake:
		return true
	default:
		return false
	}
}

func TestLingeringKeysRideOnTheNextRequest(t *testing.T) {
	var r keyBatch
	r.initLinger(wire.OpReadDone, time.Hour) // the timer never fires by itself here
	defer func() {
		r.mu.Lock()
		r.timer.Stop()
		r.mu.Unlock()
	}()
	r.add("a", 1)
	r.add("b", 2)
	if woken(&r) {
		t.Fatal("a lingering add woke the sender")
	}
	var req wire.KeysReq
	r.attach(&req)
	if !slices.Equal(req.DoneKeys, []string{"a", "b"}) || !slices.Equal(req.DoneEpochs, []uint64{1, 2}) {
		t.Fatalf("attached %v %v", req.DoneKeys, req.DoneEpochs)
	}
	var again wire.KeysReq
	r.attach(&again)
	if again.DoneKeys != nil {
		t.Fatal("keys attached twice")
	}

	// The timer finds young keys (they came after a request took the
	// older ones): it waits out their linger instead of waking the sender.
	r.add("c", 3)
	r.lingered()
	if woken(&r) || !r.armed {
		t.Fatalf("young keys woke the sender (armed %v)", r.armed)
	}
	// Keys that waited the whole linger go to the sender.
	r.mu.Lock()
	r.oldest = time.Now().Add(-2 * time.Hour)
	r.mu.Unlock()
	r.lingered()
	if !woken(&r) {
		t.Fatal("keys that lingered in vain did not wake the sender")
	}
	if req := r.take("me"); !slices.Equal(req.Keys, []string{"c"}) {
		t.Fatalf("the sender took %v", req.Keys)
	}
	// With nothing waiting the timer just stops.
	r.lingered()
	if woken(&r) || r.armed {
		t.Fatal("an empty batch woke the sender or stayed armed")
	}
}

// An ended read is carried to the master by the reader's next get: until
// then the object counts the reader (another client's upsert in place is
// -714), after it the upsert goes through. The linger is an hour here, so
// only the carrying get can have told the master.
func TestEndedReadsRideOnTheNextGet(t *testing.T) {
	reader, writer := spotCluster(t)
	reader.readsDone.mu.Lock()
	reader.readsDone.linger = time.Hour
	reader.readsDone.mu.Unlock()
	v1, v2 := testkit.Pattern(1, 4096), testkit.Pattern(2, 4096)
	mustPut(t, writer, "k", v1, false)
	mustPut(t, writer, "other", v1, false)
	readOne(t, reader, "k", 4096)
	upsert := func() wire.Code {
		return writer.UpsertBatch([]PutItem{{Key: "k", Parts: [][]byte{v2}}}, wire.ReplicaConfig{})[0]
	}
	if code := upsert(); code != wire.ErrObjectReplicaBusy {
		t.Fatalf("upsert while the master still counts the reader: %v, want -714", code)
	}
	readOne(t, reader, "other", 4096) // carries the ended read of k
	if code := upsert(); code != wire.OK {
		t.Fatalf("upsert after the next get carried the ended read: %v", code)
	}
	if got := readOne(t, reader, "k", 4096); !bytes.Equal(got, v2) {
		t.Fatal("the upsert's bytes did not come back")
	}
}
