// session_test.go tests ranged writes and reads (put and get sessions,
// GetRanges) between real clients, over shared memory and TCP, with the
// bytes checked.

package client

import (
	"bytes"
	"testing"

	"github.com/gostore/gostore/gostore/internal/testkit"
	"github.com/gostore/gostore/gostore/wire"
)

func TestPutAndGetSessions(t *testing.T) {
	eachTransport(t, func(t *testing.T) {
		m := testkit.StartMaster(t)
		newClient(t, m.Addr(), 8<<20) // holds the replicas
		c := newClient(t, m.Addr(), 0)
		cfg := wire.ReplicaConfig{ReplicaNum: 1}
		if codes := c.Writes().PutBatch([]PutItem{{Key: "exists", Parts: [][]byte{testkit.Pattern(1, 100)}}}, cfg); codes[0] != wire.OK {
			t.Fatal(codes)
		}

		got := c.Sessions().PutSessionStart([]string{"exists", "s1", "", "s2"}, []uint64{100, 3000, 10, 50}, cfg)
		want := []wire.Code{wire.ErrObjectAlreadyExists, wire.OK, wire.ErrInvalidParams, wire.OK}
		if !equalCodes(got, want) {
			t.Fatalf("session start: %v, want %v", got, want)
		}
		if again := c.Sessions().PutSessionStart([]string{"s1"}, []uint64{3000}, cfg); again[0] != wire.ErrInvalidParams {
			t.Fatalf("a second start of an open session: %v", again)
		}
		if n := c.Keys().GetSize("s1"); n != int64(wire.ErrReplicaIsNotReady) {
			t.Fatalf("size of an object in a put session: %d", n)
		}
		a, b, d := testkit.Pattern(2, 1000), testkit.Pattern(3, 500), testkit.Pattern(4, 50)
		res := c.Sessions().PutSessionWrite([]string{"s1", "s2", "nope", "s2"},
			[][]RangePart{{{a, 0}, {b, 2500}}, {{d[:60-10], 0}}, {{a, 0}}, {{d, 10}}})
		if res[0] != 1500 || res[1] != 50 || res[2] != int64(wire.ErrInvalidParams) || res[3] != int64(wire.ErrInvalidParams) {
			t.Fatalf("ranged writes: %v", res)
		}
		if ends := c.Sessions().PutSessionEnd([]string{"s1", "nope"}); ends[0] != wire.OK || ends[1] != wire.ErrInvalidParams {
			t.Fatalf("session end: %v", ends)
		}
		if rev := c.Sessions().PutSessionRevoke([]string{"s2"}); rev[0] != wire.OK {
			t.Fatalf("revoke: %v", rev)
		}
		if e := c.Keys().Exist([]string{"s1", "s2"}); e[0] != 1 || e[1] != 0 {
			t.Fatalf("after end and revoke: exist %v", e)
		}
		whole := make([]byte, 3000)
		if n := c.Reads().GetInto([]string{"s1"}, [][][]byte{{whole}}); n[0] != 3000 ||
			!bytes.Equal(whole[:1000], a) || !bytes.Equal(whole[2500:], b) {
			t.Fatalf("object written in ranges: %d", n[0])
		}

		// A get session: one lookup, ranged reads, then the end.
		if st := c.Sessions().GetSessionStart([]string{"s1", "missing", "", "s1"}); st[0] != wire.OK ||
			st[1] != wire.ErrObjectNotFound || st[2] != wire.ErrObjectNotFound || st[3] != wire.OK {
			t.Fatalf("get session start: %v", st)
		}
		r1, r2 := make([]byte, 100), make([]byte, 400)
		reads := c.Sessions().GetSessionRead([]string{"s1", "s1", "missing"},
			[][]RangePart{{{r1, 900}, {r2, 2600}}, {{r1, 2950}}, {{r1, 0}}})
		if reads[0] != 500 || !bytes.Equal(r1, whole[900:1000]) || !bytes.Equal(r2, whole[2600:3000]) ||
			reads[1] != int64(wire.ErrInvalidParams) || reads[2] != int64(wire.ErrInvalidParams) {
			t.Fatalf("session reads: %v", reads)
		}
		c.Sessions().GetSessionEnd([]string{"s1", "missing"})
		// Once the session ended, an upsert of the key is not held off
		// by the session's reads.
		if codes := c.Writes().UpsertBatch([]PutItem{{Key: "s1", Parts: [][]byte{whole}}}, cfg); codes[0] != wire.OK {
			t.Fatalf("upsert after the get session ended: %v", codes[0])
		}
		if reads := c.Sessions().GetSessionRead([]string{"s1"}, [][]RangePart{{{r1, 0}}}); reads[0] != int64(wire.ErrInvalidParams) {
			t.Fatalf("a read after the session ended: %v", reads)
		}

		// Ranges without a session.
		x, y := make([]byte, 7), make([]byte, 20)
		rr := c.Sessions().GetRanges([]string{"missing", "s1", "exists"}, [][]RangePart{{{x, 0}}, {{x, 5}, {y, 2990}}, {{y, 80}}})
		if rr[0][0] != int64(wire.ErrObjectNotFound) || rr[1][0] != 7 || !bytes.Equal(x, whole[5:12]) ||
			rr[1][1] != int64(wire.ErrInvalidParams) || rr[2][0] != 20 || !bytes.Equal(y, testkit.Pattern(1, 100)[80:]) {
			t.Fatalf("GetRanges: %v", rr)
		}
	})
}

func equalCodes(a, b []wire.Code) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
