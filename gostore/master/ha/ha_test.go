package ha

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"
	"testing"
	"time"

	"github.com/gostore/gostore/gostore/etcdkv"
	"github.com/gostore/gostore/gostore/internal/etcdtest"
)

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func records(from, n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = []byte(fmt.Sprintf("record %d", from+i))
	}
	return out
}

// One leader at a time; a leader whose lease lapsed (paused, cut off) is
// replaced, and its appends are refused from then on even though it never
// noticed; the log holds both terms' records in order.
func TestOneLeaderAndFencing(t *testing.T) {
	cl := etcdtest.Start(t, 3)
	opts := Options{Endpoints: cl.Endpoints(), TTL: 2 * time.Second}
	ctx := ctxT(t, 60*time.Second)
	a, err := Campaign(ctx, withID(opts, "a:1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Append(ctx, 1, records(1, 130)); err != nil { // more than one transaction
		t.Fatal(err)
	}
	bWon := campaignAsync(ctx, withID(opts, "b:1"))
	if who, _ := CurrentLeader(ctx, opts); who != "a:1" {
		t.Fatalf("leader %q", who)
	}
	if err := a.Append(ctx, 131, records(131, 5)); err != nil { // b waits meanwhile
		t.Fatal(err)
	}
	select {
	case w := <-bWon:
		t.Fatalf("b won while a leads: %+v", w)
	default:
	}
	// a stops keeping its lease (a process paused, a host cut off): after
	// the TTL b leads.
	a.Abandon()
	w := <-bWon
	if w.err != nil {
		t.Fatal(w.err)
	}
	b := w.l
	if b.Term() <= a.Term() {
		t.Fatalf("terms: a %d, b %d", a.Term(), b.Term())
	}
	if who, _ := CurrentLeader(ctx, opts); who != "b:1" {
		t.Fatalf("leader after the takeover %q", who)
	}
	// a never noticed; its write is refused all the same.
	if err := a.Append(ctx, 136, records(999, 1)); !errors.Is(err, ErrDeposed) {
		t.Fatalf("a deposed leader's append: %v", err)
	}
	select {
	case <-a.Lost():
	default:
		t.Fatal("an abandoned leadership did not close Lost")
	}
	got, err := ReadLog(ctx, opts, 1)
	if err != nil || len(got) != 135 {
		t.Fatalf("log: %d records, %v", len(got), err)
	}
	if err := b.Append(ctx, 136, records(136, 3)); err != nil {
		t.Fatal(err)
	}
	got, _ = ReadLog(ctx, opts, 130)
	var want []string
	for i := 130; i <= 138; i++ {
		want = append(want, fmt.Sprintf("record %d", i))
	}
	if fmt.Sprint(strs(got)) != fmt.Sprint(want) {
		t.Fatalf("log from 130: %v", strs(got))
	}
	// A clean resignation hands over at once, not after a TTL.
	cWon := campaignAsync(ctx, withID(opts, "c:1"))
	start := time.Now()
	if err := b.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if w := <-cWon; w.err != nil || time.Since(start) > opts.TTL {
		t.Fatalf("takeover after a resignation: %v after %v", w.err, time.Since(start))
	}
}

// Without a quorum an append fails (it is never acknowledged); with the
// quorum back the same leader appends again.
func TestAppendsNeedAQuorum(t *testing.T) {
	cl := etcdtest.Start(t, 3)
	opts := Options{Endpoints: cl.Endpoints(), TTL: 10 * time.Second}
	ctx := ctxT(t, 60*time.Second)
	l, err := Campaign(ctx, withID(opts, "a:1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Append(ctx, 1, records(1, 3)); err != nil {
		t.Fatal(err)
	}
	cl.Stop(1) // one member down: the quorum holds
	if err := l.Append(ctxT(t, 10*time.Second), 4, records(4, 1)); err != nil {
		t.Fatalf("append with one member down: %v", err)
	}
	cl.Stop(2) // two down: no quorum
	if err := l.Append(ctxT(t, 2*time.Second), 5, records(5, 1)); err == nil {
		t.Fatal("an append without a quorum succeeded")
	}
	cl.Start(1)
	cl.Start(2)
	cl.WaitHealthy()
	var aerr error
	for i := 0; i < 100; i++ {
		if aerr = l.Append(ctx, 5, records(5, 1)); aerr == nil {
			break
		}
	}
	if aerr != nil {
		t.Fatalf("append after the quorum returned: %v", aerr)
	}
	got, _ := ReadLog(ctx, opts, 1)
	if len(got) != 5 || string(got[4]) != "record 5" {
		t.Fatalf("log: %v", strs(got))
	}
}

type won struct {
	l   *Leader
	err error
}

// campaignAsync campaigns in the background; the channel tells when it won.
func campaignAsync(ctx context.Context, opts Options) <-chan won {
	ch := make(chan won, 1)
	go func() {
		l, err := Campaign(ctx, opts)
		ch <- won{l, err}
	}()
	return ch
}

func withID(o Options, id string) Options {
	o.ID = id
	return o
}

func strs(b [][]byte) []string {
	out := make([]string, len(b))
	for i := range b {
		out[i] = string(b[i])
	}
	return out
}

// The leader's Log: concurrent records committed in order; a snapshot in
// the old format on etcd (an older gostore's) read back exactly with the
// records after it; a Trim at that snapshot deleting it and the records it
// covers (the tail it keeps is none), saying so in "trimmed"; a deposed
// leader's log failing its waiters with ErrDeposed, and its Trim deleting
// nothing.
func TestLogTrimAndOldSnapshotRecovery(t *testing.T) {
	cl := etcdtest.Start(t, 3)
	opts := Options{Endpoints: cl.Endpoints(), TTL: 4 * time.Second} // keepalives at TTL/3 must get through a loaded 2-core CI machine
	ctx := ctxT(t, 60*time.Second)
	a, err := Campaign(ctx, withID(opts, "a:1"))
	if err != nil {
		t.Fatal(err)
	}
	log := OpenLog(a, 0)
	done := make(chan error, 8)
	for w := 0; w < 8; w++ {
		go func(w int) {
			var last uint64
			for i := 0; i < 50; i++ {
				seq, err := log.Enqueue([]byte(fmt.Sprintf("w%d-%d", w, i)))
				if err != nil {
					done <- err
					return
				}
				last = seq
			}
			done <- log.Wait(last)
		}(w)
	}
	for w := 0; w < 8; w++ {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if log.LastSeq() != 400 {
		t.Fatalf("last seq %d", log.LastSeq())
	}
	big := make([]byte, 2*oldSnapChunk+5) // three chunks
	for i := range big {
		big[i] = byte(i * 7)
	}
	writeOldSnapshot(t, a, 300, big)
	for i := 401; i <= 410; i++ {
		seq, _ := log.Enqueue([]byte(fmt.Sprintf("after-%d", i)))
		if err := log.Wait(seq); err != nil {
			t.Fatal(err)
		}
	}
	rec, err := Recover(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if rec.SnapshotSeq != 300 || string(rec.Snapshot) != string(big) || len(rec.Records) != 110 ||
		string(rec.Records[109]) != "after-410" || rec.LastSeq() != 410 {
		t.Fatalf("recovered snapshot %d (%d bytes), %d records", rec.SnapshotSeq, len(rec.Snapshot), len(rec.Records))
	}
	if err := a.Trim(ctx, 300, Tail{}); err != nil {
		t.Fatal(err)
	}
	// The records the snapshot covers went, but for the batch holding
	// record 301, which stays whole: how the 400 concurrent records fell
	// into batches is up to timing (under load one batch may hold all).
	starts, err := batchStarts(ctx, a.kv, a.opts)
	if err != nil || len(starts) == 0 || starts[0] > 301 || (len(starts) > 1 && starts[1] <= 301) {
		t.Fatalf("log batches left after a trim at 300 start at %v (%v): want the batch holding 301 first", starts, err)
	}
	if tr, err := Trimmed(ctx, opts); err != nil || tr != starts[0]-1 {
		t.Fatalf("trimmed %d (%v), the log starts at %d", tr, err, starts[0])
	}
	if old, _, err := a.kv.Range(ctx, []byte(a.opts.Prefix+"snap"), etcdkv.PrefixEnd([]byte(a.opts.Prefix+"snap")), // "snap/..." and "snaphead"
		etcdkv.RangeOptions{KeysOnly: true}); err != nil || len(old) != 0 {
		t.Fatalf("the old snapshot's keys after a trim: %d (%v)", len(old), err)
	}
	// With the snapshot gone, Recover reads the log from record 1: a gap
	// (nothing) when the trim took the log's start, the whole log when one
	// batch held records 1 to 301 and so nothing could go (CI saw it).
	wantRecords := 0
	if starts[0] == 1 {
		wantRecords = 410
	}
	if rec, err := Recover(ctx, opts); err != nil {
		t.Fatalf("Recover after the trim: %v", err)
	} else if rec.Snapshot != nil || len(rec.Records) != wantRecords {
		t.Fatalf("after the trim (log from %d) Recover read a snapshot (%v) or %d records from 1, want %d",
			starts[0], rec.Snapshot != nil, len(rec.Records), wantRecords)
	}
	// a is deposed (its lease lapses); its log refuses from then on.
	a.Abandon()
	b, err := Campaign(ctx, withID(opts, "b:1"))
	if err != nil {
		t.Fatal(err)
	}
	seq, _ := log.Enqueue([]byte("from a deposed leader"))
	if err := log.Wait(seq); !errors.Is(err, ErrDeposed) {
		t.Fatalf("a deposed leader's record: %v", err)
	}
	if _, err := log.Enqueue([]byte("more")); err == nil {
		t.Fatal("a failed log took another record")
	}
	if err := a.Trim(ctx, 410, Tail{}); !errors.Is(err, ErrDeposed) {
		t.Fatalf("a deposed leader's trim: %v", err)
	}
	recs, err := ReadLog(ctx, opts, 301)
	if err != nil || len(recs) != 110 || string(recs[109]) != "after-410" {
		t.Fatalf("after a deposed leader's trim and append the log from 301 holds %d records (%v)", len(recs), err)
	}
	bl := OpenLog(b, 410)
	if seq, _ := bl.Enqueue([]byte("b's first")); seq != 411 || bl.Wait(seq) != nil {
		t.Fatalf("b's first record: %d", seq)
	}
	bl.Close()
}

func TestBatchesRoundTripAndRefuseDamage(t *testing.T) {
	recs := [][]byte{[]byte("a"), {}, []byte("third record")}
	b := packBatch(recs, 0)
	got, err := unpackBatch(b)
	if err != nil || fmt.Sprint(strs(got)) != fmt.Sprint(strs(recs)) {
		t.Fatalf("round trip: %q %v", got, err)
	}
	for cut := 0; cut < len(b); cut++ {
		if _, err := unpackBatch(b[:cut]); err == nil {
			t.Fatalf("%d of %d bytes unpacked", cut, len(b))
		}
	}
	if _, err := unpackBatch(append(b, 0)); err == nil {
		t.Fatal("a byte after the batch unpacked")
	}
	if _, err := unpackBatch([]byte{0xff, 0xff, 0xff, 0xff, 1, 0, 0, 0}); err == nil {
		t.Fatal("a count past the batch unpacked")
	}
}

// oldSnapChunk is the chunk size of the old format's snapshots on etcd.
const oldSnapChunk = 1 << 20

// writeOldSnapshot stores state on etcd as an older gostore's leader did
// (chunks, then the head naming them): what Recover reads and Trim deletes.
func writeOldSnapshot(t *testing.T, l *Leader, seq uint64, state []byte) {
	t.Helper()
	ctx := ctxT(t, 30*time.Second)
	p := l.opts.Prefix
	for i := 0; i*oldSnapChunk < len(state); i++ {
		part := state[i*oldSnapChunk : min((i+1)*oldSnapChunk, len(state))]
		if _, err := l.kv.Put(ctx, []byte(fmt.Sprintf("%ssnap/%020d/%06d", p, seq, i)), part, 0); err != nil {
			t.Fatal(err)
		}
	}
	head := binary.LittleEndian.AppendUint64(nil, seq)
	head = binary.LittleEndian.AppendUint64(head, uint64(len(state)))
	head = binary.LittleEndian.AppendUint32(head, crc32.Checksum(state, castagnoli))
	if _, err := l.kv.Put(ctx, []byte(p+"snaphead"), head, 0); err != nil {
		t.Fatal(err)
	}
}

// batchStarts are the first sequence numbers of the log's batches, in order.
func batchStarts(ctx context.Context, kv *etcdkv.Client, opts Options) ([]uint64, error) {
	prefix := []byte(opts.Prefix + "log/")
	kvs, _, err := kv.Range(ctx, prefix, etcdkv.PrefixEnd(prefix), etcdkv.RangeOptions{KeysOnly: true})
	if err != nil {
		return nil, err
	}
	out := make([]uint64, 0, len(kvs))
	for _, e := range kvs {
		if first, err := strconv.ParseUint(string(e.Key[len(prefix):]), 10, 64); err == nil {
			out = append(out, first)
		}
	}
	return out, nil
}

// etcdFootprint is what etcd itself holds under the prefix: keys and the
// bytes of their values.
func etcdFootprint(t *testing.T, l *Leader) (keys int, bytes int) {
	t.Helper()
	kvs, _, err := l.kv.Range(ctxT(t, 30*time.Second), []byte(l.opts.Prefix), etcdkv.PrefixEnd([]byte(l.opts.Prefix)), etcdkv.RangeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range kvs {
		bytes += len(e.Value)
	}
	return len(kvs), bytes
}

// A long log trimmed at every snapshot: etcd holds the records after the
// newest snapshot and a tail before it within the bound, whatever the
// log's length; a new leader's first Trim knows the earlier terms'
// batches (read from etcd) and keeps the same bound.
func TestTrimKeepsABoundedTail(t *testing.T) {
	cl := etcdtest.Start(t, 1)
	opts := Options{Endpoints: cl.Endpoints(), TTL: 4 * time.Second}
	ctx := ctxT(t, 120*time.Second)
	a, err := Campaign(ctx, withID(opts, "a:1"))
	if err != nil {
		t.Fatal(err)
	}
	rec := make([]byte, 1000)
	batchOf := func(n int) [][]byte {
		out := make([][]byte, n)
		for i := range out {
			out[i] = rec
		}
		return out
	}
	tail := Tail{Records: 350, Bytes: 1 << 20}
	next := uint64(1)
	maxKeys, maxBytes := 0, 0
	for round := 0; round < 30; round++ {
		for b := 0; b < 5; b++ { // 5 batches of 100 records between snapshots
			if err := a.Append(ctx, next, batchOf(100)); err != nil {
				t.Fatal(err)
			}
			next += 100
		}
		if err := a.Trim(ctx, next-1-50, tail); err != nil { // the snapshot misses the last 50
			t.Fatal(err)
		}
		keys, bytes := etcdFootprint(t, a)
		maxKeys, maxBytes = max(maxKeys, keys), max(maxBytes, bytes)
	}
	// After each trim: the batch holding the 50 records past the snapshot,
	// three whole batches of tail (350 records), the leader key, "trimmed".
	t.Logf("log of %d records (%d bytes): etcd held at most %d keys, %d bytes under the prefix", next-1, (next-1)*1000, maxKeys, maxBytes)
	if maxKeys > 6 || maxBytes > 4*(100*1004+4)+64 {
		t.Fatalf("etcd held up to %d keys, %d bytes: over the tail's bound", maxKeys, maxBytes)
	}
	tr, err := Trimmed(ctx, opts)
	if want := next - 1 - 400; err != nil || tr != want {
		t.Fatalf("trimmed %d (%v), want %d", tr, err, want)
	}
	if recs, err := ReadLog(ctx, opts, tr+1); err != nil || uint64(len(recs)) != next-1-tr {
		t.Fatalf("the log from %d holds %d records (%v)", tr+1, len(recs), err)
	}
	// A new leader trims what a's term wrote, by the same bound.
	a.Abandon()
	b, err := Campaign(ctx, withID(opts, "b:1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Append(ctx, next, batchOf(100)); err != nil {
		t.Fatal(err)
	}
	next += 100
	if err := b.Trim(ctx, next-1, tail); err != nil {
		t.Fatal(err)
	}
	if _, recs, _ := b.LogSize(); recs != 300 {
		t.Fatalf("the new leader's index holds %d records after its trim, want the 300 of the tail", recs)
	}
	if keys, _ := etcdFootprint(t, b); keys != 5 {
		t.Fatalf("%d keys under the prefix after the new leader's trim, want 3 batches, leader, trimmed", keys)
	}
}
