// What of the core's state outlives a restart, the changes to it that the
// core reports as they happen, and the restore from a saved state.

package master

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/gostore/gostore/gostore/alloc"
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
	// Frees: the change gives up memory ranges a restart would otherwise
	// hand back to the object (always for ObjectGone and SegmentRemoved).
	// New writes may land there only once it is durable. Not stored.
	Frees bool `msgpack:"-"`
}

// DurableObject is what of an object survives a restart: its size, the
// write it holds (epoch, writer), its pins, its COMPLETE memory replicas
// and its disk copy. Leases, readers, tasks and unfinished writes do not.
type DurableObject struct {
	_msgpack struct{} `msgpack:",as_array"`

	Size     uint64           `msgpack:"n"`
	Epoch    uint64           `msgpack:"e"`
	Writer   string           `msgpack:"w,omitempty"`
	HardPin  bool             `msgpack:"hp,omitempty"`
	SoftPin  bool             `msgpack:"sp,omitempty"` // soft-pinned (for SoftPinTTL from the restore)
	Replicas []DurableReplica `msgpack:"r,omitempty"`
	Disk     *DurableDisk     `msgpack:"d,omitempty"`
}

// DurableReplica is a COMPLETE memory replica: the segment and offset.
type DurableReplica struct {
	_msgpack struct{} `msgpack:",as_array"`

	SegID  uint64 `msgpack:"s"`
	Offset uint64 `msgpack:"o"`
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
	// NextSegID and Epoch are high-water marks: a restored core hands out
	// segment ids and write epochs above them.
	NextSegID uint64 `msgpack:"nid"`
	Epoch     uint64 `msgpack:"ep"`
}

// NewState is an empty State.
func NewState() *State {
	return &State{Segments: map[uint64]wire.SegmentDesc{}, Objects: map[string]DurableObject{},
		Drops: map[string]map[string]bool{}}
}

// Apply replays one change.
func (st *State) Apply(ch Change) {
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
		}
	case SegmentRemoved:
		delete(st.Segments, ch.SegID)
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
	}
}

// pushDrop queues the stale disk copy of key in storage for deletion.
func (c *Core) pushDrop(storage, key string) {
	if c.cfg.OnChange != nil { // first: a pop's DropsDone must come after it
		c.cfg.OnChange(Change{Kind: DropAdded, Storage: storage, Key: key})
	}
	c.drops.push(storage, key)
}

// dropsDone reports keys of storage no longer to delete.
func (c *Core) dropsDone(storage string, keys ...string) {
	if c.cfg.OnChange != nil && len(keys) > 0 {
		c.cfg.OnChange(Change{Kind: DropsDone, Storage: storage, Keys: keys})
	}
}

// durable is o's durable state, or false when it has none (no COMPLETE
// replica and no disk copy: an object still being written).
func durable(o *object) (DurableObject, bool) {
	d := DurableObject{Size: o.size, Epoch: o.epoch, Writer: o.writer, HardPin: o.hardPin, SoftPin: o.softPin != 0}
	for _, r := range o.replicas {
		if r.status == replicaComplete {
			d.Replicas = append(d.Replicas, DurableReplica{SegID: r.seg.desc.ID, Offset: r.offset})
		}
	}
	if o.disk != nil {
		d.Disk = &DurableDisk{Client: o.disk.client, Endpoint: o.disk.endpoint, Storage: o.disk.storage}
	}
	return d, len(d.Replicas) > 0 || d.Disk != nil
}

// record reports key's durable state after a change (o nil: the key is
// gone). The caller holds key's shard lock.
func (c *Core) record(key string, o *object) { c.recordChange(key, o, false) }

// recordFreeing is record for a change that drops COMPLETE replicas whose
// ranges may be handed out again (see Change.Frees).
func (c *Core) recordFreeing(key string, o *object) { c.recordChange(key, o, true) }

