package planclient_test

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gostore/gostore/gostore/client"
	"github.com/gostore/gostore/gostore/client/clienttest"
	"github.com/gostore/gostore/gostore/internal/testkit"
	"github.com/gostore/gostore/gostore/planclient"
	"github.com/gostore/gostore/gostore/wire"
)

// planCluster is a master, an owner (a member with a heap), a producer and
// a reader (members too: every client of a plan cluster is one).
func planCluster(t *testing.T, extra ...string) (owner, producer, reader *client.Client) {
	m := testkit.StartMaster(t, extra...)
	owner = clienttest.New(t, m.Addr(), 8<<20)
	producer = clienttest.New(t, m.Addr(), 1<<20)
	reader = clienttest.New(t, m.Addr(), 1<<20)
	for i, c := range []*client.Client{owner, producer, reader} {
		if r, err := c.Plans().Join(); err != nil || r != i {
			t.Fatalf("join %d: rank %d, %v", i, r, err)
		}
	}
	return owner, producer, reader
}

func TestPlanProducerWritesIntoTheOwner(t *testing.T) {
	for _, tcp := range []bool{false, true} {
		t.Run(fmt.Sprintf("tcp=%v", tcp), func(t *testing.T) {
			if tcp {
				clienttest.ForceTCP(t)
			}
			owner, producer, reader := planCluster(t)
			dest, err := producer.Plans().Owner("sess:42:kv:L0", 0, "")
			if err != nil || dest.Seg.Name != owner.Hostname() {
				t.Fatalf("owner rank 0: %+v %v", dest, err)
			}
			v := testkit.Pattern(42, 300<<10)
			p, err := producer.Plans().OpenForWrite("sess:42:kv:L0", uint64(len(v)), 64<<10, dest, 0)
			if err != nil {
				t.Fatal(err)
			}
			if p.DstRank != 0 || p.NPages != 5 || p.Bytes != uint64(len(v)) || p.Payload != p.HeaderOff+64 {
				t.Fatalf("plan %+v", p)
			}
			if tcp != (p.Writable() == nil) {
				t.Fatalf("writable view with tcp=%v: %v", tcp, p.Writable() != nil)
			}
			// Nothing to see before the commit.
			if _, err := reader.Plans().Read("sess:42:kv:L0", make([]byte, len(v))); !errors.Is(err, planclient.ErrNotReady) {
				t.Fatalf("read before commit: %v", err)
			}
			if got := reader.Keys().GetSize("sess:42:kv:L0"); got != int64(wire.ErrReplicaIsNotReady) {
				t.Fatalf("regular API before commit: %d", got)
			}
			if w := p.Writable(); w != nil {
				copy(w, v)
			} else if err := producer.Plans().Write(p, 0, v); err != nil {
				t.Fatal(err)
			}
			if err := producer.Plans().Commit("sess:42:kv:L0"); err != nil {
				t.Fatal(err)
			}
			dst := make([]byte, len(v)+10)
			if n, err := reader.Plans().Read("sess:42:kv:L0", dst); err != nil || n != len(v) || !bytes.Equal(dst[:n], v) {
				t.Fatalf("read after commit: %d %v", n, err)
			}
			meta, err := reader.Plans().Locate("sess:42:kv:L0")
			if err != nil || meta.OwnerRank != 0 || meta.Bytes != uint64(len(v)) || meta.PageBytes != 64<<10 ||
				meta.NPages != 5 || meta.Epoch != p.Epoch || meta.PayloadOff != p.Payload {
				t.Fatalf("meta %+v %v", meta, err)
			}
			clear(dst)
			if n, err := reader.Plans().ReadAt(meta, dst); err != nil || !bytes.Equal(dst[:n], v) {
				t.Fatalf("one-hop read: %d %v", n, err)
			}
			if tcp {
				// Over TCP the meta's read grant is what the owner serves:
				// the same meta without it is refused, and reads nothing.
				bare := *meta
				bare.Grant = nil
				clear(dst)
				if _, err := reader.Plans().ReadAt(&bare, dst); wire.CodeOf(err) != wire.ErrIllegalClient || bytes.Contains(dst, v[:64]) {
					t.Fatalf("one-hop read without the grant: %v", err)
				}
			}
			// A plan object is an object: the regular API sees it (once
			// the master has heard of the commit).
			producer.Plans().FlushCommits()
			if reader.Keys().Exist([]string{"sess:42:kv:L0"})[0] != 1 || owner.Keys().GetSize("sess:42:kv:L0") != int64(len(v)+64) {
				t.Fatal("the regular API does not see the plan object")
			}
		})
	}
}

