// ucxfaults_test.go: what a failed UCX op drops, and the calls that
// follow an owner's remount, with real clients over the host's UCX.

package client

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/gostore/gostore/gostore/internal/testkit"
	"github.com/gostore/gostore/gostore/transfer"
	"github.com/gostore/gostore/gostore/ucx"
	"github.com/gostore/gostore/gostore/wire"
)

// A call whose op fails over UCX on a segment does not cut short another
// call's ops to the same segment: a reader's gets of a 16 MiB object on
// the owner's segment, bytes checked, run while other calls on that
// segment fail one after another (getsBesideFailures), either with a
// range outside the segment (refused before anything is posted), for good
// over UCX with the desc a remount made stale, or with the current desc
// as their ctx had ended. Before, the failure made the client
// forget the segment in the engine, whose UCX part force-closed the
// endpoint the gets were using.
func TestUCXAFailedCallLeavesOtherCallsAlone(t *testing.T) {
	if info := ucx.Probe(); !info.Available {
		t.Skipf("UCX unavailable: %s", info.Reason)
	}
	failures := map[string]func(t *testing.T, reader *Client, stale transfer.Peer, rep wire.Replica) func(){
		// The plan API's transfers go through clientHost.Transfer.
		"out of range": func(t *testing.T, reader *Client, _ transfer.Peer, rep wire.Replica) func() {
			cur, _ := reader.peers.get(rep.SegID)
			return func() {
				ctx, cancel := reader.ctx()
				defer cancel()
				op := transfer.Op{Peer: cur, Offset: cur.Size, Bufs: [][]byte{make([]byte, 4096)}, Grant: rep.Grant}
				if err := (clientHost{reader}).Transfer(ctx, op); wire.CodeOf(err) != wire.ErrInvalidParams {
					t.Errorf("a transfer past the segment's end: %v", err)
				}
			}
		},
		// What a get, put or zero-copy call does once its op failed for
		// good (doRefreshing's retry had nothing newer to try).
		"final failure": func(t *testing.T, reader *Client, stale transfer.Peer, rep wire.Replica) func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			op := transfer.Op{Peer: stale, Offset: rep.Offset, Bufs: [][]byte{make([]byte, 4096)}, Grant: rep.Grant}
			err := reader.engine.Do(ctx, []transfer.Op{op})[0]
			if wire.CodeOf(err) != wire.ErrTransferFail {
				t.Fatalf("a read with the stale desc: %v", err)
			}
			return func() { reader.opFailed(&op, err) }
		},
		// A call whose ctx had ended: its op carried the segment's
		// current desc, which opFailed drops from the cache while the
		// loop's gets are between their resolve and their op.
		"ctx ended": func(t *testing.T, reader *Client, _ transfer.Peer, rep wire.Replica) func() {
			cur, _ := reader.peers.get(rep.SegID)
			return func() {
				done, end := context.WithCancel(context.Background())
				end()
				op := transfer.Op{Peer: cur, Offset: rep.Offset, Bufs: [][]byte{make([]byte, 4096)}, Grant: rep.Grant}
				err := reader.engine.Do(done, []transfer.Op{op})[0]
				if wire.CodeOf(err) != wire.ErrTransferFail {
					t.Errorf("a read whose ctx ended: %v", err)
				}
				reader.opFailed(&op, err)
			}
		},
	}
	for name, failure := range failures {
		t.Run(name, func(t *testing.T) {
			m := testkit.StartMaster(t)
			owner := newUCXClient(t, m.Addr(), 32<<20)
			reader := newUCXClient(t, m.Addr(), 0)
			v := testkit.Pattern(31, 16<<20)
			small := testkit.Pattern(32, 4096)
			if codes := reader.Writes().PutBatch([]PutItem{{Key: "big", Parts: [][]byte{v}}, {Key: "small", Parts: [][]byte{small}}},
				wire.ReplicaConfig{ReplicaNum: 1}); codes[0] != wire.OK || codes[1] != wire.OK {
				t.Fatal(codes)
			}
			id := owner.peers.ownID
			stale, _ := reader.peers.get(id)
			if len(stale.UCX) == 0 {
				t.Fatal("the reader has no UCX desc of the owner's segment")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			rep := replicaOf(t, ctx, reader, "small")
			if err := owner.own.mount(ctx); err != nil {
				t.Fatal(err)
			}
			get := bigGet(reader, "big", v)
			if err := get(make([]byte, len(v))); err != nil { // the reader now holds the new desc
				t.Fatal(err)
			}
			fail := failure(t, reader, stale, rep)
			getsBesideFailures(t, get, len(v), 10, fail)
		})
	}
}

