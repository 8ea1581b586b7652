package server

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gostore/gostore/gostore/internal/etcdtest"
	"github.com/gostore/gostore/gostore/rpc"
	"github.com/gostore/gostore/gostore/wire"
)

// Two masters on one etcd cluster: the first leads, the second waits as a
// standby; when the leader dies (its lease lapses, it never resigned) the
// standby takes over with every object acknowledged before, on the same
// segments and offsets, and serves new writes.
func TestStandbyTakesOverWithEveryAcknowledgedObject(t *testing.T) {
	cl := etcdtest.Start(t, 3)
	start := func() (*Server, error) {
		return Start(parse(t, append([]string{"--rpc_address=127.0.0.1", "--rpc_port=0", "--metrics_port=0",
			"--log_level=error", "--client_ttl=60", "--snapshot_backup_dir=" + t.TempDir()}, cl.MasterFlags("t1")...)...))
	}
	a, err := start()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ca := rpc.NewClient(a.Addr())
	defer ca.Close()
	var mr wire.MountResp
	ucxDesc := []byte("a UCX exposure: worker address and remote key, opaque to the master \x00\xff")
	if err := ca.Call(ctx, wire.OpMountSegment, &wire.MountReq{Seg: wire.SegmentDesc{Name: "h:1", ClientID: "c1",
		Size: 64 << 20, ShmPath: "/x", UCX: ucxDesc}}, &mr); err != nil {
		t.Fatal(err)
	}
	keys := make([]string, 50)
	sizes := make([]uint64, 50)
	for i := range keys {
		keys[i], sizes[i] = fmt.Sprintf("k%d", i), uint64(1000+i)
	}
	var ps wire.PutStartResp
	if err := ca.Call(ctx, wire.OpPutStart, &wire.PutStartReq{ClientID: "c1", Keys: keys, Sizes: sizes}, &ps); err != nil {
		t.Fatal(err)
	}
	var pe wire.CodesResp
	if err := ca.Call(ctx, wire.OpPutEnd, &wire.KeysReq{ClientID: "c1", Keys: keys}, &pe); err != nil {
		t.Fatal(err)
	}
	for i, c := range pe.Codes {
		if c != wire.OK {
			t.Fatalf("put %s: %v", keys[i], c)
		}
	}
	var before wire.GetReplicasResp
	ca.Call(ctx, wire.OpGetReplicas, &wire.KeysReq{Keys: keys}, &before)

	type started struct {
		s   *Server
		err error
	}
	bUp := make(chan started, 1)
	go func() {
		s, err := start()
		bUp <- started{s, err}
	}()
	select {
	case b := <-bUp:
		t.Fatalf("a second master served while the first leads: %+v", b)
	case <-time.After(3 * time.Second): // longer than a lease: the standby really waits
	}
	// While the standby follows: a snapshot folds the log (the records it
	// covers go), then more objects.
	if err := a.state.snapshot(a.core); err != nil {
		t.Fatal(err)
	}
	more := []string{"late1", "late2"}
	if err := ca.Call(ctx, wire.OpPutStart, &wire.PutStartReq{ClientID: "c1", Keys: more, Sizes: []uint64{7, 8}}, &ps); err != nil {
		t.Fatal(err)
	}
	if err := ca.Call(ctx, wire.OpPutEnd, &wire.KeysReq{ClientID: "c1", Keys: more}, &pe); err != nil || pe.Codes[1] != wire.OK {
		t.Fatalf("late puts: %v %+v", err, pe)
	}
	keys = append(keys, more...)
	ca.Call(ctx, wire.OpGetReplicas, &wire.KeysReq{Keys: keys}, &before)
	a.stepDown() // a dies: no resignation, its lease lapses
	<-a.Done()
	b := <-bUp
	if b.err != nil {
		t.Fatal(b.err)
	}
	defer b.s.Close()
	cb := rpc.NewClient(b.s.Addr())
	defer cb.Close()
	var after wire.GetReplicasResp
	if err := cb.Call(ctx, wire.OpGetReplicas, &wire.KeysReq{Keys: keys}, &after); err != nil {
		t.Fatal(err)
	}
	var segs wire.QuerySegmentsResp
	if err := cb.Call(ctx, wire.OpQuerySegments, &wire.QuerySegmentsReq{IDs: []uint64{mr.SegID}}, &segs); err != nil ||
		len(segs.Segs) != 1 || string(segs.Segs[0].UCX) != string(ucxDesc) {
		t.Fatalf("the segment's UCX desc on the new leader: %+v, %v", segs, err)
	}
	for i := range keys {
		if after.Results[i].Code != wire.OK || fmt.Sprint(after.Results[i].Replicas) != fmt.Sprint(before.Results[i].Replicas) {
			t.Fatalf("%s: before %+v, after %+v", keys[i], before.Results[i], after.Results[i])
		}
	}
	// The new leader writes: a new object, then a restart of the whole
	// cluster's masters would find it too (it is in etcd's log).
	if err := cb.Call(ctx, wire.OpPutStart, &wire.PutStartReq{ClientID: "c1", Keys: []string{"new"}, Sizes: []uint64{10}}, &ps); err != nil || ps.Results[0].Code != wire.OK {
		t.Fatalf("put on the new leader: %v %+v", err, ps)
	}
	if err := cb.Call(ctx, wire.OpPutEnd, &wire.KeysReq{ClientID: "c1", Keys: []string{"new"}}, &pe); err != nil || pe.Codes[0] != wire.OK {
		t.Fatalf("put end on the new leader: %v %+v", err, pe)
	}
}
