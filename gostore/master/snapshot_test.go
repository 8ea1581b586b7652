package master

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/gostore/gostore/gostore/wire"
)

// recordLog is the journal as the core sees it: every reported change,
// stored, numbered from 1 in the order reported.
type recordLog struct {
	mu   sync.Mutex
	recs [][]byte
}

func (l *recordLog) add(ch Change) {
	b, err := EncodeChange(nil, ch)
	if err != nil {
		panic(err)
	}
	l.mu.Lock()
	l.recs = append(l.recs, b)
	l.mu.Unlock()
}

func (l *recordLog) last() uint64 { l.mu.Lock(); defer l.mu.Unlock(); return uint64(len(l.recs)) }

// replayOnto applies the records after seq to st.
func (l *recordLog) replayOnto(t *testing.T, st *State, seq uint64) *State {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, b := range l.recs[seq:] {
		ch, err := DecodeChange(b)
		if err != nil {
			t.Fatalf("record %d: %v", seq+uint64(i)+1, err)
		}
		st.Apply(ch)
	}
	return st
}

// changesAfter is the changes after seq.
func (l *recordLog) changesAfter(t *testing.T, seq uint64) []Change {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Change
	for i, b := range l.recs[seq:] {
		ch, err := DecodeChange(b)
		if err != nil {
			t.Fatalf("record %d: %v", seq+uint64(i)+1, err)
		}
		out = append(out, ch)
	}
	return out
}

type takenSnapshot struct {
	seq  uint64
	data []byte
	info SnapshotInfo
}

