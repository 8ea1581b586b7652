// ucx_test.go runs real clients over the UCX route with the host's UCX
// (GOSTORE_TRANSPORT=ucx's force: on one host, UCX picks tcp, shared
// memory or cma between them).

package client

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gostore/gostore/gostore/internal/testkit"
	"github.com/gostore/gostore/gostore/transfer"
	"github.com/gostore/gostore/gostore/ucx"
	"github.com/gostore/gostore/gostore/wire"
)

func newUCXClient(t *testing.T, master string, segment uint64) *Client {
	t.Helper()
	c, err := New(edge(Config{LocalHostname: "127.0.0.1", MasterServerAddr: master, GlobalSegmentSize: segment,
		LocalBufferSize: 1 << 20, Protocol: "ucx", ForceUCX: true}), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Two clients with protocol "ucx" and the force on move puts and gets
// over RouteUCX (counted by the engine), bytes checked; transport_info
// names the UCX loaded.
func TestClientsOverUCX(t *testing.T) {
	if info := ucx.Probe(); !info.Available {
		t.Skipf("UCX unavailable: %s", info.Reason)
	}
	m := testkit.StartMaster(t)
	owner := newUCXClient(t, m.Addr(), 8<<20)
	reader := newUCXClient(t, m.Addr(), 0) // everything lands on owner's segment
	if tr := reader.Transport(); tr.Protocol != "ucx" || !tr.UCX.Available || tr.UCX.Version == "" || len(tr.UCX.Resources) == 0 {
		t.Fatalf("transport %+v", tr)
	}
	sizes := []int{1, 4096, 1<<20 + 3}
	var items []PutItem
	for i, n := range sizes {
		v := testkit.Pattern(uint64(i), n)
		items = append(items, PutItem{Key: fmt.Sprint("k", i), Parts: [][]byte{v[:n/3], v[n/3:]}})
	}
	for i, code := range reader.Writes().PutBatch(items, wire.ReplicaConfig{ReplicaNum: 1}) {
		if code != wire.OK {
			t.Fatalf("put %d: %v", i, code)
		}
	}
	get := func(who *Client) {
		t.Helper()
		keys := []string{"k0", "k1", "k2"}
		dests := make([][][]byte, len(keys))
		for i, n := range sizes {
			dests[i] = [][]byte{make([]byte, n)}
		}
		for i, got := range who.Reads().GetInto(keys, dests) {
			if got != int64(sizes[i]) || !bytes.Equal(dests[i][0], testkit.Pattern(uint64(i), sizes[i])) {
				t.Fatalf("get %d: %d bytes, or bytes differ", i, got)
			}
		}
	}
	get(reader)
	get(owner)
	if n := reader.engine.RouteOps(transfer.RouteUCX); n != uint64(2*len(sizes)) {
		t.Fatalf("%d ops over ucx, want %d (shm %d, tcp %d)", n, 2*len(sizes),
			reader.engine.RouteOps(transfer.RouteShm), reader.engine.RouteOps(transfer.RouteTCP))
	}
	if n := owner.engine.RouteOps(transfer.RouteOwn); n != uint64(len(sizes)) {
		t.Fatalf("owner: %d ops on its own segment, want %d", n, len(sizes))
	}
}

// A remount exposes the segment afresh: the master hands out the new
// desc, the old exposure is closed (an op holding its desc fails, no
// bytes), and a reader whose cached desc went stale reads again after
// the failure dropped it.
func TestUCXRemountReplacesTheExposure(t *testing.T) {
	if info := ucx.Probe(); !info.Available {
		t.Skipf("UCX unavailable: %s", info.Reason)
	}
	m := testkit.StartMaster(t)
	owner := newUCXClient(t, m.Addr(), 4<<20)
	reader := newUCXClient(t, m.Addr(), 0)
	v := testkit.Pattern(9, 100_000)
	if codes := reader.Writes().PutBatch([]PutItem{{Key: "k", Parts: [][]byte{v}}}, wire.ReplicaConfig{ReplicaNum: 1}); codes[0] != wire.OK {
		t.Fatal(codes[0])
	}
	id := owner.peers.ownID
	before, _ := reader.peers.get(id)
	if len(before.UCX) == 0 {
		t.Fatal("the reader has no UCX desc of the owner's segment")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := owner.own.mount(ctx); err != nil {
		t.Fatal(err)
	}
	var resp wire.QuerySegmentsResp
	if err := reader.master.Call(ctx, wire.OpQuerySegments, &wire.QuerySegmentsReq{IDs: []uint64{id}}, &resp); err != nil {
		t.Fatal(err)
	}
	if len(resp.Segs) != 1 || len(resp.Segs[0].UCX) == 0 || bytes.Equal(resp.Segs[0].UCX, before.UCX) {
		t.Fatalf("the master's desc after a remount: %d descs, the old UCX desc kept or none", len(resp.Segs))
	}
	var reps wire.GetReplicasResp
	if err := reader.master.Call(ctx, wire.OpGetReplicas, &wire.KeysReq{ClientID: reader.id, Keys: []string{"k"}, ForRead: true}, &reps); err != nil ||
		len(reps.Results) != 1 || len(reps.Results[0].Replicas) != 1 {
		t.Fatalf("GetReplicas: %+v, %v", reps, err)
	}
	rep := reps.Results[0].Replicas[0]
	got := make([]byte, len(v))
	errs := reader.engine.Do(ctx, []transfer.Op{{Peer: before, Offset: rep.Offset, Bufs: [][]byte{got}, Grant: rep.Grant}})
	if wire.CodeOf(errs[0]) != wire.ErrTransferFail || !bytes.Equal(got, make([]byte, len(v))) {
		t.Fatalf("a read with the closed exposure's desc: %v", errs[0])
	}
	reader.engine.Forget(id)
	reader.peers.forget(id)
	dest := [][][]byte{{make([]byte, len(v))}}
	if n := reader.Reads().GetInto([]string{"k"}, dest); n[0] != int64(len(v)) || !bytes.Equal(dest[0][0], v) {
		t.Fatalf("get after the remount: %d", n[0])
	}
}