func (c *Core) recordChange(key string, o *object, frees bool) {
	if c.cfg.OnChange == nil {
		return
	}
	if o != nil {
		if d, ok := durable(o); ok {
			c.cfg.OnChange(Change{Kind: ObjectSet, Key: key, Object: d, Frees: frees})
			return
		}
	}
	c.cfg.OnChange(Change{Kind: ObjectGone, Key: key, Frees: true})
}

// recordSegment reports a segment joining (mounted) or leaving the pool.
// The caller holds segs' lock.
func (c *Core) recordSegment(s *segment, mounted bool) {
	if c.cfg.OnChange == nil {
		return
	}
	if mounted {
		d := s.desc
		c.cfg.OnChange(Change{Kind: SegmentMounted, Segment: &d})
	} else {
		c.cfg.OnChange(Change{Kind: SegmentRemoved, SegID: s.desc.ID, Frees: true})
	}
}

// DurableState is a consistent copy of the durable state. fn, when not
// nil, runs while every lock is held (no change can be reported
// meanwhile): the server reads its journal's position there, so the copy
// holds exactly the changes up to it.
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
	}
	for i := range c.shards {
		for key, o := range c.shards[i].objects {
			if d, ok := durable(o); ok {
				st.Objects[key] = d
			}
		}
	}
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

// RestoreReport says what Restore made of a saved state.
type RestoreReport struct {
	Segments, Objects int
	// Dropped: objects left with nothing to serve them (every replica
	// named a segment the state lacks, or a range another object held).
	Dropped int
}

// Restore installs a saved state into a core that has served nothing yet.
// The segments come back with their ids, owned by clients that count as
// alive from now (each must ping within ClientTTL or its segments go, as
// any silent client's do); the clients are not told they are known, so
// their next ping has them mount again, which finds their segment as it
// was. Every replica's range is allocated again; a replica whose range is
// impossible or taken is dropped. The free space of restored segments
// takes no new replica for Config.RestoreQuarantine: a put that was
// writing when the old master stopped was never recorded, and its client
// may still be copying into that space.
func (c *Core) Restore(st *State) RestoreReport {
	now := c.now()
	var rep RestoreReport
	c.segs.Lock()
	defer c.segs.Unlock()
	type held struct {
		key string
		j   int
	}
	ranges := map[uint64][]alloc.Range{}
	owners := map[uint64][]held{}
	keys := make([]string, 0, len(st.Objects))
	for k := range st.Objects {
		keys = append(keys, k)
	}
	sort.Strings(keys) // a deterministic winner when two objects claim one range
	for _, k := range keys {
		o := st.Objects[k]
		for j, r := range o.Replicas {
			ranges[r.SegID] = append(ranges[r.SegID], alloc.Range{Offset: r.Offset, Size: o.Size})
			owners[r.SegID] = append(owners[r.SegID], held{k, j})
		}
	}
	refused := map[string]map[int]bool{}
	refuse := func(h held) {
		if refused[h.key] == nil {
			refused[h.key] = map[int]bool{}
		}
		refused[h.key][h.j] = true
	}
	segs := make(map[uint64]*segment, len(st.Segments))
	ids := make([]uint64, 0, len(st.Segments))
	for id := range st.Segments {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(a, b int) bool { return ids[a] < ids[b] })
	c.clients.Lock()
	for _, id := range ids {
		d := st.Segments[id]
		a, bad := alloc.Restore(d.Size, allocAlign, ranges[id])
		for _, i := range bad {
			refuse(owners[id][i])
		}
		s := &segment{desc: d, alloc: a}
		if c.cfg.RestoreQuarantine > 0 {
			s.quarantineUntil = now + int64(c.cfg.RestoreQuarantine)
		}
		segs[id] = s
		c.segs.byID[id] = s
		c.segs.byName[d.Name] = s
		c.segs.list = append(c.segs.list, s)
		c.clients.lastSeen[d.ClientID] = c.cfg.Now()
		rep.Segments++
	}
	c.clients.Unlock()
	c.segs.nextID = max(c.segs.nextID, st.NextSegID)
	for storage, keys := range st.Drops {
		names := make([]string, 0, len(keys))
		for k := range keys {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			c.drops.push(storage, k)
		}
	}
	if c.epochs.Load() < st.Epoch {
		c.epochs.Store(st.Epoch)
	}
	for _, k := range keys {
		d := st.Objects[k]
		o := &object{size: d.Size, epoch: d.Epoch, writer: d.Writer, hardPin: d.HardPin, lastUse: now}
		if d.SoftPin {
			o.softPin = now + int64(c.cfg.SoftPinTTL)
		}
		for j, r := range d.Replicas {
			s := segs[r.SegID]
			if s == nil || refused[k][j] {
				continue
			}
			o.replicas = append(o.replicas, replica{seg: s, offset: r.Offset, status: replicaComplete})
		}
		if d.Disk != nil {
			o.disk = &diskCopy{client: d.Disk.Client, endpoint: d.Disk.Endpoint, storage: d.Disk.Storage}
		}
		if len(o.replicas) == 0 && o.disk == nil {
			// Free what was allocated for it: nothing (refused ranges were
			// never allocated, and segments it named are absent).
			rep.Dropped++
			continue
		}
		sh := c.shardOf(k)
		sh.mu.Lock()
		sh.objects[k] = o
		sh.mu.Unlock()
		rep.Objects++
	}
	return rep
}