// A snapshot taken while puts, upserts, removes, evictions, SSD copies and
// their drops, tasks (holds), unmounts and ticks run on other goroutines,
// read back with the records after the log position read before it,
// equals the live state at the end, and so does the whole log replayed.
// One object per lock hold (snapshotChunk 1): the walk lets go of each
// shard between any two objects.
func TestSnapshotWhileServingReplaysToTheLiveState(t *testing.T) {
	defer func(n int) { snapshotChunk = n }(snapshotChunk)
	snapshotChunk = 1
	for seed := uint64(1); seed <= 3; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			clk := &fakeClock{now: time.Unix(1000, 0)}
			var log recordLog
			c := New(Config{DefaultKVLeaseTTL: time.Millisecond, ClientTTL: time.Hour, EnableOffload: true,
				HighWatermark: 0.7, PutStartDiscardTimeout: 20 * time.Millisecond,
				PutStartReleaseTimeout: 60 * time.Millisecond, Now: clk.Now, Rand: rand.New(rand.NewPCG(seed, 4)),
				OnChange: log.add})
			clients := []string{"a", "b", "c"}
			for _, cl := range clients {
				mount(t, c, cl, cl+"-seg0", 16<<20)
				c.Ping(cl)
			}
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for w, cl := range clients {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(seed, uint64(w)))
					key := func() string { return fmt.Sprintf("k%d", rng.IntN(3000)) }
					gen := 0
					for i := 0; ; i++ {
						select {
						case <-stop:
							return
						default:
						}
						clk.Advance(time.Microsecond * time.Duration(rng.IntN(300)))
						switch rng.IntN(13) {
						case 0, 1, 2, 3:
							ks := []string{key(), key(), key()}
							sizes := []uint64{uint64(1 + rng.IntN(2048)), uint64(1 + rng.IntN(2048)), uint64(1 + rng.IntN(2048))}
							if _, err := c.PutStart(cl, "", ks, sizes, wire.ReplicaConfig{ReplicaNum: 1 + rng.IntN(2)}); err == nil && rng.IntN(5) != 0 {
								c.PutEnd(cl, ks, nil)
							}
						case 4:
							k := key()
							if res, _ := c.UpsertStart(cl, "", []string{k}, []uint64{uint64(1 + rng.IntN(2048))}, wire.ReplicaConfig{ReplicaNum: 1}); res[0].Code == wire.OK {
								c.PutEnd(cl, []string{k}, []uint64{res[0].Epoch})
							}
						case 5:
							c.Remove([]string{key(), key()}, rng.IntN(2) == 0)
						case 6:
							if rng.IntN(10) == 0 {
								c.Evict()
							}
						case 7:
							storage := "/ssd/" + cl
							if ks, sizes, _ := c.OffloadHeartbeat(cl, storage, 8); len(ks) > 0 {
								c.NotifyOffloaded(cl, cl+":ssd", storage, ks, sizes, nil)
							}
						case 8:
							c.EvictDiskReplicas(cl, []string{key(), key()})
						case 9:
							target := fmt.Sprintf("%s-seg%d", clients[rng.IntN(3)], 0)
							if plan, err := c.CreateTask(wire.CreateTaskReq{ClientID: cl, Kind: wire.TaskCopy, Key: key(), Targets: []string{target}}); err == nil && len(plan.Targets) > 0 && rng.IntN(3) != 0 {
								c.TaskDone(cl, plan.ID, wire.OK)
							}
						case 10:
							if rng.IntN(50) == 0 { // a segment goes and a new one comes
								c.UnmountSegment(cl, fmt.Sprintf("%s-seg%d", cl, gen))
								gen++
								c.MountSegment(wire.SegmentDesc{Name: fmt.Sprintf("%s-seg%d", cl, gen), ClientID: cl, Size: 16 << 20, ShmPath: "/x"}, nil)
							}
						case 11:
							c.Tick()
						case 12: // a restarted client re-registers SSD copies
							ks := []string{key(), key()}
							c.RecoverDisk(cl, cl+":ssd2", "/ssd/"+cl, ks, []uint64{uint64(1 + rng.IntN(2048)), uint64(1 + rng.IntN(2048))})
						}
					}
				})
			}
			var snaps []takenSnapshot
			for len(snaps) < 10 {
				for log.last() < uint64(len(snaps)+1)*1500 { // changes to walk through
					time.Sleep(time.Millisecond)
				}
				var buf bytes.Buffer
				seq := log.last() // the position first, then the walk
				info, err := c.WriteState(&buf)
				if err != nil {
					t.Fatal(err)
				}
				snaps = append(snaps, takenSnapshot{seq, buf.Bytes(), info})
			}
			close(stop)
			wg.Wait()
			live := c.DurableState(nil)
			whole := log.replayOnto(t, NewState(), 0)
			sameDurable(t, "the whole log", live, whole)
			moved, drops := 0, 0
			for i, s := range snaps {
				drops = max(drops, s.info.Drops)
				st := NewState()
				if err := ReadState(bytes.NewReader(s.data), st); err != nil {
					t.Fatalf("snapshot %d: %v", i, err)
				}
				if i > 0 && s.seq > snaps[i-1].seq {
					moved++
				}
				sameDurable(t, fmt.Sprintf("snapshot %d at %d (%+v) and %d records after it", i, s.seq, s.info,
					log.last()-s.seq), live, log.replayOnto(t, st, s.seq))
				// Restored from the stream, the snapshot and the records
				// after it give the core that Restore makes of the state
				// they replay to.
				cfg := Config{ClientTTL: time.Hour, Now: clk.Now, OnChange: func(Change) {}}
				fromState, streamed := New(cfg), New(cfg)
				wantRep := fromState.Restore(st)
				gotRep, err := streamed.RestoreFrom(bytes.NewReader(s.data), log.changesAfter(t, s.seq))
				if err != nil || gotRep != wantRep {
					t.Fatalf("snapshot %d restored from the stream: %+v, %v; from the state: %+v", i, gotRep, err, wantRep)
				}
				sameDurable(t, fmt.Sprintf("snapshot %d restored from the stream", i), fromState.DurableState(nil),
					streamed.DurableState(nil))
				if st.Epoch < whole.Epoch || st.NextSegID < whole.NextSegID {
					t.Fatalf("snapshot %d: high-water marks %d/%d below the log's %d/%d", i, st.Epoch, st.NextSegID, whole.Epoch, whole.NextSegID)
				}
			}
			if moved == 0 || len(live.Objects) == 0 {
				t.Fatalf("no change between the snapshots (%d), or no object (%d): the test tests nothing", moved, len(live.Objects))
			}
			t.Logf("%d objects, %d holds, %d drop lists, %d records, %d snapshots (at most %d drops); last %+v", len(live.Objects),
				len(live.Held), len(live.Drops), log.last(), len(snaps), drops, snaps[len(snaps)-1].info)
		})
	}
}

