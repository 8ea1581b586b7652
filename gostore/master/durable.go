// What of the core's state outlives a restart, and the changes to it that
// the core reports as they happen (the restore from a saved state is
// restore.go's).

package master

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/gostore/gostore/gostore/wire"
)

// ChangeKind says what a Change records.
type ChangeKind uint8

const (
	// ObjectSet: Key's durable state is now Object.
	ObjectSet ChangeKind = iota + 1
	// ObjectGone: Key has no durable state any more.
	ObjectGone
	// SegmentMounted: Segment joined the pool.
	SegmentMounted
	// SegmentRemoved: the segment SegID left the pool.
	SegmentRemoved
	// DropAdded: the disk copy of Key in directory Storage is stale and
	// must be deleted by whoever opens that directory next.
	DropAdded
	// DropsDone: the copies of Keys in Storage were handed out for deletion
	// (or claimed): no longer to delete.
	DropsDone
	// RangesHeld: Hold's ranges stay allocated (a writer or a task may
	// still copy into them) until released.
	RangesHeld
	// RangesReleased: the hold SegID names ended.
	RangesReleased
)

// Change is one change of the durable state, reported through
// Config.OnChange under the lock that made it: for one key (or segment)
// changes arrive in the order they happened.
type Change struct {
	_msgpack struct{} `msgpack:",as_array"`

	Kind    ChangeKind        `msgpack:"k"`
	Key     string            `msgpack:"key,omitempty"`
	Object  DurableObject     `msgpack:"o,omitempty"`
	Segment *wire.SegmentDesc `msgpack:"seg,omitempty"`
	SegID   uint64            `msgpack:"id,omitempty"`
	Storage string            `msgpack:"st,omitempty"`
	Keys    []string          `msgpack:"ks,omitempty"`
	Hold    *DurableHold      `msgpack:"h,omitempty"`
	// GrantKey (SegmentMounted) is the segment's grant key, nil for none.
	// Not part of the msgpack body (whose field count older records fix):
	// EncodeChange stores it after the body.
	GrantKey []byte `msgpack:"-"`
	// OnlyHolds (not journaled): the change only keeps ranges out of use
	// (a hold, or a new write's ranges where its key had nothing they
	// could damage). Losing it loses no stored byte, only the guard against
	// handing those ranges out again while their writer copies, so a
	// server may answer before it is synced (see the server's durability).
	OnlyHolds bool `msgpack:"-"`
	// Completes (not journaled): the change only marks a write's ranges,
	// already held by its earlier record, complete (PutEnd). It frees no
	// range, so a write started after it cannot be handed one whose loss
	// in a crash would expose; a server need not sync it before answering
	// a later write start (only before acknowledging it).
	Completes bool `msgpack:"-"`
}

// DurableObject is what of an object survives a restart: its size, the
// write it holds (epoch, writer), its pins, its COMPLETE memory replicas,
// its disk copy, and the ranges of a write in progress (which come back
// quarantined, not readable). Leases, readers and tasks do not.
type DurableObject struct {
	_msgpack struct{} `msgpack:",as_array"`

	Size     uint64           `msgpack:"n"`
	Epoch    uint64           `msgpack:"e"`
	Writer   string           `msgpack:"w,omitempty"`
	HardPin  bool             `msgpack:"hp,omitempty"`
	SoftPin  bool             `msgpack:"sp,omitempty"` // soft-pinned (for SoftPinTTL from the restore)
	Replicas []DurableReplica `msgpack:"r,omitempty"`
	Disk     *DurableDisk     `msgpack:"d,omitempty"`
	// Writing: ranges a write in progress was given. Not readable; kept so
	// that a restart holds them (quarantined) while the writer may still be
	// copying, instead of handing them to a new object.
	Writing []DurableReplica `msgpack:"wr,omitempty"`
}

// DurableReplica is a COMPLETE memory replica: the segment and offset.
type DurableReplica struct {
	_msgpack struct{} `msgpack:",as_array"`

	SegID  uint64 `msgpack:"s"`
	Offset uint64 `msgpack:"o"`
}