// A reader holding an ObjMeta never reads a removed or reused slot as
// valid: the epoch in the header moved on.
func TestPlanEpochGuardsReuse(t *testing.T) {
	owner, producer, reader := planCluster(t)
	dest, _ := producer.Plans().Owner("", 0, owner.Hostname())
	write := func(key string, seed uint64) *planclient.WritePlan {
		p, err := producer.Plans().OpenForWrite(key, 4096, 4096, dest, 0)
		if err != nil {
			t.Fatal(err)
		}
		copy(p.Writable(), testkit.Pattern(seed, 4096))
		if err := producer.Plans().Commit(key); err != nil {
			t.Fatal(err)
		}
		return p
	}
	first := write("a", 1)
	meta, err := reader.Plans().Locate("a")
	if err != nil {
		t.Fatal(err)
	}
	if err := producer.Plans().Remove("a"); err != nil {
		t.Fatal(err)
	}
	if _, err := reader.Plans().ReadAt(meta, make([]byte, 4096)); err == nil {
		t.Fatal("a removed object read through an old meta")
	}
	second := write("b", 2) // the freed slot comes back for the next object
	if second.HeaderOff != first.HeaderOff {
		t.Fatalf("slot not reused (%d, %d): the test shows nothing", first.HeaderOff, second.HeaderOff)
	}
	dst := make([]byte, 4096)
	if _, err := reader.Plans().ReadAt(meta, dst); err == nil || bytes.Equal(dst, testkit.Pattern(2, 4096)) {
		t.Fatalf("an old meta read the reused slot: %v", err)
	}
	if _, err := reader.Plans().Read("a", dst); !errors.Is(err, planclient.ErrUnknown) {
		t.Fatalf("removed key: %v", err)
	}
	st, _, _ := reader.Plans().Stats()
	if st.StaleReads.Load() < 2 {
		t.Fatalf("stale reads not counted: %d", st.StaleReads.Load())
	}
}

// A producer that dies between open and commit leaves a slot that is
// reclaimed (after client_ttl) and never read as valid.
func TestPlanOfADeadProducerIsReclaimed(t *testing.T) {
	m := testkit.StartMaster(t, "--client_ttl=1", "--tick_interval_ms=20")
	owner := clienttest.New(t, m.Addr(), 4<<20)
	owner.Plans().Join()
	reader := clienttest.New(t, m.Addr(), 0)
	// The producer dies once it has opened its plan: it never pings after
	// its start, and nothing closes it before the test ends, so the
	// master hears nothing more from it.
	producer := clienttest.NewWith(t, client.Config{LocalHostname: "127.0.0.1", MasterServerAddr: m.Addr(),
		LocalBufferSize: 1 << 20, PingInterval: time.Hour})
	dest, _ := producer.Plans().Owner("k", -1, "")
	p, err := producer.Plans().OpenForWrite("k", 8192, 4096, dest, 0)
	if err != nil {
		t.Fatal(err)
	}
	copy(p.Writable(), testkit.Pattern(3, 4096)) // half written, then the producer is silent
	if _, err := reader.Plans().Read("k", make([]byte, 8192)); !errors.Is(err, planclient.ErrNotReady) {
		t.Fatalf("read of an unfinished plan: %v", err)
	}
	testkit.WaitFor(t, "the dead producer's plan reclaimed", func() bool {
		return reader.Keys().GetSize("k") == int64(wire.ErrObjectNotFound)
	})
	// The slot serves a new object; the old plan can never be published.
	dest2, _ := reader.Plans().Owner("k2", -1, "")
	p2, err := reader.Plans().OpenForWrite("k2", 8192, 4096, dest2, 0)
	if err != nil {
		t.Fatal(err)
	}
	copy(p2.Writable(), testkit.Pattern(4, 8192))
	if err := reader.Plans().Commit("k2"); err != nil {
		t.Fatal(err)
	}
	if _, err := reader.Plans().Read("k", make([]byte, 8192)); !errors.Is(err, planclient.ErrUnknown) {
		t.Fatalf("the reclaimed key: %v", err)
	}
}

