// Campaigning, keeping the lease, fenced appends, and reading the log.

package ha

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/gostore/gostore/gostore/etcdkv"
)

// ErrDeposed: this leader's term is over; another may lead.
var ErrDeposed = errors.New("ha: no longer the leader")

// maxBatchBytes keeps one log key under etcd's default request limit
// (1.5 MiB).
const maxBatchBytes = 1 << 20

// Options configure a campaign.
type Options struct {
	Endpoints []string
	Prefix    string        // default "/gostore/master/"
	ID        string        // what the leader key holds: the master's address
	TTL       time.Duration // the lease (default 5 s); a dead leader is replaced this long after
}

func (o *Options) fill() {
	if o.Prefix == "" {
		o.Prefix = "/gostore/master/"
	}
	if o.TTL <= 0 {
		o.TTL = 5 * time.Second
	}
}

func leaderKey(prefix string) []byte { return []byte(prefix + "leader") }

func logKey(prefix string, seq uint64) []byte { return []byte(fmt.Sprintf("%slog/%020d", prefix, seq)) }

// Leader is a won campaign.
type Leader struct {
	kv    *etcdkv.Client
	opts  Options
	lease int64
	term  int64 // the leader key's create revision

	// batches indexes the log on etcd for Trim: those this leader wrote
	// (appended by Append), and, once Trim ran, those of earlier terms.
	batchMu sync.Mutex
	batches []batch
	indexed bool // the log of earlier terms is in batches
	trimmed uint64

	lost     chan struct{}
	lostOnce sync.Once
	stopOnce sync.Once
	stop     chan struct{}
	done     chan struct{}
}

// Campaign returns once this master leads: it creates the leader key on a
// fresh lease where none exists, and otherwise waits for the current
// leader's key to go (its lease ends, or it resigns).
func Campaign(ctx context.Context, opts Options) (*Leader, error) {
	opts.fill()
	kv := etcdkv.New(opts.Endpoints)
	key := leaderKey(opts.Prefix)
	ttl := int64(max(opts.TTL/time.Second, 1))
	for {
		lease, err := kv.Grant(ctx, ttl)
		if err != nil {
			return nil, err
		}
		won, rev, err := kv.Txn(ctx, []etcdkv.Compare{{Key: key, Target: "CREATE", Revision: 0}},
			[]etcdkv.KV{{Key: key, Value: []byte(opts.ID), Lease: lease}})
		if err != nil {
			kv.Revoke(context.WithoutCancel(ctx), lease)
			return nil, err
		}
		if won {
			l := &Leader{kv: kv, opts: opts, lease: lease, term: rev, lost: make(chan struct{}),
				stop: make(chan struct{}), done: make(chan struct{})}
			go l.keepAlive()
			return l, nil
		}
		kv.Revoke(context.WithoutCancel(ctx), lease)
		// Someone leads: wait for the key to go. etcd's watch is a stream
		// the JSON gateway serves poorly; a poll at a tenth of the TTL
		// bounds the takeover delay at TTL + TTL/10.
		for {
			_, found, err := kv.Get(ctx, key)
			if err == nil && !found {
				break
			}
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(opts.TTL / 10):
			}
		}
	}
}

// Term is the leader key's create revision: it names this leadership.
func (l *Leader) Term() int64 { return l.term }

// Lost is closed when the lease could not be kept: step down.
func (l *Leader) Lost() <-chan struct{} { return l.lost }

// keepAlive refreshes the lease every TTL/3. The leadership is lost when
// etcd says the lease is gone, or when no refresh got through for a whole
// TTL (etcd without a quorum cannot answer: a new leader may be elected
// once it can). A refresh that fails short of that is tried again.
func (l *Leader) keepAlive() {
	defer close(l.done)
	every := l.opts.TTL / 3
	t := time.NewTicker(every)
	defer t.Stop()
	lastOK := time.Now()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), every)
		ttl, err := l.kv.KeepAlive(ctx, l.lease)
		cancel()
		if err == nil && ttl > 0 {
			lastOK = time.Now()
			continue
		}
		if (err == nil && ttl <= 0) || time.Since(lastOK) >= l.opts.TTL {
			l.lostOnce.Do(func() { close(l.lost) })
			return
		}
	}
}

