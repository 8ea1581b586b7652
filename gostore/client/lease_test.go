// lease_test.go drives real clients against the real master with a short
// lease, and a transport wrapped (Config.WrapTransport) to hold reads back
// until their lease has ended: a read that outlives its lease is looked up
// and read again, never answered "absent" or with another object's bytes.

package client

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gostore/gostore/gostore/internal/testbase"
	"github.com/gostore/gostore/gostore/internal/testkit"
	"github.com/gostore/gostore/gostore/transfer"
	"github.com/gostore/gostore/gostore/wire"
)

// testLease is the master's lease in these tests (--default_kv_lease_ttl).
const testLease = 150 * time.Millisecond

// lateRoutes wraps every route of a reader: while armed, each batch of
// reads it starts ends only once testLease has passed since it started
// (so after the lease its lookup granted, which began before), after
// running during (if set) the hold. It counts the reads it held.
type lateRoutes struct {
	mu     sync.Mutex
	armed  int    // batches still to hold; <0: every one
	during func() // run while the first held batch waits
	held   int    // batches held
}

func (l *lateRoutes) arm(batches int, during func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.armed, l.during, l.held = batches, during, 0
}

func (l *lateRoutes) heldBatches() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held
}

func (l *lateRoutes) wrap(_ transfer.Route, inner transfer.Transport) transfer.Transport {
	return lateTransport{l, inner}
}

type lateTransport struct {
	l     *lateRoutes
	inner transfer.Transport
}

func (t lateTransport) Start(ctx context.Context, ops []transfer.Op, idx []int, errs []error) func() []int {
	start := time.Now()
	reads := len(idx) > 0 && !ops[idx[0]].Write
	t.l.mu.Lock()
	hold := reads && t.l.armed != 0
	var during func()
	if hold {
		if t.l.armed > 0 {
			t.l.armed--
		}
		t.l.held++
		during, t.l.during = t.l.during, nil
	}
	t.l.mu.Unlock()
	if !hold {
		return t.inner.Start(ctx, ops, idx, errs)
	}
	if during != nil {
		during() // before the bytes move: what they read is what is there then
	}
	wait := t.inner.Start(ctx, ops, idx, errs)
	return func() []int {
		fallback := wait()
		// The event waited for is the end of the lease, which is a time:
		// the lookup that granted it was sent before start.
		time.Sleep(time.Until(start.Add(testLease + 10*time.Millisecond)))
		return fallback
	}
}

// leaseCluster starts a master with testLease, an owner of a segment and a
// reader whose reads lateRoutes holds.
func leaseCluster(t *testing.T) (owner, reader *Client, late *lateRoutes) {
	return leaseClusterLogging(t, nil)
}

// leaseClusterLogging is leaseCluster whose reader logs to log.
func leaseClusterLogging(t *testing.T, log *slog.Logger) (owner, reader *Client, late *lateRoutes) {
	m := testkit.StartMaster(t, "--default_kv_lease_ttl=150")
	owner = newClient(t, m.Addr(), 64<<20)
	late = &lateRoutes{}
	reader, err := New(edge(Config{LocalHostname: "127.0.0.1", MasterServerAddr: m.Addr(),
		LocalBufferSize: 16 << 20, WrapTransport: late.wrap}), log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reader.Close() })
	return owner, reader, late
}

