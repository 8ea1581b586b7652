// The fuzzy snapshot: the durable state written out while the core keeps
// serving, in the same records the journal holds, and read back.

package master

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"
	"time"

	"github.com/gostore/gostore/gostore/internal/fanout"
)

// StateMagic starts a state in the stored form WriteState writes (version
// 2). A version-1 state (the server's msgpack envelope) starts with a
// msgpack map, never with these bytes, so a reader tells them apart.
const StateMagic = "GSSTATE\x02"

// snapshotChunk bounds how many objects WriteState reads under one hold
// of a shard's lock: well under a millisecond of encoding, whatever the
// number of objects the core holds, and little work to lose to the CPU
// being taken away mid-chunk.
var snapshotChunk = 256 // a variable for tests only

// maxStateRecord bounds one record's length as read back from a state, so
// a damaged length allocates nothing (an object record is a key, a few
// numbers and its replicas: far below).
const maxStateRecord = 16 << 20

// SnapshotInfo says what one WriteState wrote and what it cost.
type SnapshotInfo struct {
	Objects, Segments, Holds, Drops int
	// Bytes written to w.
	Bytes int64
	// LongestHold is the longest any of the core's locks was held by the
	// walk (the most any call waited because of the snapshot).
	LongestHold time.Duration
}

// WriteState writes the durable state to w, as ZooKeeper writes its
// "fuzzy snapshot": without stopping the core. The caller reads its log's
// position seq0 first; the walk then reads each part of the state under
// the lock that orders the part's changes with their records (each
// shard's lock, a chunk of snapshotChunk objects at a time; the segments'
// lock; the holds' and the drops' own), and writes nothing under a lock.
// Each part is therefore seen as it was at some moment after seq0, and
// every change after that moment has a record after seq0. Since a record
// sets the whole state of its key (segment, hold, drop), replaying the
// records after seq0 on top of what WriteState wrote gives exactly the
// live state at the end of those records (see the package doc).
//
// Holds are written from the mirror the core keeps only when it reports
// changes (Config.OnChange): a core without it has no journal to fold.
//
// The stored form is StateMagic, NextSegID, Epoch and about how many
// objects follow (uvarints: the count sizes the reader's maps, no more),
// then frames (a uvarint length, then one EncodeChange record), then a
// frame of length 0 that says the state is whole.
func (c *Core) WriteState(w io.Writer) (SnapshotInfo, error) {
	var info SnapshotInfo
	bw := bufio.NewWriterSize(w, 1<<20)
	cw := &countingWriter{w: bw}
	// The high-water marks are read before anything they bound: a segment
	// or epoch made later is in a record after seq0 (replay keeps the max).
	c.segs.RLock()
	start := c.cfg.Now()
	f := newFrames(c.segs.nextID, c.epochs.Load(), c.objectCount())
	var err error
	for _, s := range c.segs.list {
		d := s.desc
		if err = f.add(Change{Kind: SegmentMounted, Segment: &d, GrantKey: s.keySecret()}); err != nil {
			break
		}
		info.Segments++
	}
	info.LongestHold = max(info.LongestHold, c.cfg.Now().Sub(start))
	c.segs.RUnlock()
	if err != nil {
		return info, err
	}
	// Holds and drops are few and their locks short-lived; each is copied
	// whole under its own lock, under which its changes are reported.
	c.held.Lock()
	start = c.cfg.Now()
	for _, h := range c.held.byID {
		if err = f.add(Change{Kind: RangesHeld, Hold: &h}); err != nil {
			break
		}
		info.Holds++
	}
	info.LongestHold = max(info.LongestHold, c.cfg.Now().Sub(start))
	c.held.Unlock()
	if err != nil {
		return info, err
	}
	c.drops.Lock()
	start = c.cfg.Now()
	for storage, kq := range c.drops.byClient {
		for _, k := range kq.keys {
			f.add(Change{Kind: DropAdded, Storage: storage, Key: k}) // no msgpack error: two strings
			info.Drops++
		}
	}
	info.LongestHold = max(info.LongestHold, c.cfg.Now().Sub(start))
	c.drops.Unlock()
	if _, err := cw.Write(f.buf); err != nil {
		return info, err
	}
	var d DurableObject // reused: see durableInto
	var disk DurableDisk
	for i := range c.shards {
		sh := &c.shards[i]
		n := 0
		f.buf = f.buf[:0]
		sh.mu.Lock()
		start = c.cfg.Now()
		// The range goes on across unlocking: Go lets a map change while
		// it is iterated (an entry added meanwhile may or may not come, one
		// deleted does not), and each change has its record after seq0.
		for key, o := range sh.objects {
			if durableInto(&d, &disk, o) {
				f.add(Change{Kind: ObjectSet, Key: key, Object: d}) // binary: no error
				info.Objects++
			}
			if n++; n%snapshotChunk == 0 {
				info.LongestHold = max(info.LongestHold, c.cfg.Now().Sub(start))
				sh.mu.Unlock()
				if _, err := cw.Write(f.buf); err != nil {
					return info, err
				}
				f.buf = f.buf[:0]
				sh.mu.Lock()
				start = c.cfg.Now()
			}
		}
		info.LongestHold = max(info.LongestHold, c.cfg.Now().Sub(start))
		sh.mu.Unlock()
		if _, err := cw.Write(f.buf); err != nil {
			return info, err
		}
	}
	if _, err := cw.Write([]byte{0}); err != nil { // the end: a frame of length 0
		return info, err
	}
	info.Bytes = cw.n
	return info, bw.Flush()
}