// The plan API's reads and writes, and replica tasks, follow an owner's
// remount within the call, as gets and puts do: the transfer with the
// stale desc is refused, and the call asks the master for the new desc
// and moves the bytes with it.
func TestUCXStaleDescIsRefreshedForPlansAndTasks(t *testing.T) {
	if info := ucx.Probe(); !info.Available {
		t.Skipf("UCX unavailable: %s", info.Reason)
	}
	remount := func(t *testing.T, reader *Client, owners ...*Client) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, o := range owners {
			id := o.peers.ownID
			before, ok := reader.peers.get(id)
			if !ok || len(before.UCX) == 0 {
				t.Fatal("the reader has no UCX desc of the owner's segment")
			}
			if err := o.own.mount(ctx); err != nil || o.peers.ownID != id {
				t.Fatalf("remount: %v (id %d, was %d)", err, o.peers.ownID, id)
			}
			if cached, _ := reader.peers.get(id); !bytes.Equal(cached.UCX, before.UCX) {
				t.Fatal("the reader's cached desc changed by itself: nothing stale to test")
			}
		}
	}

	t.Run("plan", func(t *testing.T) {
		m := testkit.StartMaster(t)
		owner := newUCXClient(t, m.Addr(), 8<<20)
		reader := newUCXClient(t, m.Addr(), 0)
		if _, err := owner.Plans().Join(); err != nil {
			t.Fatal(err)
		}
		v := testkit.Pattern(41, 100_000)
		write := func(key string) {
			t.Helper()
			dest, err := reader.Plans().Owner(key, 0, "")
			if err != nil {
				t.Fatal(err)
			}
			p, err := reader.Plans().OpenForWrite(key, uint64(len(v)), 4096, dest, 0)
			if err != nil {
				t.Fatalf("open %s: %v", key, err)
			}
			if p.Writable() != nil {
				t.Fatal("the owner's memory is mapped here: nothing goes over UCX")
			}
			if err := reader.Plans().Write(p, 0, v); err != nil {
				t.Fatalf("write %s: %v", key, err)
			}
			if err := reader.Plans().Commit(key); err != nil {
				t.Fatalf("commit %s: %v", key, err)
			}
		}
		read := func(key string) {
			t.Helper()
			dst := make([]byte, len(v))
			if n, err := reader.Plans().Read(key, dst); err != nil || n != len(v) || !bytes.Equal(dst, v) {
				t.Fatalf("plan read of %s: %d, %v (bytes equal %v)", key, n, err, bytes.Equal(dst, v))
			}
		}
		write("p1")
		read("p1")
		remount(t, reader, owner)
		ops := reader.engine.RouteOps(transfer.RouteUCX)
		read("p1")
		remount(t, reader, owner)
		write("p2")
		read("p2")
		if reader.engine.RouteOps(transfer.RouteUCX) == ops {
			t.Fatal("nothing went over UCX after the remount")
		}
	})

	// A write plan keeps the peer it opened with: once one of its
	// transfers learned the master's new desc, the others go with it, one
	// UCX op each, not a failed one with the old desc and a retry.
	t.Run("plan open across a remount", func(t *testing.T) {
		m := testkit.StartMaster(t)
		owner := newUCXClient(t, m.Addr(), 8<<20)
		reader := newUCXClient(t, m.Addr(), 0)
		if _, err := owner.Plans().Join(); err != nil {
			t.Fatal(err)
		}
		v := testkit.Pattern(43, 100_000)
		dest, err := reader.Plans().Owner("p", 0, "")
		if err != nil {
			t.Fatal(err)
		}
		p, err := reader.Plans().OpenForWrite("p", uint64(len(v)), 4096, dest, 0)
		if err != nil || p.Writable() != nil {
			t.Fatalf("open: %v (mapped here: %v)", err, p != nil && p.Writable() != nil)
		}
		remount(t, reader, owner)
		half := len(v) / 2
		if err := reader.Plans().Write(p, 0, v[:half]); err != nil {
			t.Fatalf("the first write after the remount: %v", err)
		}
		ops := reader.engine.RouteOps(transfer.RouteUCX)
		if err := reader.Plans().Write(p, uint64(half), v[half:]); err != nil {
			t.Fatalf("the second write after the remount: %v", err)
		}
		if n := reader.engine.RouteOps(transfer.RouteUCX) - ops; n != 1 {
			t.Fatalf("the second write took %d UCX ops, want 1: it tried the stale desc again", n)
		}
		if err := reader.Plans().Commit("p"); err != nil {
			t.Fatal(err)
		}
		dst := make([]byte, len(v))
		if n, err := reader.Plans().Read("p", dst); err != nil || n != len(v) || !bytes.Equal(dst, v) {
			t.Fatalf("plan read: %d, %v (bytes equal %v)", n, err, bytes.Equal(dst, v))
		}
	})

	t.Run("task", func(t *testing.T) {
		m := testkit.StartMaster(t)
		a := newUCXClient(t, m.Addr(), 8<<20)
		b := newUCXClient(t, m.Addr(), 8<<20)
		c := newUCXClient(t, m.Addr(), 8<<20)
		runner := newUCXClient(t, m.Addr(), 0) // reads the source and writes the target over UCX
		v := testkit.Pattern(42, 300_000)
		if codes := runner.Writes().PutBatch([]PutItem{{Key: "k", Parts: [][]byte{v}}},
			wire.ReplicaConfig{Preferred: []string{a.Hostname()}}); codes[0] != wire.OK {
			t.Fatal(codes[0])
		}
		for _, o := range []*Client{b, c} { // the runner caches b's and c's desc too
			if codes := runner.Writes().PutBatch([]PutItem{{Key: "on/" + o.Hostname(), Parts: [][]byte{v[:4096]}}},
				wire.ReplicaConfig{Preferred: []string{o.Hostname()}}); codes[0] != wire.OK {
				t.Fatal(codes[0])
			}
		}
		wait := func(id string, err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
			var info wire.TaskInfo
			testkit.WaitFor(t, "the task to end", func() bool {
				info, err = runner.Tasks().QueryTask(id)
				return err != nil || info.Status != "PROCESSING"
			})
			if err != nil || info.Status != "SUCCESS" {
				t.Fatalf("task: %+v, %v", info, err)
			}
		}
		check := func(holder *Client) {
			t.Helper()
			dst := make([]byte, len(v))
			if got := holder.Reads().GetInto([]string{"k"}, [][][]byte{{dst}}); got[0] != int64(len(v)) || !bytes.Equal(dst, v) {
				t.Fatalf("%s's read of its copy: %d", holder.Hostname(), got[0])
			}
		}
		// The source's and the target's descs are both stale.
		remount(t, runner, a, b)
		ops := runner.engine.RouteOps(transfer.RouteUCX)
		wait(runner.Tasks().CreateCopyTask("k", []string{b.Hostname()}))
		check(b)
		if runner.engine.RouteOps(transfer.RouteUCX) == ops {
			t.Fatal("the copy did not go over UCX")
		}
		remount(t, runner, b, c)
		wait(runner.Tasks().CreateMoveTask("k", b.Hostname(), c.Hostname()))
		check(c)
	})
}