// Every read API whose first read outlives its lease looks the objects up
// again, reads them again and returns every value's bytes.
func TestReadOutlivingItsLeaseIsReadAgain(t *testing.T) {
	eachTransport(t, func(t *testing.T) {
		owner, reader, late := leaseCluster(t)
		const n = 8
		keys := make([]string, n)
		vals := make([][]byte, n)
		var items []PutItem
		for i := range keys {
			keys[i] = "k" + string(rune('a'+i))
			vals[i] = testkit.Pattern(uint64(i+1), 256<<10+i)
			items = append(items, PutItem{Key: keys[i], Parts: [][]byte{vals[i]}})
		}
		for i, code := range owner.Writes().PutBatch(items, wire.ReplicaConfig{Preferred: []string{owner.Hostname()}}) {
			if code != wire.OK {
				t.Fatalf("put %s: %v", keys[i], code)
			}
		}
		dests := func() [][][]byte {
			d := make([][][]byte, n)
			for i := range d {
				d[i] = [][]byte{make([]byte, len(vals[i]))}
			}
			return d
		}
		check := func(api string, got []int64, bufs [][]byte) {
			t.Helper()
			for i := range got {
				if got[i] != int64(len(vals[i])) || !bytes.Equal(bufs[i], vals[i]) {
					t.Fatalf("%s: %s: %d bytes (want %d), equal %v", api, keys[i], got[i], len(vals[i]), bytes.Equal(bufs[i], vals[i]))
				}
			}
			if late.heldBatches() == 0 {
				t.Fatalf("%s: no read was held past its lease", api)
			}
		}
		flat := func(d [][][]byte) [][]byte {
			out := make([][]byte, len(d))
			for i := range d {
				out[i] = d[i][0]
			}
			return out
		}

		late.arm(1, nil)
		d := dests()
		check("GetInto (batch)", reader.Reads().GetInto(keys, d), flat(d))

		late.arm(1, nil)
		d = dests()
		p, err := reader.Reads().GetStart(keys)
		if err != nil {
			t.Fatal(err)
		}
		check("GetStart+GetFinish", reader.Reads().GetFinish(p, d), flat(d))

		late.arm(1, nil)
		one := make([]byte, len(vals[3]))
		if got := reader.Reads().GetIntoOne(keys[3], [][]byte{one}); got != int64(len(one)) || !bytes.Equal(one, vals[3]) {
			t.Fatalf("GetIntoOne: %d bytes, equal %v", got, bytes.Equal(one, vals[3]))
		}

		late.arm(1, nil)
		parts := make([][]RangePart, n)
		for i := range parts {
			parts[i] = []RangePart{{Buf: make([]byte, 1000), Off: 7}, {Buf: make([]byte, 5000), Off: 100_000}}
		}
		for i, got := range reader.Sessions().GetRanges(keys, parts) {
			for k, p := range parts[i] {
				if got[k] != int64(len(p.Buf)) || !bytes.Equal(p.Buf, vals[i][p.Off:p.Off+uint64(len(p.Buf))]) {
					t.Fatalf("GetRanges: %s range %d: %d", keys[i], k, got[k])
				}
			}
		}
		if late.heldBatches() == 0 {
			t.Fatal("GetRanges: no read was held past its lease")
		}

		late.arm(1, nil)
		bufs, codes := reader.Reads().GetBuffers(keys)
		check("GetBuffers", codes, bufs)
		for _, b := range bufs {
			_ = reader.Reads().FreeBuffer(addrOf(b))
		}
	})
}

// A read that outlives every lease it is given ends with -707 after a
// bounded number of lookups, not a loop and not "absent".
func TestReadOutlivingEveryLeaseGivesTheLeaseCode(t *testing.T) {
	owner, reader, late := leaseCluster(t)
	v := testkit.Pattern(5, 100_000)
	if code := owner.Writes().PutBatch([]PutItem{{Key: "k", Parts: [][]byte{v}}}, wire.ReplicaConfig{}); code[0] != wire.OK {
		t.Fatal(code[0])
	}
	late.arm(-1, nil)
	got := reader.Reads().GetInto([]string{"k"}, [][][]byte{{make([]byte, len(v))}})
	if got[0] != int64(wire.ErrLeaseExpired) {
		t.Fatalf("every read late: %d, want %d", got[0], wire.ErrLeaseExpired)
	}
	if h := late.heldBatches(); h != leaseTries+1 {
		t.Fatalf("%d reads, want the first and %d again", h, leaseTries)
	}
}

// An object replaced while a read of it outlives its lease: the read gives
// the new bytes (or -707), never the old ones, nor a mix.
func TestReadOutlivingItsLeaseSeesTheUpsert(t *testing.T) {
	eachTransport(t, func(t *testing.T) {
		owner, reader, late := leaseCluster(t)
		old, fresh := testkit.Pattern(1, 1<<20), testkit.Pattern(2, 1<<20)
		if code := owner.Writes().PutBatch([]PutItem{{Key: "k", Parts: [][]byte{old}}}, wire.ReplicaConfig{}); code[0] != wire.OK {
			t.Fatal(code[0])
		}
		late.arm(1, func() {
			// The reader's lease ends, and with it the upsert's wait.
			testkit.WaitFor(t, "the upsert during the read", func() bool {
				return owner.Writes().UpsertBatch([]PutItem{{Key: "k", Parts: [][]byte{fresh}}}, wire.ReplicaConfig{})[0] == wire.OK
			})
		})
		dst := make([]byte, len(old))
		got := reader.Reads().GetInto([]string{"k"}, [][][]byte{{dst}})
		switch {
		case got[0] == int64(len(fresh)) && bytes.Equal(dst, fresh):
		case got[0] == int64(wire.ErrLeaseExpired):
		default:
			t.Fatalf("read across an upsert: %d bytes, old %v, new %v", got[0], bytes.Equal(dst, old), bytes.Equal(dst, fresh))
		}
		if got[0] != int64(len(fresh)) {
			t.Fatalf("the read again gave %d, want the new bytes", got[0])
		}
	})
}