// A state cut anywhere, or with a byte changed, reads back as an error or
// (a changed byte inside a key or a number) as another state, never a
// panic; a state without its end frame is refused.
func TestReadStateRefusesACutState(t *testing.T) {
	c, _ := newTestCore(t)
	mount(t, c, "a", "sa", 1<<20)
	for i := 0; i < 20; i++ {
		put(t, c, fmt.Sprintf("k%d", i), uint64(100+i), wire.ReplicaConfig{ReplicaNum: 1})
	}
	var buf bytes.Buffer
	info, err := c.WriteState(&buf)
	if err != nil || info.Objects != 20 || info.Segments != 1 || info.Bytes != int64(buf.Len()) {
		t.Fatalf("%+v, %v (%d bytes)", info, err, buf.Len())
	}
	b := buf.Bytes()
	st := NewState()
	if err := ReadState(bytes.NewReader(b), st); err != nil || len(st.Objects) != 20 || len(st.Segments) != 1 {
		t.Fatalf("whole state: %v, %d objects", err, len(st.Objects))
	}
	for n := 0; n < len(b); n++ {
		if err := ReadState(bytes.NewReader(b[:n]), NewState()); err == nil {
			t.Fatalf("a state cut at %d of %d bytes was read", n, len(b))
		}
	}
	for i := range b {
		d := bytes.Clone(b)
		d[i] ^= 0xff
		ReadState(bytes.NewReader(d), NewState()) // no panic
	}
}

// A State written by State.WriteTo (a standby saving what it follows)
// reads back as itself, and as WriteState's output of the core it mirrors.
func TestStateWriteToReadsBackAsTheCoresOwnState(t *testing.T) {
	c, _ := newTestCore(t)
	mount(t, c, "a", "sa", 1<<20)
	mount(t, c, "b", "sb", 1<<20)
	for i := 0; i < 50; i++ {
		put(t, c, fmt.Sprintf("k%d", i), uint64(100+i), wire.ReplicaConfig{ReplicaNum: 2})
	}
	var fromCore bytes.Buffer
	if _, err := c.WriteState(&fromCore); err != nil {
		t.Fatal(err)
	}
	want := NewState()
	if err := ReadState(bytes.NewReader(fromCore.Bytes()), want); err != nil {
		t.Fatal(err)
	}
	want.Held[7] = DurableHold{ID: 7, Size: 64, Ranges: []DurableReplica{{SegID: 1, Offset: 4096}}, ReleaseAt: 99}
	want.Drops["/ssd/a"] = map[string]bool{"gone": true}
	var buf bytes.Buffer
	n, err := want.WriteTo(&buf)
	if err != nil || n != int64(buf.Len()) {
		t.Fatalf("WriteTo: %d bytes, %v (%d in the buffer)", n, err, buf.Len())
	}
	got := NewState()
	if err := ReadState(bytes.NewReader(buf.Bytes()), got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("read back:\n%+v\nwant\n%+v", got, want)
	}
}

