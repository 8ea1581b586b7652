// Fuzz targets for what a restarted master reads back: the stored form of
// each Change (a journal record, in a local log or in etcd) and the replay
// of a sequence of them onto a State that Restore then installs. Those
// bytes come from a disk or another process: a damaged or foreign record
// must come back as an error, and a state that replays from records that
// each decoded must never panic the core that restores it.
//
// Run one for a while with, e.g.:
//
//	go test -ldflags=-checklinkname=0 -run='^$' -fuzz='^FuzzDecodeChange$' -fuzztime=60s -parallel=1 ./gostore/master

package master

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/gostore/gostore/gostore/internal/fuzzkit"
	"github.com/gostore/gostore/gostore/wire"
)

// kindChanges is one change of each kind (and shape), as the core makes
// them.
func kindChanges() []Change {
	seg := wire.SegmentDesc{ID: 7, Name: "h:1", ClientID: "c", Size: 1 << 20, ShmPath: "/dev/shm/x", IPC: []byte{1, 2}}
	segUCX := seg
	segUCX.UCX = bytes.Repeat([]byte{0x5a}, 200)
	return []Change{
		{Kind: ObjectSet, Key: "k/1", Object: DurableObject{Size: 4096, Epoch: 99, Writer: "w", HardPin: true,
			Replicas: []DurableReplica{{SegID: 7, Offset: 8192}, {SegID: 9, Offset: 0}}}},
		{Kind: ObjectSet, Key: "disk-only", Object: DurableObject{Size: 1, Epoch: 1, SoftPin: true,
			Disk: &DurableDisk{Client: "c", Endpoint: "h:2", Storage: "/ssd"}}},
		{Kind: ObjectSet, Key: "writing", Object: DurableObject{Size: 10, Epoch: 5, Writer: "w",
			Writing: []DurableReplica{{SegID: 7, Offset: 128}}}},
		{Kind: ObjectGone, Key: "k/1"},
		{Kind: ObjectGone, Key: ""},
		{Kind: SegmentMounted, Segment: &seg},
		{Kind: SegmentMounted, Segment: &seg, GrantKey: bytes.Repeat([]byte{0xa5}, 32)},
		{Kind: SegmentMounted, Segment: &segUCX, GrantKey: bytes.Repeat([]byte{0xa5}, 32)},
		{Kind: SegmentRemoved, SegID: 7},
		{Kind: DropAdded, Storage: "/ssd", Key: "k/2"},
		{Kind: DropsDone, Storage: "/ssd", Keys: []string{"a", "b"}},
		{Kind: RangesHeld, Hold: &DurableHold{ID: 3, Size: 4096, Ranges: []DurableReplica{{SegID: 7, Offset: 64}},
			ReleaseAt: 12345}},
		{Kind: RangesReleased, SegID: 3},
	}
}