// A get session's read whose lease ran out (the read outlived it, or the
// session did before the read) looks the object up again, reads it again
// and renews the session's entry: the values' bytes, an upsert's new
// bytes, -704 for an object removed, and -707 with one log line only when
// every read again outlives its lease.
func TestGetSessionReadOutlivingItsLeaseIsReadAgain(t *testing.T) {
	eachTransport(t, func(t *testing.T) {
		var logs testbase.LogBuffer
		owner, reader, late := leaseClusterLogging(t, slog.New(slog.NewTextHandler(&logs, nil)))
		const n = 4
		keys := make([]string, n)
		vals := make([][]byte, n)
		var items []PutItem
		for i := range keys {
			keys[i] = "sess-" + string(rune('a'+i))
			vals[i] = testkit.Pattern(uint64(i+1), 256<<10+i)
			items = append(items, PutItem{Key: keys[i], Parts: [][]byte{vals[i]}})
		}
		for i, code := range owner.Writes().PutBatch(items, wire.ReplicaConfig{Preferred: []string{owner.Hostname()}}) {
			if code != wire.OK {
				t.Fatalf("put %s: %v", keys[i], code)
			}
		}
		if st := reader.Sessions().GetSessionStart(keys); !equalCodes(st, make([]wire.Code, n)) {
			t.Fatalf("session start: %v", st)
		}
		entry := func(k string) getSession {
			reader.sessions.sess.mu.Lock()
			defer reader.sessions.sess.mu.Unlock()
			return reader.sessions.sess.gets[k]
		}
		ranges := func(m int) [][]RangePart {
			parts := make([][]RangePart, m)
			for i := range parts {
				parts[i] = []RangePart{{Buf: make([]byte, 1000), Off: 7}, {Buf: make([]byte, 5000), Off: 100_000}}
			}
			return parts
		}
		check := func(what string, got []int64, parts [][]RangePart, want [][]byte) {
			t.Helper()
			for i := range got {
				if got[i] != 6000 {
					t.Fatalf("%s: %s: %d, want 6000 bytes", what, keys[i], got[i])
				}
				for _, p := range parts[i] {
					if !bytes.Equal(p.Buf, want[i][p.Off:p.Off+uint64(len(p.Buf))]) {
						t.Fatalf("%s: %s: the bytes at %d are not the value's", what, keys[i], p.Off)
					}
				}
			}
		}

		// The read outlives its lease.
		before := entry(keys[0])
		late.arm(1, nil)
		parts := ranges(n)
		check("a read past the lease", reader.Sessions().GetSessionRead(keys, parts), parts, vals)
		if late.heldBatches() == 0 {
			t.Fatal("no read was held past its lease")
		}
		if after := entry(keys[0]); !after.sent.After(before.sent) {
			t.Fatal("the session's entry was not renewed by the lookup again")
		}

		// The session outlives its lease before the read starts.
		testkit.WaitFor(t, "the renewed lease to end", func() bool { e := entry(keys[1]); return expired(e.res, e.sent) })
		parts = ranges(n)
		check("a read of a session past its lease", reader.Sessions().GetSessionRead(keys, parts), parts, vals)

		// Upserted while the read of it outlives the lease: the new bytes.
		fresh := testkit.Pattern(99, len(vals[0]))
		late.arm(1, func() {
			testkit.WaitFor(t, "the upsert during the read", func() bool {
				return owner.Writes().UpsertBatch([]PutItem{{Key: keys[0], Parts: [][]byte{fresh}}}, wire.ReplicaConfig{})[0] == wire.OK
			})
		})
		parts = ranges(1)
		check("a read across an upsert", reader.Sessions().GetSessionRead(keys[:1], parts), parts, [][]byte{fresh})

		// Removed once its lease ended: the lookup's code.
		testkit.WaitFor(t, "the remove once the lease ended", func() bool {
			return owner.Keys().Remove(keys[1:2], false)[0] == wire.OK
		})
		if got := reader.Sessions().GetSessionRead(keys[1:2], ranges(1)); got[0] != int64(wire.ErrObjectNotFound) {
			t.Fatalf("a read of a removed object: %d, want %d", got[0], wire.ErrObjectNotFound)
		}

		// Every read outlives its lease: -707 after a bounded number of
		// reads, with one log line.
		if st := reader.Sessions().GetSessionStart(keys[2:3]); st[0] != wire.OK {
			t.Fatalf("session start again: %v", st[0])
		}
		late.arm(-1, nil)
		if got := reader.Sessions().GetSessionRead(keys[2:3], ranges(1)); got[0] != int64(wire.ErrLeaseExpired) {
			t.Fatalf("every read late: %d, want %d", got[0], wire.ErrLeaseExpired)
		}
		// The first read is skipped when the session's lease already
		// ended before it (a slow machine).
		if h := late.heldBatches(); h != leaseTries+1 && h != leaseTries {
			t.Fatalf("%d reads, want the first and %d again", h, leaseTries)
		}
		var lines []string
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, "key="+keys[2]) {
				lines = append(lines, l)
			}
		}
		if len(lines) != 1 || !strings.Contains(lines[0], "outlived the lease") {
			t.Fatalf("log lines about %s: %q", keys[2], lines)
		}
		late.arm(0, nil)
		reader.Sessions().GetSessionEnd(keys)
	})
}
