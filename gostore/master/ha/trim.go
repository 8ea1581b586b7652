// Trimming the log on etcd to a bounded tail, and where the leader serves
// its snapshots.

package ha

import (
	"context"
	"encoding/binary"
	"fmt"
	"strconv"

	"github.com/gostore/gostore/gostore/etcdkv"
)

// Tail bounds what Trim keeps of the log before a snapshot: at most
// Records records and Bytes bytes (batches are kept or deleted whole, so
// the tail kept is the newest batches that fit both).
type Tail struct {
	Records uint64
	Bytes   int64
}

// DefaultTail is the tail kept when Options give none: enough for a
// standby that polls every half lease to keep up at tens of thousands of
// changes a second, small beside etcd's 2 GiB quota.
var DefaultTail = Tail{Records: 100_000, Bytes: 16 << 20}

// batch is one key of the log: its first record, how many, its bytes.
type batch struct {
	first, n uint64
	bytes    int64
}

func trimmedKey(prefix string) []byte { return []byte(prefix + "trimmed") }
func sourceKey(prefix string) []byte  { return []byte(prefix + "snapshot_source") }

// indexBatch notes a batch written; a batch written again (a retried
// Append) is noted once.
func (l *Leader) indexBatch(b batch) {
	l.batchMu.Lock()
	defer l.batchMu.Unlock()
	if n := len(l.batches); n > 0 && l.batches[n-1].first >= b.first {
		return
	}
	l.batches = append(l.batches, b)
}

// loadIndex reads the log's batches written before this term (once):
// their sizes are what Trim weighs.
func (l *Leader) loadIndex(ctx context.Context) error {
	l.batchMu.Lock()
	done := l.indexed
	l.batchMu.Unlock()
	if done {
		return nil
	}
	p := l.opts.Prefix
	prefix := []byte(p + "log/")
	kvs, _, err := l.kv.Range(ctx, prefix, etcdkv.PrefixEnd(prefix), etcdkv.RangeOptions{})
	if err != nil {
		return err
	}
	var old []batch
	for _, e := range kvs {
		first, err := strconv.ParseUint(string(e.Key[len(prefix):]), 10, 64)
		if err != nil || len(e.Value) < 4 {
			continue // not a batch this code wrote: left alone
		}
		old = append(old, batch{first: first, n: uint64(binary.LittleEndian.Uint32(e.Value)), bytes: int64(len(e.Value))})
	}
	trimmed, err := Trimmed(ctx, l.opts)
	if err != nil {
		return err
	}
	l.batchMu.Lock()
	defer l.batchMu.Unlock()
	// What this term wrote meanwhile is already noted: keep the older ones
	// read here before it.
	keep := old[:0]
	for _, b := range old {
		if len(l.batches) == 0 || b.first < l.batches[0].first {
			keep = append(keep, b)
		}
	}
	l.batches = append(keep, l.batches...)
	l.trimmed = max(l.trimmed, trimmed)
	l.indexed = true
	return nil
}

