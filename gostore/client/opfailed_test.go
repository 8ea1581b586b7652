// opfailed_test.go: what an op that failed in transfer over TCP drops,
// with real clients and the owner's real transfer server on loopback.

package client

import (
	"bytes"
	"context"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gostore/gostore/gostore/internal/testkit"
	"github.com/gostore/gostore/gostore/transfer"
	"github.com/gostore/gostore/gostore/wire"
)

// A call whose op fails in transfer over TCP does not cut short another
// call's TCP reads from the same transfer server: a reader gets a 16 MiB
// object on the owner's segment 10 times, bytes checked, and then asks for
// a small object's replica descriptors 200 times, while other calls' ops
// on that segment fail in transfer one after another (their ctx ended)
// and go through opFailed, as a get, put or plan transfer does. Before, opFailed forgot the segment
// in the engine, which closed the whole connection pool to the owner's
// transfer server: the gets' requests on it failed, their one retry on
// fresh connections was cut short too, and a get that had taken the pool
// before it closed could not even send. The failed call
// still drops the segment's cached desc, so the next call asks the
// master again.
func TestTCPAFailedCallLeavesOtherCallsAlone(t *testing.T) {
	forceTCP(t)
	m := testkit.StartMaster(t)
	owner := newClient(t, m.Addr(), 32<<20)
	reader := newClient(t, m.Addr(), 0)
	v := testkit.Pattern(51, 16<<20)
	small := testkit.Pattern(52, 4096)
	if codes := reader.Writes().PutBatch([]PutItem{{Key: "big", Parts: [][]byte{v}}, {Key: "small", Parts: [][]byte{small}}},
		wire.ReplicaConfig{ReplicaNum: 1}); codes[0] != wire.OK || codes[1] != wire.OK {
		t.Fatal(codes)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rep := replicaOf(t, ctx, reader, "small")
	id := owner.peers.ownID
	if rep.SegID != id {
		t.Fatalf("the object is on segment %d, not the owner's %d", rep.SegID, id)
	}
	get := bigGet(reader, "big", v)
	if err := get(make([]byte, len(v))); err != nil {
		t.Fatal(err)
	}
	peer, ok := reader.peers.get(id)
	if !ok || reader.engine.Route(peer) != transfer.RouteTCP {
		t.Fatalf("the owner's segment is not reached over TCP (cached %v)", ok)
	}
	// What a call does once its op failed in transfer: here its ctx had
	// ended, which Do reports as ErrTransferFail without touching the
	// connections the gets use.
	fail := func() {
		p, ok := reader.peers.get(id)
		if !ok {
			p = peer
		}
		done, end := context.WithCancel(context.Background())
		end()
		op := transfer.Op{Peer: p, Offset: rep.Offset, Bufs: [][]byte{make([]byte, len(small))}, Grant: rep.Grant}
		err := reader.engine.Do(done, []transfer.Op{op})[0]
		if wire.CodeOf(err) != wire.ErrTransferFail {
			t.Errorf("a read whose ctx ended: %v", err)
		}
		reader.opFailed(&op, err)
	}

	getsBesideFailures(t, get, len(v), 10, fail)
	// The replica descriptors name the object beside such failures too.
	want, codes := reader.Keys().ReplicaDescs([]string{"small"})
	if codes[0] != wire.OK || len(want[0]) != 1 {
		t.Fatalf("replica descriptors of small: %v, %v", want[0], codes[0])
	}
	describe := func([]byte) error {
		got, codes := reader.Keys().ReplicaDescs([]string{"small"})
		if codes[0] != wire.OK || !slices.Equal(got[0], want[0]) {
			return wire.Errorf(wire.ErrInternal, "replica descriptors of small: %v, %v; want %v", got[0], codes[0], want[0])
		}
		return nil
	}
	getsBesideFailures(t, describe, 0, 200, fail)
	fail()
	if _, cached := reader.peers.get(id); cached {
		t.Fatal("the failed call left the segment's desc cached: the next call would not ask the master again")
	}
	if err := get(make([]byte, len(v))); err != nil {
		t.Fatal(err)
	}
}

// bigGet is a get of key by reader into dest that checks it returned v's
// bytes.
func bigGet(reader *Client, key string, v []byte) func(dest []byte) error {
	return func(dest []byte) error {
		if got := reader.Reads().GetInto([]string{key}, [][][]byte{{dest}}); got[0] != int64(len(v)) {
			return wire.Errorf(wire.Code(got[0]), "get of %s: %d", key, got[0])
		}
		if !bytes.Equal(dest, v) {
			return wire.Errorf(wire.ErrInternal, "get of %s: bytes differ", key)
		}
		return nil
	}
}

// getsBesideFailures runs gets gets of size bytes while fail runs one
// failed call after another on a goroutine of its own, and fails t if a
// get failed.
func getsBesideFailures(t *testing.T, get func(dest []byte) error, size, gets int, fail func()) {
	t.Helper()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var failures atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			fail()
			failures.Add(1)
		}
	}()
	var bad []error
	dest := make([]byte, size)
	for range gets {
		clear(dest)
		if err := get(dest); err != nil {
			bad = append(bad, err)
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("%d gets beside %d failed calls", gets, failures.Load())
	if len(bad) > 0 {
		t.Fatalf("%d of %d gets of the same segment failed beside the failed calls; the first: %v", len(bad), gets, bad[0])
	}
}

// A segment whose cached desc a failed call dropped is still let go once
// the master drops it: a reader maps a same-host owner's segment, a call
// of it fails in transfer (its ctx had ended), and the owner leaves
// without the reader asking for its segment again. opFailed no longer
// forgets the segment in the engine, so the heartbeat's pruning
// (prunePeers) must unmap it, as it does for a cached segment. Before,
// the pruning asked the master only of the cached segments, and the
// failed call had dropped this one from the cache: the owner's whole
// segment stayed mapped here (the finding of tests/test_soak_findings.py
// back by another way), as its TCP connections and its UCX endpoint would.
func TestAFailedCallsSegmentIsStillLetGoWhenItGoes(t *testing.T) {
	m := testkit.StartMaster(t)
	owner := newClient(t, m.Addr(), 8<<20)
	reader := newClient(t, m.Addr(), 0)
	v := testkit.Pattern(53, 4096)
	if codes := reader.Writes().PutBatch([]PutItem{{Key: "k", Parts: [][]byte{v}}}, wire.ReplicaConfig{ReplicaNum: 1}); codes[0] != wire.OK {
		t.Fatal(codes[0])
	}
	dst := make([]byte, len(v))
	if got := reader.Reads().GetInto([]string{"k"}, [][][]byte{{dst}}); got[0] != int64(len(v)) || !bytes.Equal(dst, v) {
		t.Fatalf("get: %d", got[0])
	}
	id := owner.peers.ownID
	peer, ok := reader.peers.get(id)
	if !ok || reader.engine.Route(peer) != transfer.RouteShm {
		t.Fatalf("the owner's segment is not mapped here (cached %v)", ok)
	}
	name := "/memfd:gostore:" + owner.Hostname()
	if n := mappings(t, name); n < 2 { // the owner's own and the reader's
		t.Fatalf("%d mappings of %s, want 2 or more", n, name)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	op := transfer.Op{Peer: peer, Offset: 0, Bufs: [][]byte{dst}}
	err := reader.engine.Do(ctx, []transfer.Op{op})[0]
	if wire.CodeOf(err) != wire.ErrTransferFail {
		t.Fatalf("a read whose ctx ended: %v", err)
	}
	reader.opFailed(&op, err)
	owner.Close()
	testkit.WaitFor(t, "the reader to unmap the segment the master dropped", func() bool { return mappings(t, name) == 0 })
}

// mappings counts this process's mappings of the file name (as
// /proc/self/maps writes it, " (deleted)" aside).
func mappings(t *testing.T, name string) int {
	t.Helper()
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(maps), "\n") {
		if f := strings.Fields(line); len(f) >= 6 && strings.TrimSuffix(strings.Join(f[5:], " "), " (deleted)") == name {
			n++
		}
	}
	return n
}
