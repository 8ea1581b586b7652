// spots_test.go tests the speculative single-object read: a re-read goes
// to the last known spot while the master is asked, and its bytes count
// only when the master's answer shows nothing changed.

package client

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/gostore/gostore/gostore/internal/testkit"
	"github.com/gostore/gostore/gostore/transfer"
	"github.com/gostore/gostore/gostore/ucx"
	"github.com/gostore/gostore/gostore/wire"
)

// spotCluster is a master, an owner holding every object, a reader with
// no memory of its own and a writer, all over route: "tcp", or "ucx" (the
// UCX route forced on this host; skipped without UCX).
func spotCluster(t *testing.T, route string, masterFlags ...string) (reader, writer *Client) {
	t.Helper()
	mk := newClient
	if route == "ucx" {
		if info := ucx.Probe(); !info.Available {
			t.Skipf("UCX unavailable: %s", info.Reason)
		}
		mk = newUCXClient
	} else {
		forceTCP(t)
	}
	m := testkit.StartMaster(t, masterFlags...)
	mk(t, m.Addr(), 8<<20) // the owner
	return mk(t, m.Addr(), 0), mk(t, m.Addr(), 0)
}

// spotRoutes runs body as subtests "tcp" and "ucx": the routes whose read
// is a round trip to the owner, which a read from a spot overlaps with
// the master's.
func spotRoutes(t *testing.T, body func(t *testing.T, route string)) {
	for _, route := range []string{"tcp", "ucx"} {
		t.Run(route, func(t *testing.T) { body(t, route) })
	}
}

// onlyRoute fails the test unless every op c moved went over route.
func onlyRoute(t *testing.T, c *Client, route string) {
	t.Helper()
	for _, r := range transfer.Routes() {
		if n := c.engine.RouteOps(r); (r.String() == route) != (n > 0) {
			t.Fatalf("%d ops over %s (the test runs over %s)", n, r, route)
		}
	}
}

// writeOne puts (or upserts) v under key once, with the default config.
func writeOne(c *Client, key string, v []byte, upsert bool) wire.Code {
	f := c.Writes().PutBatch
	if upsert {
		f = c.Writes().UpsertBatch
	}
	return f([]PutItem{{Key: key, Parts: [][]byte{v}}}, wire.ReplicaConfig{})[0]
}

func mustPut(t *testing.T, c *Client, key string, v []byte, upsert bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		code := writeOne(c, key, v, upsert)
		// Another client's ended reads reach the master in the background:
		// an upsert right after them may see -714 for a moment.
		if code == wire.ErrObjectReplicaBusy && time.Now().Before(deadline) {
			continue
		}
		if code != wire.OK {
			t.Fatalf("put %s: %v", key, code)
		}
		return
	}
}

func readOne(t *testing.T, c *Client, key string, n int) []byte {
	t.Helper()
	dst := make([]byte, n+100)
	got := c.Reads().GetIntoOne(key, [][]byte{dst})
	if got < 0 {
		t.Fatalf("get %s: %d", key, got)
	}
	return dst[:got]
}

// The first read of a key asks the master first; a re-read reads the spot
// while it asks, and the master's answer confirms it.
func TestARereadComesFromTheSpot(t *testing.T) {
	spotRoutes(t, func(t *testing.T, route string) {
		reader, writer := spotCluster(t, route)
		v := testkit.Pattern(1, 4096)
		mustPut(t, writer, "k", v, false)
		if got := readOne(t, reader, "k", len(v)); !bytes.Equal(got, v) {
			t.Fatal("first read: wrong bytes")
		}
		if reader.reads.specReads.Load() != 0 {
			t.Fatal("a first read went to a spot")
		}
		for i := range 3 {
			if got := readOne(t, reader, "k", len(v)); !bytes.Equal(got, v) {
				t.Fatalf("re-read %d: wrong bytes", i)
			}
		}
		if r, h := reader.reads.specReads.Load(), reader.reads.specHits.Load(); r != 3 || h != 3 {
			t.Fatalf("%d reads from the spot, %d confirmed; want 3 and 3", r, h)
		}
		// GetOneStart: into scratch when it fits (from the spot too), else the
		// lookup comes back unread.
		scratch := make([]byte, 8192)
		p, got := reader.Reads().GetOneStart("k", scratch)
		if p != nil || got != int64(len(v)) || !bytes.Equal(scratch[:got], v) {
			t.Fatalf("GetOneStart into scratch: pending %v, %d", p != nil, got)
		}
		p, got = reader.Reads().GetOneStart("k", make([]byte, 100))
		if p == nil || got != int64(len(v)) {
			t.Fatalf("GetOneStart of an object larger than scratch: pending %v, %d", p != nil, got)
		}
		dst := make([]byte, len(v))
		if n := reader.Reads().GetFinish(p, [][][]byte{{dst}})[0]; n != int64(len(v)) || !bytes.Equal(dst, v) {
			t.Fatalf("finishing the pending get: %d", n)
		}
		onlyRoute(t, reader, route)
	})
}