// Trim deletes from etcd what a snapshot including every record up to
// snapSeq made unnecessary, but a tail: the log's batches all of whose
// records are at most snapSeq, except the newest of them that fit in
// tail; a snapshot in the old format ("snaphead", "snap/..."), if any. It
// records in "trimmed" the last record it may have deleted. It is one
// transaction fenced on the term: a deposed leader deletes nothing and
// gets ErrDeposed. What Trim deletes is gone for good: the caller must
// have the snapshot durable first.
func (l *Leader) Trim(ctx context.Context, snapSeq uint64, tail Tail) error {
	if err := l.loadIndex(ctx); err != nil {
		return err
	}
	l.batchMu.Lock()
	// from: the first batch kept. The tail is counted from the newest
	// batch the snapshot covers down.
	from := len(l.batches)
	for i, b := range l.batches {
		if b.first+b.n-1 > snapSeq {
			from = i
			break
		}
	}
	var recs uint64
	var size int64
	for from > 0 {
		b := l.batches[from-1]
		if recs+b.n > tail.Records || size+b.bytes > tail.Bytes {
			break
		}
		recs, size = recs+b.n, size+b.bytes
		from--
	}
	upTo := snapSeq // the last record the deletion may take
	if from < len(l.batches) {
		upTo = min(upTo, l.batches[from].first-1)
	}
	upTo = max(upTo, l.trimmed)
	gone := l.batches[:from]
	l.batchMu.Unlock()

	p := l.opts.Prefix
	_, legacy, err := l.kv.Get(ctx, []byte(p+"snaphead"))
	if err != nil {
		return err
	}
	if len(gone) == 0 && !legacy && upTo == l.trimmed {
		return nil
	}
	mark := binary.LittleEndian.AppendUint64(nil, upTo)
	ok, _, err := l.kv.TxnOps(ctx, []etcdkv.Compare{{Key: leaderKey(p), Target: "CREATE", Revision: l.term}},
		[]etcdkv.KV{{Key: trimmedKey(p), Value: mark}},
		[]etcdkv.Range{
			{Key: []byte(p + "log/"), End: logKey(p, upTo+1)},
			{Key: []byte(p + "snap/"), End: etcdkv.PrefixEnd([]byte(p + "snap/"))},
			{Key: []byte(p + "snaphead")},
		})
	if err != nil {
		return err
	}
	if !ok {
		l.lostOnce.Do(func() { close(l.lost) })
		return ErrDeposed
	}
	l.batchMu.Lock()
	defer l.batchMu.Unlock()
	l.trimmed = upTo
	k := 0
	for k < len(l.batches) && l.batches[k].first <= upTo {
		k++
	}
	l.batches = append(l.batches[:0:0], l.batches[k:]...)
	return nil
}

// LogSize is what the log on etcd holds as this leader knows it: batches,
// records and bytes (of the batches' values).
func (l *Leader) LogSize() (batches int, records uint64, bytes int64) {
	l.batchMu.Lock()
	defer l.batchMu.Unlock()
	for _, b := range l.batches {
		records += b.n
		bytes += b.bytes
	}
	return len(l.batches), records, bytes
}

// Trimmed is the last record the log on etcd may have lost to Trim: a
// master whose state ends before it cannot catch up from the log and
// needs a snapshot including at least that record. 0: nothing trimmed.
func Trimmed(ctx context.Context, opts Options) (uint64, error) {
	opts.fill()
	kv, found, err := etcdkv.New(opts.Endpoints).Get(ctx, trimmedKey(opts.Prefix))
	if err != nil || !found {
		return 0, err
	}
	if len(kv.Value) != 8 {
		return 0, fmt.Errorf("ha: %q holds %d bytes, not 8", kv.Key, len(kv.Value))
	}
	return binary.LittleEndian.Uint64(kv.Value), nil
}

// Advertise names where this leader serves its newest snapshot (a URL),
// on its lease and fenced on its term: the key goes with the leadership.
func (l *Leader) Advertise(ctx context.Context, url string) error {
	p := l.opts.Prefix
	ok, _, err := l.kv.Txn(ctx, []etcdkv.Compare{{Key: leaderKey(p), Target: "CREATE", Revision: l.term}},
		[]etcdkv.KV{{Key: sourceKey(p), Value: []byte(url), Lease: l.lease}})
	if err == nil && !ok {
		err = ErrDeposed
	}
	return err
}

// SnapshotSource is where the current leader serves its newest snapshot,
// "" when no leader said.
func SnapshotSource(ctx context.Context, opts Options) (string, error) {
	opts.fill()
	kv, found, err := etcdkv.New(opts.Endpoints).Get(ctx, sourceKey(opts.Prefix))
	if err != nil || !found {
		return "", err
	}
	return string(kv.Value), nil
}