// DurableHold is ranges held out of use: a taken-over write's (until
// ReleaseAt, ns on the core's clock) or a running task's targets
// (ReleaseAt 0: until the task ends).
type DurableHold struct {
	_msgpack  struct{}         `msgpack:",as_array"`
	ID        uint64           `msgpack:"i"`
	Size      uint64           `msgpack:"n"`
	Ranges    []DurableReplica `msgpack:"r"`
	ReleaseAt int64            `msgpack:"t"`
}

// DurableDisk is a disk copy in a client's SSD tier.
type DurableDisk struct {
	_msgpack struct{} `msgpack:",as_array"`

	Client   string `msgpack:"c"`
	Endpoint string `msgpack:"e"`
	Storage  string `msgpack:"s"`
}

// State is the durable state: what a snapshot holds, and what replaying
// changes onto one gives.
type State struct {
	Segments map[uint64]wire.SegmentDesc `msgpack:"segs"`
	Objects  map[string]DurableObject    `msgpack:"objs"`
	// Drops: per SSD directory, the stale copies still to delete there.
	Drops map[string]map[string]bool `msgpack:"drops"`
	// Held: ranges held out of use, by hold id.
	Held map[uint64]DurableHold `msgpack:"held"`
	// NextSegID and Epoch are high-water marks: a restored core hands out
	// segment ids and write epochs above them.
	NextSegID uint64 `msgpack:"nid"`
	Epoch     uint64 `msgpack:"ep"`
	// GrantKeys are the segments' grant keys, by segment id (a segment
	// without one: a state written before grants, or an owner that sent
	// none). The state directory is as secret as the keys.
	GrantKeys map[uint64][]byte `msgpack:"gk,omitempty"`
}

// NewState is an empty State.
func NewState() *State {
	return &State{Segments: map[uint64]wire.SegmentDesc{}, Objects: map[string]DurableObject{},
		Drops: map[string]map[string]bool{}, Held: map[uint64]DurableHold{}, GrantKeys: map[uint64][]byte{}}
}

// Apply replays one change. A State decoded from a snapshot may lack
// maps (a snapshot written before they existed): Apply makes them.
func (st *State) Apply(ch Change) {
	if st.Segments == nil {
		st.Segments = map[uint64]wire.SegmentDesc{}
	}
	if st.Objects == nil {
		st.Objects = map[string]DurableObject{}
	}
	if st.Drops == nil {
		st.Drops = map[string]map[string]bool{}
	}
	if st.Held == nil {
		st.Held = map[uint64]DurableHold{}
	}
	if st.GrantKeys == nil {
		st.GrantKeys = map[uint64][]byte{}
	}
	switch ch.Kind {
	case ObjectSet:
		st.Objects[ch.Key] = ch.Object
		st.Epoch = max(st.Epoch, ch.Object.Epoch)
	case ObjectGone:
		delete(st.Objects, ch.Key)
	case SegmentMounted:
		if ch.Segment != nil {
			st.Segments[ch.Segment.ID] = *ch.Segment
			st.NextSegID = max(st.NextSegID, ch.Segment.ID)
			if ch.GrantKey != nil {
				st.GrantKeys[ch.Segment.ID] = ch.GrantKey
			} else {
				delete(st.GrantKeys, ch.Segment.ID)
			}
		}
	case SegmentRemoved:
		delete(st.Segments, ch.SegID)
		delete(st.GrantKeys, ch.SegID)
	case DropAdded:
		if st.Drops[ch.Storage] == nil {
			st.Drops[ch.Storage] = map[string]bool{}
		}
		st.Drops[ch.Storage][ch.Key] = true
	case DropsDone:
		for _, k := range ch.Keys {
			delete(st.Drops[ch.Storage], k)
		}
		if len(st.Drops[ch.Storage]) == 0 {
			delete(st.Drops, ch.Storage)
		}
	case RangesHeld:
		if ch.Hold != nil {
			st.Held[ch.Hold.ID] = *ch.Hold
		}
	case RangesReleased:
		delete(st.Held, ch.SegID)
	}
}

