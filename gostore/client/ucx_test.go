// ucx_test.go runs real clients over the UCX route with the host's UCX
// (GOSTORE_TRANSPORT=ucx's force: on one host, UCX picks tcp, shared
// memory or cma between them).

package client

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gostore/gostore/gostore/internal/testkit"
	"github.com/gostore/gostore/gostore/master/server"
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

// ucxSegment is a segment of owner mounted one of the ways a client
// mounts one, for the tests that run over each.
type ucxSegment struct {
	id      func() uint64               // its master ID now
	remount func(context.Context) error // as the heartbeat does after a master restart
	unmount func() error                // nil: the setup segment (Close unmounts it)
	exposed func() bool                 // its exposure is open
	seg     *extraSeg                   // nil: the setup segment
}

// eachUCXSegment runs body over a client's setup segment, an allocated
// segment and a file segment, owner's only memory, with UCX's force on.
func eachUCXSegment(t *testing.T, body func(t *testing.T, m *server.Server, owner *Client, seg ucxSegment)) {
	if info := ucx.Probe(); !info.Available {
		t.Skipf("UCX unavailable: %s", info.Reason)
	}
	const size = 4 << 20
	kinds := map[string]func(t *testing.T, owner *Client) ([]string, error){
		"allocated": func(t *testing.T, owner *Client) ([]string, error) {
			ids, _, err := owner.Segments().AllocateAndMount(size, "ucx", "")
			return ids, err
		},
		"file": func(t *testing.T, owner *Client) ([]string, error) {
			path := filepath.Join(t.TempDir(), "seg")
			if err := os.WriteFile(path, make([]byte, size), 0o600); err != nil {
				t.Fatal(err)
			}
			return owner.Segments().MountFile(path, 0, size, "ucx", "")
		},
	}
	t.Run("setup", func(t *testing.T) {
		m := testkit.StartMaster(t)
		owner := newUCXClient(t, m.Addr(), size)
		body(t, m, owner, ucxSegment{id: func() uint64 { return owner.peers.ownID }, remount: owner.own.mount,
			exposed: owner.own.exposure.isOpen})
	})
	for _, name := range []string{"allocated", "file"} {
		t.Run(name, func(t *testing.T) {
			m := testkit.StartMaster(t)
			owner := newUCXClient(t, m.Addr(), 0)
			ids, err := kinds[name](t, owner)
			if err != nil || len(ids) != 1 {
				t.Fatalf("mount: %v, %v", ids, err)
			}
			owner.segs.extra.mu.Lock()
			s := owner.segs.extra.byHandle[ids[0]]
			owner.segs.extra.mu.Unlock()
			body(t, m, owner, ucxSegment{
				id: func() uint64 {
					owner.segs.extra.mu.Lock()
					defer owner.segs.extra.mu.Unlock()
					return s.id
				},
				remount: owner.segs.remountExtra,
				unmount: func() error { return owner.Segments().UnmountSegments(ids, 0, name == "allocated") },
				exposed: s.exposure.isOpen,
				seg:     s,
			})
		})
	}
}

// isOpen reports whether the segment's exposure is open.
func (e *segExposure) isOpen() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.cur != nil
}

// replicaOf is the grant and offset of key's one replica, as the master
// hands them to c for a read.
func replicaOf(t *testing.T, ctx context.Context, c *Client, key string) wire.Replica {
	t.Helper()
	var reps wire.GetReplicasResp
	if err := c.master.Call(ctx, wire.OpGetReplicas, &wire.KeysReq{ClientID: c.id, Keys: []string{key}, ForRead: true}, &reps); err != nil ||
		len(reps.Results) != 1 || len(reps.Results[0].Replicas) != 1 {
		t.Fatalf("GetReplicas: %+v, %v", reps, err)
	}
	return reps.Results[0].Replicas[0]
}