// workload runs a short random walk of every operation that reports
// changes (the one TestReportedChangesReplayToTheLiveState checks) and
// returns the records the core's changes encode to, in order.
func workload(tb testing.TB, seed uint64, steps int) [][]byte {
	tb.Helper()
	clk := &fakeClock{now: time.Unix(1000, 0)}
	var recs [][]byte
	c := New(Config{DefaultKVLeaseTTL: time.Millisecond, ClientTTL: time.Hour, EnableOffload: true,
		HighWatermark: 0.7, PutStartDiscardTimeout: 20 * time.Millisecond, PutStartReleaseTimeout: 60 * time.Millisecond,
		Now: clk.Now, Rand: rand.New(rand.NewPCG(seed, 4)),
		OnChange: func(ch Change) {
			b, err := EncodeChange(nil, ch)
			if err != nil {
				tb.Fatal(err)
			}
			recs = append(recs, b)
		}})
	rng := rand.New(rand.NewPCG(seed, 99))
	clients := []string{"a", "b"}
	gens := map[string]int{}
	seg := func(cl string) string { return fmt.Sprintf("%s-seg%d", cl, gens[cl]) }
	mountSeg := func(cl string) {
		var key []byte // client a's segments have grant keys, b's none (an older client)
		if cl == "a" {
			key = bytes.Repeat([]byte{byte(gens[cl])}, 32)
		}
		if _, err := c.MountSegment(wire.SegmentDesc{Name: seg(cl), ClientID: cl, Size: 1 << 18, ShmPath: "/x/" + seg(cl)}, key); err != nil {
			tb.Fatal(err)
		}
	}
	for _, cl := range clients {
		mountSeg(cl)
		c.Ping(cl)
	}
	key := func() string { return fmt.Sprintf("k%d", rng.IntN(12)) }
	size := func() uint64 { return uint64(1 + rng.IntN(16<<10)) }
	for step := 0; step < steps; step++ {
		clk.Advance(time.Millisecond * time.Duration(rng.IntN(5)))
		cl := clients[rng.IntN(len(clients))]
		switch rng.IntN(12) {
		case 0, 1, 2:
			k := key()
			res, _ := c.PutStart(cl, "", []string{k}, []uint64{size()}, wire.ReplicaConfig{ReplicaNum: 1 + rng.IntN(2),
				SoftPin: rng.IntN(3) == 0, HardPin: rng.IntN(5) == 0})
			if len(res) == 1 && rng.IntN(4) != 0 {
				c.PutEnd(cl, []string{k}, []uint64{res[0].Epoch})
			}
		case 3:
			k := key()
			res, _ := c.UpsertStart(cl, "", []string{k}, []uint64{size()}, wire.ReplicaConfig{ReplicaNum: 1})
			if len(res) == 1 && res[0].Code == wire.OK {
				c.PutEnd(cl, []string{k}, []uint64{res[0].Epoch})
			}
		case 4:
			c.Remove([]string{key()}, rng.IntN(2) == 0)
		case 5:
			req := wire.CreateTaskReq{ClientID: cl, Kind: wire.TaskCopy, Key: key(), Targets: []string{seg(clients[rng.IntN(2)])}}
			if plan, err := c.CreateTask(req); err == nil && len(plan.Targets) > 0 {
				c.TaskDone(cl, plan.ID, wire.OK)
			}
		case 6:
			c.Evict()
		case 7:
			storage := "/ssd/" + cl
			if ks, sizes, _ := c.OffloadHeartbeat(cl, storage, 4); len(ks) > 0 {
				c.NotifyOffloaded(cl, cl+":ssd", storage, ks, sizes, nil)
			}
		case 8:
			c.EvictDiskReplicas(cl, []string{key()})
		case 9:
			if rng.IntN(3) == 0 {
				c.UnmountSegment(cl, seg(cl))
				gens[cl]++
				mountSeg(cl)
			}
		case 10:
			c.RecoverDisk(cl, cl+":ssd2", "/ssd/"+cl, []string{key()}, []uint64{size()})
		case 11:
			if rng.IntN(3) == 0 {
				clk.Advance(c.Config().PutStartDiscardTimeout)
			}
			c.Tick()
		}
	}
	return recs
}

// joinRecords is FuzzReplayChanges' log: each record a uvarint length,
// then its bytes.
func joinRecords(recs [][]byte) []byte {
	var out []byte
	for _, r := range recs {
		out = binary.AppendUvarint(out, uint64(len(r)))
		out = append(out, r...)
	}
	return out
}

func splitRecords(b []byte) [][]byte {
	var out [][]byte
	for len(b) > 0 {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			break
		}
		out = append(out, b[k:k+int(n)])
		b = b[k+int(n):]
	}
	return out
}