// Append writes records as log entries first, first+1, ...: a batch per
// key ("log/<its first seq>", at most 1 MiB), one fenced transaction per
// key; ErrDeposed when the term is over.
func (l *Leader) Append(ctx context.Context, first uint64, records [][]byte) error {
	key := leaderKey(l.opts.Prefix)
	for len(records) > 0 {
		n, size := 0, 4
		for n < len(records) && (n == 0 || size+4+len(records[n]) <= maxBatchBytes) {
			size += 4 + len(records[n])
			n++
		}
		ok, _, err := l.kv.Txn(ctx, []etcdkv.Compare{{Key: key, Target: "CREATE", Revision: l.term}},
			[]etcdkv.KV{{Key: logKey(l.opts.Prefix, first), Value: packBatch(records[:n], size)}})
		if err != nil {
			return err
		}
		if !ok {
			l.lostOnce.Do(func() { close(l.lost) })
			return ErrDeposed
		}
		l.indexBatch(batch{first: first, n: uint64(n), bytes: int64(size)})
		records, first = records[n:], first+uint64(n)
	}
	return nil
}

// packBatch is a log key's value: the record count, then each record's
// length and bytes (little endian u32s).
func packBatch(records [][]byte, size int) []byte {
	b := make([]byte, 0, size)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(records)))
	for _, r := range records {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(r)))
		b = append(b, r...)
	}
	return b
}

// unpackBatch reads packBatch's form; an error for anything else.
func unpackBatch(b []byte) ([][]byte, error) {
	if len(b) < 4 {
		return nil, errors.New("short batch")
	}
	n := binary.LittleEndian.Uint32(b)
	b = b[4:]
	if uint64(n) > uint64(len(b))/4 {
		return nil, errors.New("record count past the batch")
	}
	out := make([][]byte, 0, n)
	for i := uint32(0); i < n; i++ {
		if len(b) < 4 {
			return nil, errors.New("batch cut short")
		}
		m := binary.LittleEndian.Uint32(b)
		b = b[4:]
		if uint64(m) > uint64(len(b)) {
			return nil, errors.New("record past the batch")
		}
		out = append(out, b[:m:m])
		b = b[m:]
	}
	if len(b) != 0 {
		return nil, errors.New("bytes after the batch")
	}
	return out, nil
}

// Abandon stops keeping the lease without giving it back: the leadership
// ends when the lease runs out, as if this process had died. A master
// that stepped down calls it; tests use it to stand for a crash.
func (l *Leader) Abandon() {
	l.stopOnce.Do(func() { close(l.stop) })
	<-l.done
	l.lostOnce.Do(func() { close(l.lost) })
}

// Resign ends the leadership now (a clean stop): another master may take
// over at once.
func (l *Leader) Resign(ctx context.Context) error {
	l.stopOnce.Do(func() { close(l.stop) })
	<-l.done
	l.lostOnce.Do(func() { close(l.lost) })
	return l.kv.Revoke(ctx, l.lease)
}

// CurrentLeader is the leading master's ID, "" when none leads. It reads
// any reachable member's own copy: it answers without an etcd quorum
// (when no leader can change anyway), possibly a moment behind.
func CurrentLeader(ctx context.Context, opts Options) (string, error) {
	opts.fill()
	kv, found, err := etcdkv.New(opts.Endpoints).GetLocal(ctx, leaderKey(opts.Prefix))
	if err != nil || !found {
		return "", err
	}
	return string(kv.Value), nil
}

// ReadLog returns the log's records from seq from on, in order; it stops
// at the first gap, and refuses a batch that cannot be read. Only the
// batches from the one holding record from are read: a follower polling
// for new records reads just those.
func ReadLog(ctx context.Context, opts Options, from uint64) ([][]byte, error) {
	opts.fill()
	kv := etcdkv.New(opts.Endpoints)
	prefix := []byte(opts.Prefix + "log/")
	start := logKey(opts.Prefix, from)
	// The batch before start may hold from: its first key is where to read.
	prev, _, err := kv.Range(ctx, prefix, start, etcdkv.RangeOptions{Limit: 1, Descend: true})
	if err != nil {
		return nil, err
	}
	if len(prev) == 1 {
		start = prev[0].Key
	}
	kvs, _, err := kv.Range(ctx, start, etcdkv.PrefixEnd(prefix), etcdkv.RangeOptions{})
	if err != nil {
		return nil, err
	}
	var out [][]byte
	next := from
	for _, e := range kvs {
		first, err := strconv.ParseUint(string(e.Key[len(prefix):]), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("ha: log key %q", e.Key)
		}
		records, err := unpackBatch(e.Value)
		if err != nil {
			return nil, fmt.Errorf("ha: log batch %d: %w", first, err)
		}
		end := first + uint64(len(records)) // one past its last record
		if end <= next {
			continue // all before from (or a snapshot covers it)
		}
		if first > next {
			break // a gap
		}
		out = append(out, records[next-first:]...)
		next = end
	}
	return out, nil
}