// A remount exposes the segment afresh, whichever way it was mounted: the
// master hands out the new desc, the old exposure is closed (an op holding
// its desc fails, no bytes), and a reader whose cached desc went stale
// reads again, over UCX, after the failure dropped it; the owner reads it
// at once.
func TestUCXRemountReplacesTheExposure(t *testing.T) {
	eachUCXSegment(t, func(t *testing.T, m *server.Server, owner *Client, seg ucxSegment) {
		reader := newUCXClient(t, m.Addr(), 0)
		v := testkit.Pattern(9, 100_000)
		if codes := reader.Writes().PutBatch([]PutItem{{Key: "k", Parts: [][]byte{v}}}, wire.ReplicaConfig{ReplicaNum: 1}); codes[0] != wire.OK {
			t.Fatal(codes[0])
		}
		id := seg.id()
		before, _ := reader.peers.get(id)
		if len(before.UCX) == 0 {
			t.Fatal("the reader has no UCX desc of the owner's segment")
		}
		dest := [][][]byte{{make([]byte, len(v))}}
		if n := owner.Reads().GetInto([]string{"k"}, dest); n[0] != int64(len(v)) || !bytes.Equal(dest[0][0], v) {
			t.Fatalf("the owner's get: %d", n[0]) // and its view of the segment is cached
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := seg.remount(ctx); err != nil {
			t.Fatal(err)
		}
		if seg.id() != id {
			t.Fatalf("the remount changed the segment's id from %d to %d", id, seg.id())
		}
		var resp wire.QuerySegmentsResp
		if err := reader.master.Call(ctx, wire.OpQuerySegments, &wire.QuerySegmentsReq{IDs: []uint64{id}}, &resp); err != nil {
			t.Fatal(err)
		}
		if len(resp.Segs) != 1 || len(resp.Segs[0].UCX) == 0 || bytes.Equal(resp.Segs[0].UCX, before.UCX) {
			t.Fatalf("the master's desc after a remount: %d descs, the old UCX desc kept or none", len(resp.Segs))
		}
		rep := replicaOf(t, ctx, reader, "k")
		got := make([]byte, len(v))
		errs := reader.engine.Do(ctx, []transfer.Op{{Peer: before, Offset: rep.Offset, Bufs: [][]byte{got}, Grant: rep.Grant}})
		if wire.CodeOf(errs[0]) != wire.ErrTransferFail || !bytes.Equal(got, make([]byte, len(v))) {
			t.Fatalf("a read with the closed exposure's desc: %v", errs[0])
		}
		reader.engine.Forget(id)
		reader.peers.forget(id)
		ops := reader.engine.RouteOps(transfer.RouteUCX)
		dest[0][0] = make([]byte, len(v))
		if n := reader.Reads().GetInto([]string{"k"}, dest); n[0] != int64(len(v)) || !bytes.Equal(dest[0][0], v) {
			t.Fatalf("get after the remount: %d", n[0])
		}
		if reader.engine.RouteOps(transfer.RouteUCX) == ops {
			t.Fatal("the get after the remount did not go over UCX")
		}
		// The owner's own view of the segment follows the remount too.
		dest[0][0] = make([]byte, len(v))
		if n := owner.Reads().GetInto([]string{"k"}, dest); n[0] != int64(len(v)) || !bytes.Equal(dest[0][0], v) {
			t.Fatalf("the owner's get after the remount: %d", n[0])
		}
	})
}

// An unmounted segment's exposure is closed before its memory goes: a
// reader still holding its desc, with a grant still in date, gets an
// error and no bytes.
func TestUCXUnmountedSegmentsDescIsRefused(t *testing.T) {
	eachUCXSegment(t, func(t *testing.T, m *server.Server, owner *Client, seg ucxSegment) {
		if seg.unmount == nil {
			t.Skip("the setup segment is freed only by Close, after its exposure is revoked (Client.release)")
		}
		reader := newUCXClient(t, m.Addr(), 0)
		v := testkit.Pattern(10, 200_000)
		if codes := reader.Writes().PutBatch([]PutItem{{Key: "k", Parts: [][]byte{v}}}, wire.ReplicaConfig{ReplicaNum: 1}); codes[0] != wire.OK {
			t.Fatal(codes[0])
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		stale, _ := reader.peers.get(seg.id())
		if len(stale.UCX) == 0 {
			t.Fatal("the reader has no UCX desc of the owner's segment")
		}
		rep := replicaOf(t, ctx, reader, "k")
		if err := seg.unmount(); err != nil {
			t.Fatal(err)
		}
		if seg.exposed() {
			t.Fatal("the exposure is open after the unmount")
		}
		got := make([]byte, len(v))
		errs := reader.engine.Do(ctx, []transfer.Op{{Peer: stale, Offset: rep.Offset, Bufs: [][]byte{got}, Grant: rep.Grant}})
		if wire.CodeOf(errs[0]) != wire.ErrTransferFail || !bytes.Equal(got, make([]byte, len(v))) {
			t.Fatalf("a read with the unmounted segment's desc: err %v, bytes returned %v", errs[0], !bytes.Equal(got, make([]byte, len(v))))
		}
	})
}

// A heartbeat's remount racing an unmount never exposes the segment again
// nor leaves it mounted at the master: remounts (of a list made before the
// unmount) keep coming while the unmount runs; one in progress ends before
// the memory goes, one that got through at the master after the unmount
// is undone there, and one that starts after the release does nothing.
func TestUCXRemountRacingAnUnmount(t *testing.T) {
	eachUCXSegment(t, func(t *testing.T, m *server.Server, owner *Client, seg ucxSegment) {
		if seg.unmount == nil {
			t.Skip("the setup segment is remounted by the heartbeat only, which Close stops before revoking")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		listed := func() bool {
			for _, d := range m.Core().Segments() {
				if d.Name == seg.seg.name {
					return true
				}
			}
			return false
		}
		// Remounts until one finds the segment revoked.
		first, done := make(chan struct{}), make(chan int)
		go func() {
			n := 0
			for ctx.Err() == nil {
				if err := owner.segs.remountOne(ctx, seg.seg); err != nil {
					t.Error(err)
				}
				if n++; n == 1 {
					close(first)
				}
				if !seg.exposed() {
					break
				}
			}
			done <- n
		}()
		<-first // remounts ran before the unmount, and keep running beside it
		err := seg.unmount()
		n := <-done
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%d remounts, the last of them beside the unmount", n)
		if seg.exposed() || listed() {
			t.Fatalf("after the unmount: exposed %v, at the master %v", seg.exposed(), listed())
		}
		if _, err := owner.segs.mountAtMaster(ctx, seg.seg); err != errRevoked {
			t.Fatalf("a mount after the unmount: %v, want errRevoked", err)
		}
		if err := owner.segs.remountOne(ctx, seg.seg); err != nil || seg.exposed() || listed() {
			t.Fatalf("a remount after the unmount: err %v, exposed %v, at the master %v", err, seg.exposed(), listed())
		}
	})
}

// A remount that reaches the master after an unmount did, while the
// memory is not yet released (a call in flight holds it), is undone at
// the master: the segment is not left mounted with memory about to go.
func TestUCXRemountBetweenUnmountAndRelease(t *testing.T) {
	eachUCXSegment(t, func(t *testing.T, m *server.Server, owner *Client, seg ucxSegment) {
		if seg.unmount == nil {
			t.Skip("the setup segment is not unmounted by itself")
		}
		listed := func() bool {
			for _, d := range m.Core().Segments() {
				if d.Name == seg.seg.name {
					return true
				}
			}
			return false
		}
		owner.inFlight.RLock() // a call in flight: the release waits for it
		unmounted := make(chan error)
		go func() { unmounted <- seg.unmount() }()
		testkit.WaitFor(t, "the master to unmount the segment", func() bool { return !listed() })
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err := owner.segs.remountOne(ctx, seg.seg)
		stillListed := listed()
		owner.inFlight.RUnlock()
		if uerr := <-unmounted; uerr != nil {
			t.Fatal(uerr)
		}
		if err != nil || stillListed {
			t.Fatalf("a remount between the master's unmount and the release: err %v, left mounted at the master %v", err, stillListed)
		}
		if seg.exposed() || listed() {
			t.Fatalf("after the unmount: exposed %v, at the master %v", seg.exposed(), listed())
		}
	})
}

// A reader holding a desc that a remount made stale (same id, new
// exposure) does not see one failed call: its gets (one key, read first
// from its spot, and a batch) and its put, in flight together, each find
// the old desc refused, ask the master for the new one and succeed with
// the right bytes, over UCX.
func TestUCXStaleDescIsRefreshedWithinTheCall(t *testing.T) {
	eachUCXSegment(t, func(t *testing.T, m *server.Server, owner *Client, seg ucxSegment) {
		reader := newUCXClient(t, m.Addr(), 0)
		const n = 4
		vals := make([][]byte, n)
		for i := range vals {
			vals[i] = testkit.Pattern(uint64(20+i), 50_000+i)
			if codes := reader.Writes().PutBatch([]PutItem{{Key: fmt.Sprint("s", i), Parts: [][]byte{vals[i]}}},
				wire.ReplicaConfig{ReplicaNum: 1}); codes[0] != wire.OK {
				t.Fatal(codes[0])
			}
		}
		id := seg.id()
		before, _ := reader.peers.get(id)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := seg.remount(ctx); err != nil || seg.id() != id {
			t.Fatalf("remount: %v (id %d, was %d)", err, seg.id(), id)
		}
		if cached, _ := reader.peers.get(id); !bytes.Equal(cached.UCX, before.UCX) {
			t.Fatal("the reader's cached desc changed by itself: nothing stale to test")
		}
		ops := reader.engine.RouteOps(transfer.RouteUCX)
		fresh := testkit.Pattern(99, 70_000)
		errs := make(chan error, n+2)
		for i := 0; i < n; i++ {
			go func() {
				dest := make([]byte, len(vals[i]))
				if got := reader.Reads().GetIntoOne(fmt.Sprint("s", i), [][]byte{dest}); got != int64(len(dest)) || !bytes.Equal(dest, vals[i]) {
					errs <- fmt.Errorf("get s%d: %d", i, got)
					return
				}
				errs <- nil
			}()
		}
		go func() {
			keys := make([]string, n)
			dests := make([][][]byte, n)
			for i := range keys {
				keys[i], dests[i] = fmt.Sprint("s", i), [][]byte{make([]byte, len(vals[i]))}
			}
			for i, got := range reader.Reads().GetInto(keys, dests) {
				if got != int64(len(vals[i])) || !bytes.Equal(dests[i][0], vals[i]) {
					errs <- fmt.Errorf("batch get s%d: %d", i, got)
					return
				}
			}
			errs <- nil
		}()
		go func() {
			if codes := reader.Writes().PutBatch([]PutItem{{Key: "fresh", Parts: [][]byte{fresh}}}, wire.ReplicaConfig{ReplicaNum: 1}); codes[0] != wire.OK {
				errs <- fmt.Errorf("put after the remount: %v", codes[0])
				return
			}
			errs <- nil
		}()
		for range n + 2 {
			if err := <-errs; err != nil {
				t.Error(err)
			}
		}
		dest := [][][]byte{{make([]byte, len(fresh))}}
		if got := owner.Reads().GetInto([]string{"fresh"}, dest); got[0] != int64(len(fresh)) || !bytes.Equal(dest[0][0], fresh) {
			t.Fatalf("the owner's read of the put after the remount: %d", got[0])
		}
		if reader.engine.RouteOps(transfer.RouteUCX) == ops {
			t.Fatal("nothing went over UCX after the remount")
		}
	})
}