// FuzzDecodeChange: any bytes decode to a Change or an error, never a
// panic, and allocate in proportion to their length (a count or length
// field claims nothing). What decodes is whole: each kind carries what it
// names (a segment, a hold), it encodes again to bytes that decode to the
// same Change, and it replays onto a State, even one whose maps a decoded
// snapshot left nil.
func FuzzDecodeChange(f *testing.F) {
	for _, ch := range kindChanges() {
		b, err := EncodeChange(nil, ch)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	seen := map[byte]int{}
	for _, b := range workload(f, 1, 300) {
		if seen[b[0]]++; seen[b[0]] <= 3 {
			f.Add(b)
		}
	}
	f.Add([]byte{})
	f.Add([]byte{0})
	f.Add([]byte{255, 1, 2})
	f.Add([]byte{byte(ObjectSet), 1, 'k', 1, 1, 0, 0, 0xff, 0xff, 0xff, 0x0f})                             // a replica count past the record
	f.Add([]byte{byte(ObjectGone), 0xff, 0xff, 0xff, 0xff, 0x0f, 'k'})                                     // a key length past the record
	f.Add([]byte{byte(SegmentMounted), 0x98, byte(SegmentMounted), 0xa0, 0xc0, 0xc0, 0, 0xa0, 0xc0, 0xc0}) // no segment
	f.Add([]byte{byte(RangesHeld), 0x98, byte(RangesHeld), 0xa0, 0xc0, 0xc0, 0, 0xa0, 0xc0, 0xc0})
	f.Add([]byte{byte(DropsDone), 0x97, byte(DropsDone), 0xa0, 0xc0, 0xc0, 0, 0xa0, 0xdd, 0xff, 0xff, 0xff, 0xff}) // 4G keys claimed
	f.Add([]byte{byte(RangesHeld), 0x98, byte(RangesHeld), 0xa0, 0xc0, 0xc0, 0, 0xa0, 0xc0,
		0x94, 1, 0x40, 0xdd, 0xff, 0xff, 0xff, 0xff, 0}) // 4G ranges claimed: 64 GiB of them
	f.Add(append([]byte{byte(DropsDone)}, append(bytes.Repeat([]byte{0x91}, 1000), 0)...)) // nested 1000 deep
	f.Add([]byte{byte(SegmentRemoved), 0x91, byte(DropAdded)})                             // kind mismatch
	f.Fuzz(func(t *testing.T, b []byte) {
		var ch Change
		var err error
		if n := fuzzkit.Allocated(func() { ch, err = DecodeChange(b) }); n > 64<<10+64*uint64(len(b)) {
			t.Fatalf("decoding %d bytes allocated %d", len(b), n)
		}
		if err != nil {
			return
		}
		switch {
		case ch.Kind < ObjectSet || ch.Kind > RangesReleased:
			t.Fatalf("kind %d decoded", ch.Kind)
		case ch.Kind == SegmentMounted && ch.Segment == nil:
			t.Fatal("a segment mounted without its segment decoded")
		case ch.Kind == RangesHeld && ch.Hold == nil:
			t.Fatal("ranges held without the hold decoded")
		}
		again, err := EncodeChange(nil, ch)
		if err != nil {
			t.Fatalf("%+v decoded but does not encode: %v", ch, err)
		}
		ch2, err := DecodeChange(again)
		if err != nil || !reflect.DeepEqual(ch, ch2) {
			t.Fatalf("%+v encoded and decoded again as %+v (%v)", ch, ch2, err)
		}
		NewState().Apply(ch)
		(&State{}).Apply(ch)
	})
}

// restoreConfig is the configuration of the cores FuzzReplayChanges
// restores into.
func restoreConfig(clk *fakeClock) Config {
	return Config{ClientTTL: time.Hour, DefaultKVLeaseTTL: time.Millisecond, PutStartReleaseTimeout: time.Second,
		Now: clk.Now, Rand: rand.New(rand.NewPCG(1, 2))}
}

// checkRestored checks what Restore promises of c: every segment is
// where the core looks it up, under an id no later mount reuses; every
// restored replica and held range lies inside its segment, aligned, and
// overlaps no other; and each segment's allocator holds exactly those
// ranges (none lost, none leaked).
func checkRestored(t *testing.T, c *Core) {
	t.Helper()
	c.segs.RLock()
	defer c.segs.RUnlock()
	type rng struct{ off, size uint64 }
	held := map[*segment][]rng{}
	for _, s := range c.segs.list {
		if c.segs.byID[s.desc.ID] != s || c.segs.byName[s.desc.Name] != s {
			t.Fatalf("segment %d %q is not found under its id and name", s.desc.ID, s.desc.Name)
		}
		if s.desc.ID == 0 || s.desc.ID > c.segs.nextID {
			t.Fatalf("segment id %d, next id %d: a mount would reuse it", s.desc.ID, c.segs.nextID)
		}
		held[s] = nil
	}
	if len(c.segs.byID) != len(c.segs.list) || len(c.segs.byName) != len(c.segs.list) {
		t.Fatalf("%d segments, %d by id, %d by name", len(c.segs.list), len(c.segs.byID), len(c.segs.byName))
	}
	add := func(what string, r replica, size uint64) {
		if _, ok := held[r.seg]; !ok {
			t.Fatalf("%s: a replica on a segment not in the pool", what)
		}
		held[r.seg] = append(held[r.seg], rng{r.offset, size})
	}
	for i := range c.shards {
		for k, o := range c.shards[i].objects {
			for _, r := range o.reps() {
				add(k, r, o.size)
			}
		}
	}
	for _, d := range c.discarded.list {
		for _, r := range d.replicas {
			add("held", r, d.size)
		}
	}
	for s, rs := range held {
		capacity := s.alloc.Capacity()
		sort.Slice(rs, func(a, b int) bool { return rs[a].off < rs[b].off })
		var used uint64
		for i, r := range rs {
			if r.size == 0 || r.off%allocAlign != 0 || r.off >= capacity || r.size > capacity-r.off {
				t.Fatalf("segment %d of %d bytes: range %d+%d restored", s.desc.ID, capacity, r.off, r.size)
			}
			if i > 0 && rs[i-1].off+rs[i-1].size > r.off {
				t.Fatalf("segment %d: ranges %d+%d and %d+%d overlap", s.desc.ID, rs[i-1].off, rs[i-1].size, r.off, r.size)
			}
			used += (r.size + allocAlign - 1) / allocAlign * allocAlign
		}
		if got := s.alloc.Used(); got != used {
			t.Fatalf("segment %d: %d bytes allocated, its restored ranges take %d", s.desc.ID, got, used)
		}
	}
}

// stateV2 is st in the stored form WriteState writes.
func stateV2(f *testing.F, st *State) []byte {
	b := binary.AppendUvarint([]byte(StateMagic), st.NextSegID)
	b = binary.AppendUvarint(b, st.Epoch)
	b = binary.AppendUvarint(b, uint64(len(st.Objects)))
	fr := &frames{buf: b}
	add := func(ch Change) {
		if err := fr.add(ch); err != nil {
			f.Fatal(err)
		}
	}
	for id, d := range st.Segments {
		add(Change{Kind: SegmentMounted, Segment: &d, GrantKey: st.GrantKeys[id]})
	}
	for _, h := range st.Held {
		add(Change{Kind: RangesHeld, Hold: &h})
	}
	for storage, keys := range st.Drops {
		for k := range keys {
			add(Change{Kind: DropAdded, Storage: storage, Key: k})
		}
	}
	for k, o := range st.Objects {
		add(Change{Kind: ObjectSet, Key: k, Object: o})
	}
	return append(fr.buf, 0)
}

// FuzzReplayChanges: a snapshot (a State as the server stores it: state
// version 1's msgpack or version 2's records, or none) and a log of records, replayed as the server's restart does:
// every record that decodes is applied, then the State restored into a
// fresh core. Nothing may panic, the restored core must be consistent
// (checkRestored), a core restored from its durable state gets all of it
// back, and the core keeps working: reads, puts, eviction, removes,
// unmounts and the quarantine's end, without a range freed twice.
func FuzzReplayChanges(f *testing.F) {
	var recs [][]byte
	for _, ch := range kindChanges() {
		b, _ := EncodeChange(nil, ch)
		recs = append(recs, b)
	}
	f.Add([]byte{}, joinRecords(recs))
	for seed := uint64(1); seed <= 3; seed++ {
		w := workload(f, seed, 120)
		f.Add([]byte{}, joinRecords(w))
		// The same, from a snapshot of the first half.
		st := NewState()
		for _, b := range w[:len(w)/2] {
			ch, err := DecodeChange(b)
			if err != nil {
				f.Fatal(err)
			}
			st.Apply(ch)
		}
		snap, err := msgpack.Marshal(st)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(snap, joinRecords(w[len(w)/2:]))
		f.Add(stateV2(f, st), joinRecords(w[len(w)/2:])) // as WriteState stores it
	}
	// A snapshot from before holds were journaled (no "held" map), then a hold.
	old, _ := msgpack.Marshal(map[string]any{"segs": map[uint64]wire.SegmentDesc{}, "objs": map[string]DurableObject{}})
	hold, _ := EncodeChange(nil, Change{Kind: RangesHeld, Hold: &DurableHold{ID: 1, Size: 64, Ranges: []DurableReplica{{SegID: 1}}}})
	f.Add(old, joinRecords([][]byte{hold}))
	// A segment under another id than its own, two of one name, one too big.
	bad := NewState()
	bad.Segments[3] = wire.SegmentDesc{ID: 4, Name: "s", ClientID: "a", Size: 1 << 20}
	bad.Segments[5] = wire.SegmentDesc{ID: 5, Name: "s", ClientID: "b", Size: 1 << 20}
	bad.Segments[6] = wire.SegmentDesc{ID: 6, Name: "t", ClientID: "b", Size: 1 << 62}
	bad.Objects["x"] = DurableObject{Size: 64, Replicas: []DurableReplica{{SegID: 3}, {SegID: 5}, {SegID: 6, Offset: 1 << 61}}}
	snap, _ := msgpack.Marshal(bad)
	f.Add(snap, []byte{})
	// Two holds claiming one range, and a segment id below the next one.
	two := NewState()
	two.Segments[2] = wire.SegmentDesc{ID: 2, Name: "s", ClientID: "a", Size: 1 << 20}
	two.Held[1] = DurableHold{ID: 1, Size: 128, Ranges: []DurableReplica{{SegID: 2, Offset: 0}}}
	two.Held[2] = DurableHold{ID: 2, Size: 128, Ranges: []DurableReplica{{SegID: 2, Offset: 64}, {SegID: 2, Offset: 256}}}
	two.NextSegID = 1
	snap, _ = msgpack.Marshal(two)
	f.Add(snap, []byte{})

	f.Fuzz(func(t *testing.T, snap, log []byte) {
		st := NewState()
		if bytes.HasPrefix(snap, []byte(StateMagic)) {
			if ReadState(bytes.NewReader(snap), st) != nil {
				return
			}
		} else if len(snap) > 0 {
			// As the server reads a snapshot: vetted, then decoded; maps
			// it does not hold stay nil.
			st = &State{}
			if wire.Unmarshal(snap, st) != nil {
				return
			}
		}
		// Each record that decodes is a journal some bytes spell; the
		// server refuses one that does not, so it is left out here.
		var after []Change
		for _, raw := range splitRecords(log) {
			if ch, err := DecodeChange(raw); err == nil {
				st.Apply(ch)
				after = append(after, ch)
			}
		}
		clk := &fakeClock{now: time.Unix(5000, 0)}
		c := New(restoreConfig(clk))
		rep := c.Restore(st)
		checkRestored(t, c)

		// Streamed, the same state and changes restore the same core (or
		// are refused: a removal inside a state, which ReadState applies).
		if bytes.HasPrefix(snap, []byte(StateMagic)) {
			cs := New(restoreConfig(&fakeClock{now: clk.Now()}))
			if reps, err := cs.RestoreFrom(bytes.NewReader(snap), after); err == nil {
				if reps != rep {
					t.Fatalf("restored from the stream %+v, from the state %+v", reps, rep)
				}
				sameDurable(t, "restored from the stream", c.DurableState(nil), cs.DurableState(nil))
				checkRestored(t, cs)
			}
		}

		// What the restored core holds survives another restart whole.
		clk2 := &fakeClock{now: clk.Now()}
		c2 := New(restoreConfig(clk2))
		rep2 := c2.Restore(c.DurableState(nil))
		if rep2.Segments != rep.Segments || rep2.Objects != rep.Objects || rep2.Dropped != 0 || rep2.HeldRanges != rep.HeldRanges {
			t.Fatalf("restored %+v, then from its durable state %+v", rep, rep2)
		}
		checkRestored(t, c2)

		// The restored core keeps working.
		keys := make([]string, 0, len(st.Objects))
		for k := range st.Objects {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		keys = keys[:min(len(keys), 16)]
		c.GetReplicas(keys, true)
		c.PeekReplicas(keys)
		c.Exist(keys)
		newID, err := c.MountSegment(wire.SegmentDesc{Name: "fuzz-new", ClientID: "fuzz", Size: 1 << 20, ShmPath: "/x/n"}, nil)
		if err == nil {
			c.segs.RLock()
			s, n, ids := c.segs.byID[newID], len(c.segs.list), len(c.segs.byID)
			c.segs.RUnlock()
			if s == nil || s.desc.Name != "fuzz-new" || n != ids {
				t.Fatalf("a new mount got id %d, a restored segment's", newID)
			}
		}
		clk.Advance(2 * time.Millisecond) // past the leases
		if res, err := c.PutStart("fuzz", "", []string{"fuzz-key"}, []uint64{4096}, wire.ReplicaConfig{ReplicaNum: 2}); err == nil && len(res) == 1 && res[0].Code == wire.OK {
			c.PutEnd("fuzz", []string{"fuzz-key"}, []uint64{res[0].Epoch})
		}
		if len(keys) > 0 {
			c.UpsertStart("fuzz", "", keys[:1], []uint64{64}, wire.ReplicaConfig{ReplicaNum: 1})
		}
		c.Evict()
		c.Remove(keys, true)
		segs := slices.Clone(c.Segments())
		for _, s := range segs[:len(segs)/2] {
			c.UnmountSegment(s.ClientID, s.Name)
		}
		clk.Advance(2 * time.Second) // past the quarantine
		c.Tick()
		c.DurableState(nil)
		if n := c.Stats().FreeErrors.Load(); n != 0 {
			t.Fatalf("%d ranges freed that the allocator did not hold", n)
		}
	})
}