// holdRanges reports reps held out of use and returns the hold's id; 0
// when nobody journals.
func (c *Core) holdRanges(reps []replica, size uint64, releaseAt int64) uint64 {
	if c.cfg.OnChange == nil || len(reps) == 0 {
		return 0
	}
	h := heldOf(c.holds.Add(1), reps, size, releaseAt)
	c.held.Lock()
	defer c.held.Unlock()
	c.keepHold(h)
	c.cfg.OnChange(Change{Kind: RangesHeld, Hold: &h, OnlyHolds: true})
	return h.ID
}

// keepHold adds h to the holds WriteState writes; c.held is locked.
func (c *Core) keepHold(h DurableHold) {
	if c.held.byID == nil {
		c.held.byID = map[uint64]DurableHold{}
	}
	c.held.byID[h.ID] = h
}

// releaseHold reports the end of hold id (the change's SegID names it).
func (c *Core) releaseHold(id uint64) {
	if c.cfg.OnChange != nil && id != 0 {
		c.held.Lock()
		defer c.held.Unlock()
		delete(c.held.byID, id)
		c.cfg.OnChange(Change{Kind: RangesReleased, SegID: id})
	}
}

func heldOf(id uint64, reps []replica, size uint64, releaseAt int64) DurableHold {
	h := DurableHold{ID: id, Size: size, ReleaseAt: releaseAt}
	for _, r := range reps {
		h.Ranges = append(h.Ranges, DurableReplica{SegID: r.seg.desc.ID, Offset: r.offset})
	}
	return h
}

// pushDrop queues the stale disk copy of key in storage for deletion.
// Drops are reported under the queue's lock, with the change they record:
// a pop's DropsDone comes after the push's DropAdded, and WriteState,
// reading the queue under the same lock, sees exactly the drops reported.
func (c *Core) pushDrop(storage, key string) {
	c.drops.Lock()
	defer c.drops.Unlock()
	c.drops.pushLocked(storage, key)
	if c.cfg.OnChange != nil {
		c.cfg.OnChange(Change{Kind: DropAdded, Storage: storage, Key: key})
	}
}

// popDrops hands out up to max keys of storage to delete (see pushDrop).
func (c *Core) popDrops(storage string, max int) []string {
	c.drops.Lock()
	defer c.drops.Unlock()
	keys := c.drops.popLocked(storage, max)
	c.dropsDone(storage, keys...)
	return keys
}

// takeDrop takes key out of storage's drops, reporting whether it was
// there (see pushDrop).
func (c *Core) takeDrop(storage, key string) bool {
	c.drops.Lock()
	defer c.drops.Unlock()
	if !c.drops.takeLocked(storage, key) {
		return false
	}
	c.dropsDone(storage, key)
	return true
}

// dropsDone reports keys of storage no longer to delete; c.drops is locked.
func (c *Core) dropsDone(storage string, keys ...string) {
	if c.cfg.OnChange != nil && len(keys) > 0 {
		c.cfg.OnChange(Change{Kind: DropsDone, Storage: storage, Keys: keys})
	}
}

// durable is o's durable state, or false when it has none (no COMPLETE
// replica and no disk copy: an object still being written).
func durable(o *object) (DurableObject, bool) {
	var d DurableObject
	ok := durableInto(&d, new(DurableDisk), o)
	return d, ok
}