// RestoreFrom refuses what is no whole state and then has restored
// nothing (a cut state, an object's removal, which WriteState never
// writes); a damaged byte restores another state or is refused, never a
// panic; of two records of one key (a damaged state) the later is
// restored, its ranges the only ones served.
func TestRestoreFromRefusesDamageAndTakesTheLaterRecord(t *testing.T) {
	c, _ := newTestCore(t)
	mount(t, c, "a", "sa", 1<<20)
	for i := 0; i < 20; i++ {
		put(t, c, fmt.Sprintf("k%d", i), uint64(100+i), wire.ReplicaConfig{ReplicaNum: 1})
	}
	var buf bytes.Buffer
	if _, err := c.WriteState(&buf); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	for n := 0; n < len(b); n++ {
		r, _ := newTestCore(t)
		if rep, err := r.RestoreFrom(bytes.NewReader(b[:n]), nil); err == nil {
			t.Fatalf("a state cut at %d of %d bytes was restored: %+v", n, len(b), rep)
		}
		if len(r.Segments()) != 0 {
			t.Fatalf("a state cut at %d bytes restored segments: %+v", n, r.Segments())
		}
	}
	for i := range b {
		d := bytes.Clone(b)
		d[i] ^= 0xff
		r, _ := newTestCore(t)
		r.RestoreFrom(bytes.NewReader(d), nil) // no panic
	}
	// Records of their own after the whole state's: k1 again, now at
	// another offset, and a removal.
	body := b[:len(b)-1] // without the end frame
	frame := func(ch Change) {
		rec, err := EncodeChange(nil, ch)
		if err != nil {
			t.Fatal(err)
		}
		body = binary.AppendUvarint(body, uint64(len(rec)))
		body = append(body, rec...)
	}
	seg := c.Segments()[0].ID
	frame(Change{Kind: ObjectSet, Key: "k1", Object: DurableObject{Size: 64, Epoch: 1,
		Replicas: []DurableReplica{{SegID: seg, Offset: 512 << 10}}}})
	r, _ := newTestCore(t)
	rep, err := r.RestoreFrom(bytes.NewReader(append(bytes.Clone(body), 0)), nil)
	if err != nil || rep.Objects != 20 {
		t.Fatalf("a key twice: %+v, %v", rep, err)
	}
	if g := r.PeekReplicas([]string{"k1"}); g[0].Code != wire.OK || g[0].Size != 64 || len(g[0].Replicas) != 1 ||
		g[0].Replicas[0].Offset != 512<<10 {
		t.Fatalf("a key twice: the later record is not what is served: %+v", g[0])
	}
	// The earlier record's range (k1's 101 bytes: 128 allocated) is free.
	if got, want := r.Segments()[0].Used, c.Segments()[0].Used-128+64; got != want {
		t.Fatalf("a key twice: %d bytes used, want %d (the earlier record's range kept)", got, want)
	}
	frame(Change{Kind: ObjectGone, Key: "k2"})
	r, _ = newTestCore(t)
	if rep, err := r.RestoreFrom(bytes.NewReader(append(body, 0)), nil); err == nil || len(r.Segments()) != 0 {
		t.Fatalf("a removal in a state was restored: %+v, %v", rep, err)
	}
}

// A stale disk copy still to delete at a stop is still to delete after a
// restart, by either restore: it is in the next snapshot again.
func TestDropsSurviveARestore(t *testing.T) {
	c, _ := newTestCore(t)
	mount(t, c, "a", "sa", 1<<20)
	c.pushDrop("/ssd/a", "stale")
	var buf bytes.Buffer
	if _, err := c.WriteState(&buf); err != nil {
		t.Fatal(err)
	}
	st := NewState()
	if err := ReadState(bytes.NewReader(buf.Bytes()), st); err != nil || !st.Drops["/ssd/a"]["stale"] {
		t.Fatalf("the snapshot lacks the drop: %v, %v", err, st.Drops)
	}
	for name, restore := range map[string]func(*Core) error{
		"Restore":     func(r *Core) error { r.Restore(st); return nil },
		"RestoreFrom": func(r *Core) error { _, err := r.RestoreFrom(bytes.NewReader(buf.Bytes()), nil); return err },
	} {
		r, _ := newTestCore(t)
		if err := restore(r); err != nil {
			t.Fatal(name, err)
		}
		var again bytes.Buffer
		if _, err := r.WriteState(&again); err != nil {
			t.Fatal(err)
		}
		got := NewState()
		if err := ReadState(bytes.NewReader(again.Bytes()), got); err != nil || !got.Drops["/ssd/a"]["stale"] {
			t.Fatalf("%s: the drop is gone after the restore: %v, %v", name, err, got.Drops)
		}
	}
}