// endQuarantines opens restored segments whose quarantine is over.
func (c *Core) endQuarantines(now int64) {
	c.segs.RLock()
	list := c.segs.list
	c.segs.RUnlock()
	for _, s := range list {
		s.mu.Lock()
		if s.quarantineUntil != 0 && now >= s.quarantineUntil {
			s.quarantineUntil = 0
		}
		s.mu.Unlock()
	}
}

// restoreQuarantineDefault bounds how long a put in flight at a master's
// stop may keep writing: the client's transfer timeout is of this order.
const restoreQuarantineDefault = 5 * time.Second

// The stored form of a Change. Object changes, nearly all of a journal,
// take a compact binary form (no reflection, one allocation); the rarer
// segment and drop changes are msgpack after their kind byte.
//
//	ObjectSet:  kind | key | size | epoch | writer | flags (1 hard pin,
//	            2 soft pin, 4 disk copy) | n | n × (segment id, offset) |
//	            [disk client | endpoint | storage]
//	ObjectGone: kind | key
//
// Strings are a uvarint length then the bytes; numbers are uvarints.

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
		return buf, nil
	}
	body, err := msgpack.Marshal(&ch)
	return append(buf, body...), err
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
		o := &ch.Object
		ch.Key = r.str()
		o.Size, o.Epoch = r.uvarint(), r.uvarint()
		o.Writer = r.str()
		flags := r.byte()
		o.HardPin, o.SoftPin = flags&1 != 0, flags&2 != 0
		n := r.uvarint()
		if n > uint64(len(r.b)) { // every replica takes at least two bytes
			return ch, errors.New("replica count past the record")
		}
		for i := uint64(0); i < n && r.err == nil; i++ {
			o.Replicas = append(o.Replicas, DurableReplica{SegID: r.uvarint(), Offset: r.uvarint()})
		}
		if flags&4 != 0 {
			o.Disk = &DurableDisk{Client: r.str(), Endpoint: r.str(), Storage: r.str()}
		}
	case SegmentMounted, SegmentRemoved, DropAdded, DropsDone:
		kind := ch.Kind
		if err := msgpack.Unmarshal(b, &ch); err != nil {
			return ch, err
		}
		if ch.Kind != kind {
			return ch, fmt.Errorf("change of kind %d holds kind %d", kind, ch.Kind)
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