// Whatever another client did to the key since the spot was taken, the
// read returns what the master says now: an upsert in place (same range,
// new epoch), a removal, a new object under the key. The spot's read is
// discarded each time.
func TestAChangedObjectIsNeverServedFromItsSpot(t *testing.T) {
	spotRoutes(t, func(t *testing.T, route string) {
		reader, writer := spotCluster(t, route)
		v1, v2, v3 := testkit.Pattern(1, 4096), testkit.Pattern(2, 4096), testkit.Pattern(3, 4096)
		mustPut(t, writer, "k", v1, false)
		readOne(t, reader, "k", 4096) // the spot
		hits := func() uint64 { return reader.reads.specHits.Load() }

		tried := func(want uint64) {
			t.Helper()
			if got := reader.reads.specReads.Load(); got != want {
				t.Fatalf("%d reads from a spot, want %d", got, want)
			}
		}
		mustPut(t, writer, "k", v2, true) // in place: the same range, a new epoch
		if got := readOne(t, reader, "k", 4096); !bytes.Equal(got, v2) {
			t.Fatal("after an upsert in place the read returned other bytes than the upsert's")
		}
		tried(1)
		if hits() != 0 {
			t.Fatal("the spot of the replaced object was confirmed")
		}
		if code := writer.Keys().Remove([]string{"k"}, true)[0]; code != wire.OK {
			t.Fatalf("remove: %v", code)
		}
		if got := reader.Reads().GetIntoOne("k", [][]byte{make([]byte, 4096)}); got != int64(wire.ErrObjectNotFound) {
			t.Fatalf("a read after the removal = %d, want -704", got)
		}
		tried(2)
		mustPut(t, writer, "k", v3, false)
		readOne(t, reader, "k", 4096) // a new spot
		if code := writer.Keys().Remove([]string{"k"}, true)[0]; code != wire.OK {
			t.Fatalf("remove: %v", code)
		}
		mustPut(t, writer, "k", v1, false) // likely the same range, certainly a new epoch
		if got := readOne(t, reader, "k", 4096); !bytes.Equal(got, v1) {
			t.Fatal("a new object under the key: the read returned the old one's bytes")
		}
		tried(3)
		if hits() != 0 {
			t.Fatalf("%d reads from a stale spot were confirmed", hits())
		}
	})
}

// A spot is used only inside the lease it was found under.
func TestASpotPastItsLeaseIsNotUsed(t *testing.T) {
	spotRoutes(t, func(t *testing.T, route string) {
		reader, writer := spotCluster(t, route, "--default_kv_lease_ttl=50")
		v := testkit.Pattern(4, 4096)
		mustPut(t, writer, "k", v, false)
		readOne(t, reader, "k", 4096)
		sp, ok := reader.reads.spots.get("k", time.Now())
		if !ok {
			t.Fatalf("no spot after a read over %s", route)
		}
		testkit.WaitFor(t, "the spot's lease to end", func() bool { return time.Now().After(sp.until) })
		if got := readOne(t, reader, "k", 4096); !bytes.Equal(got, v) {
			t.Fatal("wrong bytes")
		}
		if reader.reads.specReads.Load() != 0 {
			t.Fatal("a spot past its lease was read")
		}
	})
}