// WriteTo writes st in the stored form WriteState writes: how a standby
// saves the state it follows, which has no core to walk.
func (st *State) WriteTo(w io.Writer) (int64, error) {
	bw := bufio.NewWriterSize(w, 1<<20)
	cw := &countingWriter{w: bw}
	f := newFrames(st.NextSegID, st.Epoch, len(st.Objects))
	for id, d := range st.Segments {
		if err := f.add(Change{Kind: SegmentMounted, Segment: &d, GrantKey: st.GrantKeys[id]}); err != nil {
			return cw.n, err
		}
	}
	for _, h := range st.Held {
		if err := f.add(Change{Kind: RangesHeld, Hold: &h}); err != nil {
			return cw.n, err
		}
	}
	for storage, keys := range st.Drops {
		for k := range keys {
			f.add(Change{Kind: DropAdded, Storage: storage, Key: k}) // no msgpack error: two strings
		}
	}
	for k, d := range st.Objects {
		f.add(Change{Kind: ObjectSet, Key: k, Object: d}) // binary: no error
		if len(f.buf) >= 1<<20 {
			if _, err := cw.Write(f.buf); err != nil {
				return cw.n, err
			}
			f.buf = f.buf[:0]
		}
	}
	f.buf = append(f.buf, 0) // the end: a frame of length 0
	if _, err := cw.Write(f.buf); err != nil {
		return cw.n, err
	}
	return cw.n, bw.Flush()
}

// frames collects frames of the stored state; rec is reused for each.
type frames struct{ buf, rec []byte }

// newFrames starts a stored state: StateMagic, the high-water marks and
// about how many objects follow (a hint that sizes the reader's maps).
func newFrames(nextSegID, epoch uint64, objects int) *frames {
	f := &frames{buf: append([]byte(nil), StateMagic...)}
	f.buf = binary.AppendUvarint(f.buf, nextSegID)
	f.buf = binary.AppendUvarint(f.buf, epoch)
	f.buf = binary.AppendUvarint(f.buf, uint64(objects))
	return f
}