// durableInto is durable writing into d, reusing its slices and disk (the
// snapshot's walk allocates nothing per object: allocation there would
// draft it into the collector's work while it holds a shard's lock).
func durableInto(d *DurableObject, disk *DurableDisk, o *object) bool {
	*d = DurableObject{Size: o.size, Epoch: o.epoch, Writer: o.writerID(), HardPin: o.hardPin, SoftPin: o.softPinUntil() != 0,
		Replicas: d.Replicas[:0], Writing: d.Writing[:0]}
	for _, r := range o.reps() {
		dr := DurableReplica{SegID: r.seg.desc.ID, Offset: r.offset}
		if r.status == replicaComplete {
			d.Replicas = append(d.Replicas, dr)
		} else {
			d.Writing = append(d.Writing, dr)
		}
	}
	if len(d.Replicas) == 0 {
		d.Replicas = nil // as a decoded record has it
	}
	if len(d.Writing) == 0 {
		d.Writing = nil
	}
	if od := o.onDisk(); od != nil {
		*disk = DurableDisk{Client: od.client, Endpoint: od.endpoint, Storage: od.storage}
		d.Disk = disk
	}
	return len(d.Replicas) > 0 || d.Disk != nil || len(d.Writing) > 0
}

// record reports key's durable state after a change (o nil: the key is
// gone). The caller holds key's shard lock.
func (c *Core) record(key string, o *object) {
	c.report(key, o, Change{})
}

// recordNewWrite reports a new object being written under key (Change.OnlyHolds):
// the key's previous state was nothing, or ranges already held (a write
// taken over, replicas discarded by an upsert), so its ranges are fresh.
func (c *Core) recordNewWrite(key string, o *object) {
	c.report(key, o, Change{OnlyHolds: true})
}

// recordCompleted reports a write ended (Change.Completes): o's ranges,
// all held since its start, are now its complete replicas.
func (c *Core) recordCompleted(key string, o *object) {
	c.report(key, o, Change{Completes: true})
}

// recordGone reports key gone, o having been its object: o's KV events
// end. The caller holds key's shard lock and has taken o out of the map.
func (c *Core) recordGone(key string, o *object) {
	c.announce(key, o, true)
	c.report(key, nil, Change{})
}

// report tells OnChange key's state, and the KV events what became or
// stopped being readable; how carries the change's flags.
func (c *Core) report(key string, o *object, how Change) {
	if o != nil {
		if c.ledger != nil {
			c.charge(key, o) // every change of o's replicas comes through here
		}
		c.announce(key, o, false)
	}
	if c.cfg.OnChange == nil {
		return
	}
	if o != nil {
		if d, ok := durable(o); ok {
			how.Kind, how.Key, how.Object = ObjectSet, key, d
			c.cfg.OnChange(how)
			return
		}
	}
	c.cfg.OnChange(Change{Kind: ObjectGone, Key: key})
}

// recordSegment reports a segment joining (mounted) or leaving the pool.
// The caller holds segs' lock.
func (c *Core) recordSegment(s *segment, mounted bool) {
	if c.cfg.OnChange == nil {
		return
	}
	if mounted {
		d := s.desc
		c.cfg.OnChange(Change{Kind: SegmentMounted, Segment: &d, GrantKey: s.keySecret()})
	} else {
		c.cfg.OnChange(Change{Kind: SegmentRemoved, SegID: s.desc.ID})
	}
}

// DurableState is a consistent copy of the durable state, taken under
// every lock at once: it stops the core for as long as the copy takes, so
// no server calls it (servers use WriteState). Tests do: it reads the
// holds from the quarantine and the task table, not from the mirror
// WriteState writes, and so checks that mirror too. fn, when not nil,
// runs while every lock is held (no change can be reported meanwhile).
func (c *Core) DurableState(fn func()) *State {
	st := NewState()
	c.segs.Lock()
	defer c.segs.Unlock()
	for i := range c.shards {
		c.shards[i].mu.Lock()
	}
	defer func() {
		for i := range c.shards {
			c.shards[i].mu.Unlock()
		}
	}()
	st.NextSegID = c.segs.nextID
	st.Epoch = c.epochs.Load()
	for _, s := range c.segs.list {
		st.Segments[s.desc.ID] = s.desc
		if k := s.keySecret(); k != nil {
			st.GrantKeys[s.desc.ID] = k
		}
	}
	for i := range c.shards {
		for key, o := range c.shards[i].objects {
			if d, ok := durable(o); ok {
				st.Objects[key] = d
			}
		}
	}
	c.discarded.Lock()
	for _, d := range c.discarded.list {
		if d.hold != 0 {
			st.Held[d.hold] = heldOf(d.hold, d.replicas, d.size, d.releaseAt)
		}
	}
	c.discarded.Unlock()
	c.tasks.Lock()
	for _, t := range c.tasks.byID {
		if t.finished == 0 && t.hold != 0 {
			st.Held[t.hold] = heldOf(t.hold, t.targets, t.size, 0)
		}
	}
	c.tasks.Unlock()
	for storage, keys := range c.drops.all() {
		st.Drops[storage] = make(map[string]bool, len(keys))
		for _, k := range keys {
			st.Drops[storage][k] = true
		}
	}
	if fn != nil {
		fn()
	}
	return st
}