// A client that wrote a key over TCP or UCX reads it from where it wrote it,
// under the write's grant, while it asks the master; someone else's
// upsert in place since then is seen, and its own rewrite moves the spot
// to the new write.
func TestAReadOfItsOwnWriteComesFromTheSpot(t *testing.T) {
	spotRoutes(t, func(t *testing.T, route string) {
		other, writer := spotCluster(t, route)
		v1, v2, v3 := testkit.Pattern(5, 4096), testkit.Pattern(6, 4096), testkit.Pattern(7, 4096)
		mustPut(t, writer, "k", v1, false)
		count := func(reads, hits uint64) {
			t.Helper()
			if r, h := writer.reads.specReads.Load(), writer.reads.specHits.Load(); r != reads || h != hits {
				t.Fatalf("%d reads from a spot, %d confirmed; want %d and %d", r, h, reads, hits)
			}
		}
		if got := readOne(t, writer, "k", 4096); !bytes.Equal(got, v1) {
			t.Fatal("the first read of its own write: wrong bytes")
		}
		count(1, 1)
		mustPut(t, other, "k", v2, true) // in place, by another client
		if got := readOne(t, writer, "k", 4096); !bytes.Equal(got, v2) {
			t.Fatal("after another client's upsert the writer read its own old bytes")
		}
		count(2, 1)
		mustPut(t, writer, "k", v3, true)
		if got := readOne(t, writer, "k", 4096); !bytes.Equal(got, v3) {
			t.Fatal("after its own upsert: wrong bytes")
		}
		count(3, 2)
		// Every key of a batch put has its spot.
		items := make([]PutItem, 4)
		for i := range items {
			items[i] = PutItem{Key: fmt.Sprintf("b%d", i), Parts: [][]byte{testkit.Pattern(uint64(10+i), 1000+i)}}
		}
		for i, code := range writer.Writes().PutBatch(items, wire.ReplicaConfig{}) {
			if code != wire.OK {
				t.Fatalf("batch put %d: %v", i, code)
			}
		}
		for i, it := range items {
			if got := readOne(t, writer, it.Key, 1000+i); !bytes.Equal(got, it.Parts[0]) {
				t.Fatalf("batch key %d: wrong bytes", i)
			}
		}
		count(7, 6)
		if other.reads.specReads.Load() != 0 {
			t.Fatal("a client that only upserted read from a spot")
		}
		onlyRoute(t, writer, route)
	})
}

// The master's answer confirms a spot only when it repeats everything the
// spot was taken under.
func TestASpotIsConfirmedOnlyByTheSameObjectInTheSamePlace(t *testing.T) {
	sp := spot{rep: wire.Replica{SegID: 3, Offset: 4096}, size: 100, epoch: 7, placed: 9}
	same := wire.GetResult{Code: wire.OK, Size: 100, Epoch: 7, Placed: 9,
		Replicas: []wire.Replica{{SegID: 2, Offset: 0}, {SegID: 3, Offset: 4096}}}
	if !sp.confirms(same) {
		t.Fatal("the same object in the same place was not confirmed")
	}
	for name, change := range map[string]func(*wire.GetResult){
		"a miss":                func(r *wire.GetResult) { r.Code = wire.ErrObjectNotFound },
		"another write":         func(r *wire.GetResult) { r.Epoch++ },
		"another replica set":   func(r *wire.GetResult) { r.Placed++ },
		"another size":          func(r *wire.GetResult) { r.Size++ },
		"the replica gone":      func(r *wire.GetResult) { r.Replicas = r.Replicas[:1] },
		"the replica elsewhere": func(r *wire.GetResult) { r.Replicas = []wire.Replica{{SegID: 3, Offset: 8192}} },
		"on another segment":    func(r *wire.GetResult) { r.Replicas = []wire.Replica{{SegID: 4, Offset: 4096}} },
	} {
		r := same
		r.Replicas = append([]wire.Replica(nil), same.Replicas...)
		change(&r)
		if sp.confirms(r) {
			t.Errorf("%s: confirmed", name)
		}
	}
}

// The spots kept are the last ones made or used: a key read now and then
// keeps its spot through any number of new ones, the others go in the
// order they came, and no more than maxSpots are kept.
func TestSpotsKeepTheRecentlyUsed(t *testing.T) {
	var s spots
	now := time.Now()
	sp := spot{until: now.Add(time.Hour)}
	s.put("hot", sp)
	for i := range 3 * maxSpots {
		s.put(fmt.Sprintf("k%d", i), sp)
		if i%(maxSpots/4) == 0 {
			if _, ok := s.get("hot", now); !ok {
				t.Fatalf("the key read every %d new spots lost its spot after %d", maxSpots/4, i)
			}
		}
		if n := s.len(); n > maxSpots {
			t.Fatalf("%d spots kept, at most %d", n, maxSpots)
		}
	}
	if _, ok := s.get("k0", now); ok {
		t.Fatal("the oldest unused spot was kept")
	}
	if _, ok := s.get(fmt.Sprintf("k%d", 3*maxSpots-1), now); !ok {
		t.Fatal("the newest spot was dropped")
	}
	if n := s.len(); n < maxSpots/2 {
		t.Fatalf("only %d spots kept", n)
	}
	s.put("old", spot{until: now.Add(-time.Second)})
	if _, ok := s.get("old", now); ok {
		t.Fatal("an expired spot was returned")
	}
	s.drop("hot")
	if _, ok := s.get("hot", now); ok {
		t.Fatal("a dropped spot was returned")
	}
}

// len is how many spots s keeps.
func (s *spots) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.young) + len(s.old)
}
