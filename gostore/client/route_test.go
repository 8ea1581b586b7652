// route_test.go drives real clients with a FAKE transport wrapped around
// the engine's real routes: what a put or a get does when the bytes fail
// to move.

package client

import (
	"bytes"
	"context"
	"sync"
	"testing"

	"github.com/gostore/gostore/gostore/internal/testkit"
	"github.com/gostore/gostore/gostore/transfer"
	"github.com/gostore/gostore/gostore/wire"
)

// failingRoutes is a FAKE Transport in front of every route that fails
// the ops on the listed segments, and passes the rest to the real one.
type failingRoutes struct {
	mu   sync.Mutex
	segs map[uint64]bool
	hits int
}

func (f *failingRoutes) set(segs ...uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.segs = map[uint64]bool{}
	for _, s := range segs {
		f.segs[s] = true
	}
}

func (f *failingRoutes) wrap(_ transfer.Route, inner transfer.Transport) transfer.Transport {
	return failingTransport{f, inner}
}

type failingTransport struct {
	f     *failingRoutes
	inner transfer.Transport
}

func (t failingTransport) Start(ctx context.Context, ops []transfer.Op, idx []int, errs []error) func() []int {
	t.f.mu.Lock()
	var pass []int
	for _, i := range idx {
		if t.f.segs[ops[i].Peer.SegID] {
			t.f.hits++
			errs[i] = wire.Errorf(wire.ErrTransferFail, "fake transport: segment %d unreachable", ops[i].Peer.SegID)
			continue
		}
		pass = append(pass, i)
	}
	t.f.mu.Unlock()
	return t.inner.Start(ctx, ops, pass, errs)
}

// A get whose first replica fails to move reads the next one; a put whose
// transfer fails is revoked (the key stays absent, and a later put of it
// succeeds); both over the real engine with one route failing.
func TestTransferFailuresThroughTheRoute(t *testing.T) {
	eachTransport(t, func(t *testing.T) {
		m := testkit.StartMaster(t)
		a := newClient(t, m.Addr(), 4<<20)
		b := newClient(t, m.Addr(), 4<<20)
		fake := &failingRoutes{}
		reader, err := New(edge(Config{LocalHostname: "127.0.0.1", MasterServerAddr: m.Addr(),
			WrapTransport: fake.wrap}), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer reader.Close()

		v := testkit.Pattern(77, 100_000)
		if codes := reader.Writes().PutBatch([]PutItem{{Key: "both", Parts: [][]byte{v[:7], v[7:]}}}, wire.ReplicaConfig{ReplicaNum: 2}); codes[0] != wire.OK {
			t.Fatalf("put of two replicas: %v", codes[0])
		}
		// Fail whichever replica the reader tries first: the other serves.
		fake.set(a.peers.ownID, b.peers.ownID)
		got := make([]byte, len(v))
		if n := reader.Reads().GetInto([]string{"both"}, [][][]byte{{got}}); n[0] != int64(wire.ErrTransferFail) {
			t.Fatalf("every replica failing: %d, want %d", n[0], wire.ErrTransferFail)
		}
		for _, bad := range []uint64{a.peers.ownID, b.peers.ownID} {
			fake.set(bad)
			clear(got)
			if n := reader.Reads().GetInto([]string{"both"}, [][][]byte{{got}}); n[0] != int64(len(v)) || !bytes.Equal(got, v) {
				t.Fatalf("segment %d failing: %d bytes, equal %v", bad, n[0], bytes.Equal(got, v))
			}
		}

		fake.set(a.peers.ownID, b.peers.ownID)
		w := testkit.Pattern(78, 5000)
		if codes := reader.Writes().PutBatch([]PutItem{{Key: "lost", Parts: [][]byte{w}}}, wire.ReplicaConfig{ReplicaNum: 1}); codes[0] != wire.ErrTransferFail {
			t.Fatalf("put with the route failing: %v", codes[0])
		}
		if e := a.Keys().Exist([]string{"lost"}); e[0] != 0 {
			t.Fatalf("a put that failed is visible: exist %d", e[0])
		}
		fake.set()
		if codes := reader.Writes().PutBatch([]PutItem{{Key: "lost", Parts: [][]byte{w}}}, wire.ReplicaConfig{ReplicaNum: 1}); codes[0] != wire.OK {
			t.Fatalf("put again: %v", codes[0])
		}
		got = make([]byte, len(w))
		if n := a.Reads().GetInto([]string{"lost"}, [][][]byte{{got}}); n[0] != int64(len(w)) || !bytes.Equal(got, w) {
			t.Fatalf("read of the second put: %d", n[0])
		}
		if fake.hits < 4 {
			t.Fatalf("the fake failed %d ops", fake.hits)
		}
	})
}