func (f *frames) add(ch Change) error {
	var err error
	if f.rec, err = EncodeChange(f.rec[:0], ch); err != nil {
		return err
	}
	f.buf = binary.AppendUvarint(f.buf, uint64(len(f.rec)))
	f.buf = append(f.buf, f.rec...)
	return nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (cw *countingWriter) Write(b []byte) (int, error) {
	n, err := cw.w.Write(b)
	cw.n += int64(n)
	return n, err
}

// ReadState reads a state WriteState wrote into st (its records applied in
// order, on top of what st holds). An error for anything else, a state cut
// short included (nothing read makes it panic or allocate past
// maxStateRecord at a time).
func ReadState(r io.Reader, st *State) error {
	limit := countLimit(r)
	sr, head, err := newStateReader(r)
	if err != nil {
		return err
	}
	if st.Objects == nil || len(st.Objects) == 0 {
		// Sized once rather than grown through every power of two; a
		// damaged count is capped (see countLimit).
		st.Objects = make(map[string]DurableObject, min(head.objects, limit))
	}
	st.Apply(Change{}) // makes the maps a State decoded elsewhere may lack
	st.NextSegID, st.Epoch = max(st.NextSegID, head.nextSegID), max(st.Epoch, head.epoch)
	for {
		rec, err := sr.next()
		if err != nil || rec == nil {
			return err
		}
		ch, err := DecodeChange(rec)
		if err != nil {
			return sr.recordErr(err)
		}
		st.Apply(ch)
	}
}

// RestoreFrom restores, as Restore does, the state WriteState wrote to r
// with the changes after it (the log's records after the snapshot)
// applied on top, without ever holding the state whole: each object's
// record is decoded straight into what Restore works from, and the
// changes, few, are kept aside until the state is read. It returns an
// error, and has restored nothing, when r holds no whole state or the
// state holds an object's removal (WriteState writes none: damage).
func (c *Core) RestoreFrom(r io.Reader, after []Change) (RestoreReport, error) {
	// The last change of each key in after decides its state: the key's
	// record in r, if any, is passed over.
	last := make(map[string]int)
	for i, ch := range after {
		if ch.Kind == ObjectSet || ch.Kind == ObjectGone {
			last[ch.Key] = i
		}
	}
	st, entries, err := readStateRecords(r, len(last))
	if err != nil {
		return RestoreReport{}, err
	}
	rb, err := decodeEntries(st, entries, last)
	if err != nil {
		return RestoreReport{}, err
	}
	entries = applyAfter(st, entries, after, last, rb)
	return c.restore(st, entries, rb), nil
}

// readStateRecords reads the state in r: its segments, holds and drops
// into st, its objects' records, undecoded, into entries (with room for
// extra more).
func readStateRecords(r io.Reader, extra int) (*State, []restoreEntry, error) {
	// The header's count sizes the slice, no further than countLimit
	// (beyond, the slice grows as it must).
	limit := countLimit(r)
	sr, head, err := newStateReader(r)
	if err != nil {
		return nil, nil, err
	}
	st := NewState()
	st.NextSegID, st.Epoch = head.nextSegID, head.epoch
	entries := make([]restoreEntry, 0, min(head.objects, limit)+uint64(extra))
	// The objects' records are only copied here (the reader reuses its
	// buffer), into blocks that live until they are decoded, from every
	// core, below: decoding is a third of a restore.
	var raw []byte
	for {
		rec, err := sr.next()
		if err != nil {
			return nil, nil, err
		}
		if rec == nil {
			return st, entries, nil
		}
		switch ChangeKind(rec[0]) {
		case ObjectSet:
			if len(raw)+len(rec) > cap(raw) {
				raw = make([]byte, 0, max(len(rec), 4<<20))
			}
			raw = append(raw, rec[1:]...)
			entries = append(entries, restoreEntry{raw: raw[len(raw)-len(rec)+1 : len(raw) : len(raw)]})
		case ObjectGone:
			return nil, nil, sr.recordErr(errors.New("an object's removal in a state"))
		default:
			ch, err := DecodeChange(rec)
			if err != nil {
				return nil, nil, sr.recordErr(err)
			}
			st.Apply(ch)
		}
	}
}

// decodeEntries decodes the entries' records, spread over GOMAXPROCS
// goroutines, each cutting replicas from its own blocks; an entry whose
// key a change in after sets or removes (last) is skipped. It raises
// st.Epoch to the entries', and returns the first goroutine's blocks.
func decodeEntries(st *State, entries []restoreEntry, last map[string]int) (*restoreBlocks, error) {
	parts := runtime.GOMAXPROCS(0)
	type partResult struct {
		rb    restoreBlocks
		epoch uint64
		err   error
	}
	results := make([]partResult, parts)
	fanout.Each(parts, parts, func(p int) {
		res := &results[p]
		for i := p * len(entries) / parts; i < (p+1)*len(entries)/parts; i++ {
			e := &entries[i]
			rd := reader{b: e.raw}
			e.key, e.raw = rd.object(&e.d, &res.rb), nil
			if rd.err == nil && len(rd.b) != 0 {
				rd.err = fmt.Errorf("%d bytes after the change", len(rd.b))
			}
			if rd.err != nil {
				res.err = fmt.Errorf("state object %d: %w", i, rd.err)
				return
			}
			if _, ok := last[e.key]; ok {
				e.skip = true // after has the newer state
				continue
			}
			e.reps, e.writing = res.rb.replicas(len(e.d.Replicas)), res.rb.replicas(len(e.d.Writing))
			res.epoch = max(res.epoch, e.d.Epoch)
		}
	})
	for _, res := range results {
		if res.err != nil {
			return nil, res.err
		}
		st.Epoch = max(st.Epoch, res.epoch)
	}
	return &results[0].rb, nil
}

// applyAfter applies the changes after the state to st, and appends to
// entries the objects they leave (each key's last set), their replicas
// cut from rb.
func applyAfter(st *State, entries []restoreEntry, after []Change, last map[string]int, rb *restoreBlocks) []restoreEntry {
	for i, ch := range after {
		switch ch.Kind {
		case ObjectSet:
			if last[ch.Key] == i {
				d := ch.Object
				entries = append(entries, restoreEntry{key: ch.Key, d: d, reps: rb.replicas(len(d.Replicas)),
					writing: rb.replicas(len(d.Writing))})
			}
			st.Epoch = max(st.Epoch, ch.Object.Epoch)
		case ObjectGone:
		default:
			st.Apply(ch)
		}
	}
	return entries
}

// minObjectRecord is the fewest bytes an object's frame takes in a stored
// state: its length, kind, key length, size, epoch, writer length, flags
// and two replica counts.
const minObjectRecord = 9

// countLimit is as many objects as the state r holds can have: the bytes
// r has left over minObjectRecord, or 2^16 when r does not say (a
// state's count of objects sizes what its reader makes, and is believed
// no further: a damaged count allocates nothing the state does not back).
func countLimit(r io.Reader) uint64 {
	if l, ok := r.(interface{ Len() int }); ok {
		return uint64(l.Len()) / minObjectRecord
	}
	return 1 << 16
}

// stateHead is the header of a stored state.
type stateHead struct{ nextSegID, epoch, objects uint64 }

// stateReader reads the records of a stored state one at a time, reusing
// one buffer.
type stateReader struct {
	r   io.Reader
	br  io.ByteReader
	rec []byte
	i   int // records read
}

func newStateReader(r io.Reader) (*stateReader, stateHead, error) {
	var head stateHead
	br, ok := r.(io.ByteReader)
	if !ok {
		b := bufio.NewReaderSize(r, 1<<20)
		br, r = b, b
	}
	magic := make([]byte, len(StateMagic))
	if _, err := io.ReadFull(r, magic); err != nil || string(magic) != StateMagic {
		return nil, head, errors.New("not a version-2 state")
	}
	for _, v := range []*uint64{&head.nextSegID, &head.epoch, &head.objects} {
		var err error
		if *v, err = binary.ReadUvarint(br); err != nil {
			return nil, head, fmt.Errorf("state header: %w", err)
		}
	}
	return &stateReader{r: r, br: br}, head, nil
}

// next is the next record (valid until the next call), nil at the end.
func (sr *stateReader) next() ([]byte, error) {
	n, err := binary.ReadUvarint(sr.br)
	if err != nil {
		return nil, fmt.Errorf("state cut short after %d records", sr.i)
	}
	if n == 0 {
		return nil, nil
	}
	if n > maxStateRecord {
		return nil, fmt.Errorf("state record %d: length %d over the limit", sr.i, n)
	}
	if uint64(cap(sr.rec)) < n {
		sr.rec = make([]byte, n)
	}
	sr.rec = sr.rec[:n]
	if _, err := io.ReadFull(sr.r, sr.rec); err != nil {
		return nil, fmt.Errorf("state cut short in record %d", sr.i)
	}
	sr.i++
	return sr.rec, nil
}

// recordErr says which record err is about.
func (sr *stateReader) recordErr(err error) error {
	return fmt.Errorf("state record %d: %w", sr.i-1, err)
}