// The stored form of a Change. Object changes, nearly all of a journal,
// take a compact binary form (no reflection, one allocation); the rarer
// segment and drop changes are msgpack after their kind byte.
//
//	ObjectSet:  kind | key | size | epoch | writer | flags (1 hard pin,
//	            2 soft pin, 4 disk copy) | n | n × (segment id, offset) |
//	            [disk client | endpoint | storage]
//	ObjectGone: kind | key
//
// Strings are a uvarint length then the bytes; numbers are uvarints. A
// SegmentMounted change with a grant key has the key after its msgpack
// body, as a second msgpack value (bin): records written before grants
// end after the body, and read back without a key.

// EncodeChange appends ch's stored form to buf.
func EncodeChange(buf []byte, ch Change) ([]byte, error) {
	buf = append(buf, byte(ch.Kind))
	switch ch.Kind {
	case ObjectGone:
		return appendString(buf, ch.Key), nil
	case ObjectSet:
		o := &ch.Object
		buf = appendString(buf, ch.Key)
		buf = binary.AppendUvarint(buf, o.Size)
		buf = binary.AppendUvarint(buf, o.Epoch)
		buf = appendString(buf, o.Writer)
		var flags byte
		if o.HardPin {
			flags |= 1
		}
		if o.SoftPin {
			flags |= 2
		}
		if o.Disk != nil {
			flags |= 4
		}
		buf = append(buf, flags)
		buf = binary.AppendUvarint(buf, uint64(len(o.Replicas)))
		for _, r := range o.Replicas {
			buf = binary.AppendUvarint(buf, r.SegID)
			buf = binary.AppendUvarint(buf, r.Offset)
		}
		if o.Disk != nil {
			buf = appendString(buf, o.Disk.Client)
			buf = appendString(buf, o.Disk.Endpoint)
			buf = appendString(buf, o.Disk.Storage)
		}
		buf = binary.AppendUvarint(buf, uint64(len(o.Writing)))
		for _, r := range o.Writing {
			buf = binary.AppendUvarint(buf, r.SegID)
			buf = binary.AppendUvarint(buf, r.Offset)
		}
		return buf, nil
	}
	return encodeMsgpack(buf, ch)
}

// encodeMsgpack appends the stored form of a change that is not an
// object's. A function of its own: msgpack takes ch's address, which
// would move every object change to the heap too.
func encodeMsgpack(buf []byte, ch Change) ([]byte, error) {
	body, err := msgpack.Marshal(&ch)
	buf = append(buf, body...)
	if err == nil && ch.Kind == SegmentMounted && ch.GrantKey != nil {
		var key []byte
		key, err = msgpack.Marshal(ch.GrantKey)
		buf = append(buf, key...)
	}
	return buf, err
}