func TestPlanBadInput(t *testing.T) {
	owner, producer, _ := planCluster(t)
	dest, _ := producer.Plans().Owner("", -1, owner.Hostname())
	for _, n := range []uint64{0, 9 << 20} {
		if _, err := producer.Plans().OpenForWrite("x", n, 4096, dest, 0); wire.CodeOf(err) != wire.ErrInvalidParams {
			t.Errorf("open of %d bytes: %v", n, err)
		}
	}
	if _, err := producer.Plans().OpenForWrite("", 10, 4096, dest, 0); wire.CodeOf(err) != wire.ErrInvalidParams {
		t.Errorf("open of an empty key: %v", err)
	}
	if err := producer.Plans().Commit("never-opened"); wire.CodeOf(err) != wire.ErrObjectNotFound {
		t.Errorf("commit of an unknown key: %v", err)
	}
	if _, err := producer.Plans().Owner("x", 99, ""); wire.CodeOf(err) != wire.ErrSegmentNotFound {
		t.Errorf("unknown rank: %v", err)
	}
	// A write outside the payload is refused.
	p, err := producer.Plans().OpenForWrite("gone", 4096, 4096, dest, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := producer.Plans().Write(p, 4000, make([]byte, 200)); wire.CodeOf(err) != wire.ErrInvalidParams {
		t.Errorf("write past the payload: %v", err)
	}
	// A plan removed before its commit is no longer open here and cannot
	// be committed.
	if err := producer.Plans().Remove("gone"); err != nil {
		t.Fatal(err)
	}
	if producer.Plans().OpenPlan("gone") != nil {
		t.Error("a removed plan is still open")
	}
	if err := producer.Plans().Commit("gone"); wire.CodeOf(err) != wire.ErrObjectNotFound {
		t.Errorf("commit after remove: %v", err)
	}
	// A plan whose object another client removed meanwhile: the commit
	// is refused by the master when it arrives, counted, and no reader
	// ever finds the object.
	if _, err := producer.Plans().OpenForWrite("revoked", 4096, 4096, dest, 0); err != nil {
		t.Fatal(err)
	}
	owner.Keys().Remove([]string{"revoked"}, true)
	producer.Plans().Commit("revoked")
	producer.Plans().FlushCommits()
	if st, _, _ := producer.Plans().Stats(); st.CommitFailures.Load() != 1 {
		t.Errorf("commit failures: %d", st.CommitFailures.Load())
	}
	if _, err := owner.Plans().Read("revoked", make([]byte, 4096)); !errors.Is(err, planclient.ErrUnknown) {
		t.Errorf("a removed plan found after its commit: %v", err)
	}
	if _, _, err := producer.Plans().EvictUntil(2); wire.CodeOf(err) != wire.ErrInvalidParams {
		t.Errorf("evict_until_below(2): %v", err)
	}
}

func TestPlanEvictUntilBelow(t *testing.T) {
	owner, producer, reader := planCluster(t)
	dest, _ := producer.Plans().Owner("", -1, owner.Hostname())
	// 12 MiB through the owner's 8 MiB heap: each open that finds no room
	// evicts down to the low watermark first.
	for i := range 12 {
		key := fmt.Sprint("e", i)
		p, err := producer.Plans().OpenForWrite(key, 1<<20, 256<<10, dest, 0.5)
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		copy(p.Writable(), testkit.Pattern(uint64(i), 1<<20))
		producer.Plans().Commit(key)
		time.Sleep(time.Millisecond)
	}
	if _, err := reader.Plans().Read("e0", make([]byte, 1<<20)); !errors.Is(err, planclient.ErrUnknown) {
		t.Fatalf("the oldest object survived the watermark evictions: %v", err)
	}
	n, usage, err := reader.Plans().EvictUntil(0.3)
	if err != nil || n == 0 || usage >= 0.3 {
		t.Fatalf("evicted %d, usage %.2f, %v", n, usage, err)
	}
	if _, err := reader.Plans().Read("e11", make([]byte, 1<<20)); err != nil {
		t.Fatalf("the newest object went: %v", err)
	}
}

// planBench is a master and a member (rank 0) for the plan benchmarks.
func planBench(b *testing.B) (*client.Client, wire.PlanMember) {
	b.Helper()
	m := testkit.StartMaster(b)
	c, err := client.New(client.Config{LocalHostname: "127.0.0.1", MasterServerAddr: m.Addr(), GlobalSegmentSize: 64 << 20, LocalBufferSize: 1 << 20}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	c.Plans().Join()
	dest, _ := c.Plans().Owner("", 0, "")
	return c, dest
}

// BenchmarkPlanCommit times Commit alone (go test -bench PlanCommit).
func BenchmarkPlanCommit(b *testing.B) {
	c, dest := planBench(b)
	var total time.Duration
	for i := 0; i < b.N; i++ {
		key := fmt.Sprint("k", i)
		if _, err := c.Plans().OpenForWrite(key, 4096, 4096, dest, 0.5); err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		c.Plans().Commit(key)
		total += time.Since(t0)
	}
	b.ReportMetric(float64(total.Nanoseconds())/float64(b.N), "ns/commit")
}

// BenchmarkPlanOpen times OpenForWrite alone.
func BenchmarkPlanOpen(b *testing.B) {
	c, dest := planBench(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		key := fmt.Sprint("k", i)
		if _, err := c.Plans().OpenForWrite(key, 4096, 4096, dest, 0.5); err != nil {
			b.Fatal(err)
		}
		if i%1000 == 999 {
			b.StopTimer()
			c.Keys().RemoveAll(true)
			b.StartTimer()
		}
	}
}
