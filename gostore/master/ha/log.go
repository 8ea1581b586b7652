// Log: the leader's change log on etcd with the journal's interface
// (Enqueue, Wait, LastSeq), group-committed, and the reading of a log
// that still holds a snapshot in the old format (Recover).

package ha

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"sync"
	"time"

	"github.com/gostore/gostore/gostore/etcdkv"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Log writes a leader's records to etcd. Concurrent Enqueues between two
// writes go out together (one fenced transaction per 120 records); Wait
// returns once a record is committed in etcd (a quorum has it).
type Log struct {
	l   *Leader
	kv  *etcdkv.Client
	ttl time.Duration

	mu       sync.Mutex
	cond     *sync.Cond
	next     uint64
	pending  [][]byte
	written  uint64
	err      error
	retrying error // the writer keeps retrying a batch etcd did not take
	closed   bool

	wake chan struct{}
	done chan struct{}
}

// OpenLog starts l's log after record last (what the new leader read).
func OpenLog(l *Leader, last uint64) *Log {
	g := &Log{l: l, kv: l.kv, ttl: l.opts.TTL, next: last + 1, written: last, wake: make(chan struct{}, 1),
		done: make(chan struct{})}
	g.cond = sync.NewCond(&g.mu)
	go g.run()
	return g
}

// Enqueue hands rec to the writer as the next record; it does not wait.
func (g *Log) Enqueue(rec []byte) (uint64, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err != nil {
		return 0, g.err
	}
	seq := g.next
	g.next++
	g.pending = append(g.pending, rec)
	select {
	case g.wake <- struct{}{}:
	default:
	}
	return seq, nil
}

// Wait returns once every record up to seq is in etcd, or the error that
// stopped the log (ErrDeposed: step down).
func (g *Log) Wait(seq uint64) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	for g.err == nil && g.written < seq {
		g.cond.Wait()
	}
	if g.written >= seq {
		return nil
	}
	return g.err
}

// LastSeq is the last record enqueued.
func (g *Log) LastSeq() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.next - 1
}

func (g *Log) run() {
	defer close(g.done)
	for range g.wake {
		g.mu.Lock()
		batch, first, stop := g.pending, g.written+1, g.closed
		g.pending = nil
		g.mu.Unlock()
		var err error
		if len(batch) > 0 {
			err = g.appendRetrying(first, batch)
		}
		g.mu.Lock()
		g.retrying = nil
		if err != nil {
			g.err = fmt.Errorf("ha log: %w", err) // nothing after an unknown write is acknowledged
		} else {
			g.written += uint64(len(batch))
		}
		g.cond.Broadcast()
		failed := g.err != nil
		g.mu.Unlock()
		if stop || failed {
			return
		}
	}
}

// appendRetrying writes one batch, again and again while etcd cannot
// answer (no quorum, say): the batch's keys are its sequence numbers, so a
// write that did go through and is repeated writes the same bytes. It
// stops at success, at ErrDeposed, or when the leadership is lost or the
// log closed.
func (g *Log) appendRetrying(first uint64, batch [][]byte) error {
	backoff := 50 * time.Millisecond
	for {
		ctx, cancel := context.WithTimeout(context.Background(), g.ttl)
		err := g.l.Append(ctx, first, batch)
		cancel()
		if err == nil || errors.Is(err, ErrDeposed) {
			return err
		}
		g.mu.Lock()
		g.retrying = err
		closed := g.closed
		g.mu.Unlock()
		select {
		case <-g.l.Lost():
			return fmt.Errorf("%w (after: %v)", ErrDeposed, err)
		default:
		}
		if closed {
			return err
		}
		time.Sleep(backoff) // etcd has no event to wait on while it cannot answer
		backoff = min(2*backoff, g.ttl/2)
	}
}

// Retrying is the error the writer keeps retrying on (etcd cannot take
// the log), or nil.
func (g *Log) Retrying() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.retrying
}

// Close writes what is pending and stops the writer.
func (g *Log) Close() error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return g.err
	}
	g.closed = true
	g.mu.Unlock()
	select {
	case g.wake <- struct{}{}:
	default:
	}
	<-g.done
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.err
}

// Recovered is what Recover read: a snapshot that an older gostore stored
// on etcd ("snaphead" and "snap/<seq>/<chunk>"), and the log after it.
type Recovered struct {
	Snapshot    []byte // nil: none
	SnapshotSeq uint64
	Records     [][]byte // from SnapshotSeq+1 on
}

// LastSeq is the last record recovered.
func (r *Recovered) LastSeq() uint64 { return r.SnapshotSeq + uint64(len(r.Records)) }

// SnapshotSeq is the record the old format's snapshot on etcd includes
// (0: none; this gostore writes none, and Trim deletes one it finds).
func SnapshotSeq(ctx context.Context, opts Options) (uint64, error) {
	opts.fill()
	head, found, err := etcdkv.New(opts.Endpoints).Get(ctx, []byte(opts.Prefix+"snaphead"))
	if err != nil || !found {
		return 0, err
	}
	if len(head.Value) != 20 {
		return 0, fmt.Errorf("ha: snapshot head of %d bytes", len(head.Value))
	}
	return binary.LittleEndian.Uint64(head.Value), nil
}

// Recover reads the old format's snapshot on etcd, if any, and the
// records after it.
func Recover(ctx context.Context, opts Options) (*Recovered, error) {
	opts.fill()
	kv := etcdkv.New(opts.Endpoints)
	rec := &Recovered{}
	head, found, err := kv.Get(ctx, []byte(opts.Prefix+"snaphead"))
	if err != nil {
		return nil, err
	}
	if found {
		if len(head.Value) != 20 {
			return nil, fmt.Errorf("ha: snapshot head of %d bytes", len(head.Value))
		}
		seq := binary.LittleEndian.Uint64(head.Value)
		size := binary.LittleEndian.Uint64(head.Value[8:])
		sum := binary.LittleEndian.Uint32(head.Value[16:])
		prefix := []byte(fmt.Sprintf("%ssnap/%020d/", opts.Prefix, seq))
		parts, _, err := kv.Range(ctx, prefix, etcdkv.PrefixEnd(prefix), etcdkv.RangeOptions{})
		if err != nil {
			return nil, err
		}
		var state []byte
		for _, p := range parts {
			state = append(state, p.Value...)
		}
		if uint64(len(state)) != size || crc32.Checksum(state, castagnoli) != sum {
			return nil, fmt.Errorf("ha: snapshot %d is damaged (%d of %d bytes)", seq, len(state), size)
		}
		rec.Snapshot, rec.SnapshotSeq = state, seq
	}
	rec.Records, err = ReadLog(ctx, opts, rec.SnapshotSeq+1)
	return rec, err
}