// DecodeChange reads one stored Change; an error for anything that is not
// one (nothing a disk holds makes it panic or allocate past its length).
func DecodeChange(b []byte) (Change, error) {
	var ch Change
	if len(b) == 0 {
		return ch, errors.New("empty change")
	}
	ch.Kind, b = ChangeKind(b[0]), b[1:]
	r := reader{b: b}
	switch ch.Kind {
	case ObjectGone:
		ch.Key = r.str()
	case ObjectSet:
		ch.Key = r.object(&ch.Object, nil)
	case SegmentMounted, SegmentRemoved, DropAdded, DropsDone, RangesHeld, RangesReleased:
		kind := ch.Kind
		// msgpack allocates what a length claims before it reads the
		// elements: bytes from a disk are vetted first, and must be the
		// record's one value.
		n, err := wire.CheckValue(b)
		if err != nil {
			return ch, err
		}
		if rest := b[n:]; kind == SegmentMounted && len(rest) > 0 {
			if m, err := wire.CheckValue(rest); err != nil {
				return ch, err
			} else if m != len(rest) {
				return ch, fmt.Errorf("change of kind %d: %d bytes after its grant key", kind, len(rest)-m)
			}
			if err := msgpack.Unmarshal(rest, &ch.GrantKey); err != nil {
				return ch, fmt.Errorf("grant key of a mounted segment: %w", err)
			}
			if ch.GrantKey == nil {
				return ch, fmt.Errorf("change of kind %d: a grant key that is no key", kind)
			}
		} else if n != len(b) {
			return ch, fmt.Errorf("change of kind %d: %d bytes after its value", kind, len(b)-n)
		}
		if err := msgpack.Unmarshal(b[:n], &ch); err != nil {
			return ch, err
		}
		if ch.Kind != kind {
			return ch, fmt.Errorf("change of kind %d holds kind %d", kind, ch.Kind)
		}
		// Apply would pass over a change without what it names: a record
		// the core never made, refused rather than lost without a word.
		if kind == SegmentMounted && ch.Segment == nil || kind == RangesHeld && ch.Hold == nil {
			return ch, fmt.Errorf("change of kind %d without its subject", kind)
		}
		return ch, nil
	default:
		return ch, fmt.Errorf("unknown change kind %d", ch.Kind)
	}
	if r.err == nil && len(r.b) != 0 {
		r.err = fmt.Errorf("%d bytes after the change", len(r.b))
	}
	return ch, r.err
}

// object reads the body of an ObjectSet record into o and returns its
// key; rb, when not nil, cuts the replicas from its blocks.
func (r *reader) object(o *DurableObject, rb *restoreBlocks) string {
	key := r.str()
	o.Size, o.Epoch = r.uvarint(), r.uvarint()
	o.Writer = r.str()
	flags := r.byte()
	o.HardPin, o.SoftPin = flags&1 != 0, flags&2 != 0
	o.Replicas = r.replicas(rb)
	if flags&4 != 0 {
		o.Disk = &DurableDisk{Client: r.str(), Endpoint: r.str(), Storage: r.str()}
	}
	o.Writing = r.replicas(rb)
	return key
}

func appendString(buf []byte, s string) []byte {
	buf = binary.AppendUvarint(buf, uint64(len(s)))
	return append(buf, s...)
}

// reader reads uvarints and strings, remembering the first error.
type reader struct {
	b   []byte
	err error
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errors.New("bad number")
		return 0
	}
	r.b = r.b[n:]
	return v
}

// replicas reads a count, then that many (segment id, offset) pairs, into
// a slice of their own or (rb not nil) one cut from rb's blocks.
func (r *reader) replicas(rb *restoreBlocks) []DurableReplica {
	n := r.uvarint()
	if r.err == nil && n > uint64(len(r.b))/2 { // every replica takes at least two bytes
		r.err = errors.New("replica count past the record")
	}
	if r.err != nil || n == 0 {
		return nil
	}
	var out []DurableReplica
	if rb != nil {
		out = rb.durableReplicas(int(n))
	} else {
		out = make([]DurableReplica, n)
	}
	for i := range out {
		out[i] = DurableReplica{SegID: r.uvarint(), Offset: r.uvarint()}
	}
	return out
}

func (r *reader) byte() byte {
	if r.err != nil || len(r.b) == 0 {
		r.err = cmp.Or(r.err, errors.New("short record"))
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *reader) str() string {
	n := r.uvarint()
	if r.err != nil {
		return ""
	}
	if n > uint64(len(r.b)) {
		r.err = errors.New("string past the record")
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}
