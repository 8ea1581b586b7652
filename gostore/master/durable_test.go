package master

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/gostore/gostore/gostore/wire"
)

// journaled is a core whose reported changes are replayed onto a State,
// as the server's journal would keep them.
func journaled(t *testing.T, cfg Config) (*Core, *fakeClock, *State) {
	t.Helper()
	clk := &fakeClock{now: time.Unix(1000, 0)}
	replay := NewState()
	cfg.Now, cfg.Rand = clk.Now, rand.New(rand.NewPCG(3, 4))
	cfg.OnChange = replay.Apply
	return New(cfg), clk, replay
}

func sameDurable(t *testing.T, step string, live, replayed *State) {
	t.Helper()
	if !reflect.DeepEqual(live.Segments, replayed.Segments) {
		t.Fatalf("%s: segments: live %v, replayed %v", step, live.Segments, replayed.Segments)
	}
	for k, o := range live.Objects {
		if r, ok := replayed.Objects[k]; !ok || !reflect.DeepEqual(o, r) {
			t.Fatalf("%s: object %q: live %+v, replayed %+v (%v)", step, k, o, r, ok)
		}
	}
	for k, r := range replayed.Objects {
		if _, ok := live.Objects[k]; !ok {
			t.Fatalf("%s: object %q replayed (%+v) but gone from the live core", step, k, r)
		}
	}
	norm := func(d map[string]map[string]bool) map[string]map[string]bool {
		out := map[string]map[string]bool{}
		for s, ks := range d {
			if len(ks) > 0 {
				out[s] = ks
			}
		}
		return out
	}
	if !reflect.DeepEqual(norm(live.Drops), norm(replayed.Drops)) {
		t.Fatalf("%s: drops: live %v, replayed %v", step, live.Drops, replayed.Drops)
	}
	if !reflect.DeepEqual(live.Held, replayed.Held) {
		t.Fatalf("%s: held ranges: live %v, replayed %v", step, live.Held, replayed.Held)
	}
}

// Every path that changes what survives a restart reports it: after each
// step of a random workload (puts, upserts in place and resized, revokes,
// removes, copies, moves, replica clears, eviction, SSD copies and their
// eviction, unmounts, expired clients), replaying the reported changes
// gives exactly the live core's durable state.
func TestReportedChangesReplayToTheLiveState(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			// Short write timeouts: puts get taken over and reclaimed, and
			// quarantined ranges released, within the walk.
			c, clk, replay := journaled(t, Config{DefaultKVLeaseTTL: time.Millisecond, ClientTTL: time.Hour,
				EnableOffload: true, HighWatermark: 0.7, PutStartDiscardTimeout: 20 * time.Millisecond,
				PutStartReleaseTimeout: 60 * time.Millisecond})
			// A range goes back to its segment only once the change that
			// let it go is reported: no object or hold still names it.
			var early []string
			testHookFree = func(s *segment, off, size uint64) {
				claimed := func(r DurableReplica) bool { return r.SegID == s.desc.ID && r.Offset == off }
				for k, o := range replay.Objects {
					for _, r := range append(append([]DurableReplica(nil), o.Replicas...), o.Writing...) {
						if claimed(r) {
							early = append(early, fmt.Sprintf("range %d@%d freed while the journal gives it to %q", off, s.desc.ID, k))
						}
					}
				}
				for id, h := range replay.Held {
					for _, r := range h.Ranges {
						if claimed(r) {
							early = append(early, fmt.Sprintf("range %d@%d freed while the journal holds it (hold %d)", off, s.desc.ID, id))
						}
					}
				}
			}
			t.Cleanup(func() { testHookFree = nil })
			rng := rand.New(rand.NewPCG(seed, 99))
			clients := []string{"a", "b", "c"}
			seg := func(cl string, gen int) string { return fmt.Sprintf("%s-seg%d", cl, gen) }
			gens := map[string]int{}
			for _, cl := range clients {
				mount(t, c, cl, seg(cl, 0), 1<<20)
				c.Ping(cl)
			}
			key := func() string { return fmt.Sprintf("k%d", rng.IntN(40)) }
			keys := func() []string {
				out := make([]string, 1+rng.IntN(4))
				for i := range out {
					out[i] = key()
				}
				return out
			}
			size := func() uint64 { return uint64(1 + rng.IntN(64<<10)) }
			for step := 0; step < 600; step++ {
				clk.Advance(time.Millisecond * time.Duration(rng.IntN(5)))
				cl := clients[rng.IntN(len(clients))]
				what := rng.IntN(16)
				switch what {
				case 0, 1, 2: // put, ended or left open
					ks := keys()
					sizes := make([]uint64, len(ks))
					for i := range sizes {
						sizes[i] = size()
					}
					res, _ := c.PutStart(cl, "", ks, sizes, wire.ReplicaConfig{ReplicaNum: 1 + rng.IntN(2),
						SoftPin: rng.IntN(3) == 0, HardPin: rng.IntN(5) == 0})
					if rng.IntN(4) != 0 {
						epochs := make([]uint64, len(res))
						for i, r := range res {
							epochs[i] = r.Epoch
						}
						c.PutEnd(cl, ks, epochs)
					}
				case 3: // upsert, in place when the size matches
					k := key()
					n := size()
					if rng.IntN(2) == 0 {
						if got := c.Exist([]string{k}); got[0] == wire.OK {
							if g := c.PeekReplicas([]string{k}); len(g) == 1 && g[0].Code == wire.OK {
								n = g[0].Size
							}
						}
					}
					res, _ := c.UpsertStart(cl, "", []string{k}, []uint64{n}, wire.ReplicaConfig{ReplicaNum: 1})
					if res[0].Code == wire.OK && rng.IntN(3) != 0 {
						c.PutEnd(cl, []string{k}, []uint64{res[0].Epoch})
					}
				case 4:
					c.PutRevoke(cl, keys(), nil)
				case 5:
					c.Remove(keys(), rng.IntN(2) == 0)
				case 6: // a read leases the object (and extends soft pins)
					g := c.GetReplicas(keys(), true)
					_ = g
				case 7: // copy or move
					k, target := key(), seg(clients[rng.IntN(3)], gens[clients[rng.IntN(3)]])
					req := wire.CreateTaskReq{ClientID: cl, Kind: wire.TaskCopy, Key: k, Targets: []string{target}}
					if rng.IntN(2) == 0 {
						req.Kind, req.Source = wire.TaskMove, seg(clients[rng.IntN(3)], gens[clients[rng.IntN(3)]])
					}
					if plan, err := c.CreateTask(req); err == nil && len(plan.Targets) > 0 {
						code := wire.OK
						if rng.IntN(4) == 0 {
							code = wire.ErrTransferFail
						}
						c.TaskDone(cl, plan.ID, code)
					}
				case 8:
					clk.Advance(2 * time.Millisecond) // past the leases
					c.ReplicaClear(cl, keys(), []string{"", seg(cl, gens[cl])}[rng.IntN(2)])
				case 9:
					c.Evict()
				case 10: // the SSD tier: persist what the heartbeat asks
					storage := "/ssd/" + cl
					ks, sizes, _ := c.OffloadHeartbeat(cl, storage, 8)
					if len(ks) > 0 {
						c.NotifyOffloaded(cl, cl+":ssd", storage, ks, sizes, nil)
					}
				case 11:
					c.EvictDiskReplicas(cl, keys())
				case 12: // a segment goes and a new one comes
					if rng.IntN(4) == 0 {
						c.UnmountSegment(cl, seg(cl, gens[cl]))
						gens[cl]++
						mount(t, c, cl, seg(cl, gens[cl]), 1<<20)
					}
				case 13:
					c.RemoveByRegex("^k1", rng.IntN(2) == 0)
				case 14: // a restarted client re-registers its SSD copies
					storage := "/ssd/" + cl
					ks := keys()
					sizes := make([]uint64, len(ks))
					for i := range sizes {
						sizes[i] = size()
					}
					c.RecoverDisk(cl, cl+":ssd2", storage, ks, sizes)
				case 15:
					if rng.IntN(4) == 0 { // past the takeover and release timeouts
						clk.Advance(c.Config().PutStartDiscardTimeout)
					}
					c.Tick()
				}
				if len(early) > 0 {
					t.Fatalf("step %d (op %d): %v", step, what, early)
				}
				sameDurable(t, fmt.Sprintf("step %d (op %d)", step, what), c.DurableState(nil), replay)
			}
		})
	}
}

// A core restored from a durable state serves the same objects from the
// same ranges, re-allocates nothing they hold, and its restored segments
// take no new replica until the quarantine ends.
func TestRestoreServesTheSameObjects(t *testing.T) {
	c, clk, replay := journaled(t, Config{ClientTTL: time.Hour})
	mount(t, c, "a", "sa", 1<<20)
	mount(t, c, "b", "sb", 1<<20)
	for i := 0; i < 20; i++ {
		put(t, c, fmt.Sprintf("k%d", i), uint64(1000+i*500), wire.ReplicaConfig{ReplicaNum: 2, HardPin: i == 3})
	}
	open, _ := c.PutStart("w", "", []string{"open"}, []uint64{4096}, wire.ReplicaConfig{}) // never ended
	before := c.PeekReplicas(keysN(20))

	clk2 := &fakeClock{now: clk.Now().Add(time.Minute)}
	r := New(Config{ClientTTL: time.Hour, Now: clk2.Now, Rand: rand.New(rand.NewPCG(5, 6)),
		RestoreQuarantine: time.Second})
	rep := r.Restore(replay)
	if rep.Segments != 2 || rep.Objects != 20 || rep.Dropped != 0 || rep.HeldRanges != 1 {
		t.Fatalf("restore: %+v", rep)
	}
	// The open put's range is held: its writer may still be copying.
	after0 := r.PeekReplicas([]string{"open"})
	if after0[0].Code != wire.ErrObjectNotFound {
		t.Fatalf("an unfinished put is readable after the restore: %+v", after0[0])
	}
	after := r.PeekReplicas(keysN(20))
	for i := range before {
		if before[i].Code != wire.OK || !reflect.DeepEqual(before[i].Replicas, after[i].Replicas) || before[i].Size != after[i].Size {
			t.Fatalf("key %d: before %+v, after %+v", i, before[i], after[i])
		}
	}
	if got := r.Exist([]string{"open"}); got[0] != wire.ErrObjectNotFound {
		t.Fatalf("an unfinished put came back: %v", got[0])
	}
	// Quarantined: restored free space takes nothing yet.
	if res, _ := r.PutStart("w", "", []string{"new"}, []uint64{100}, wire.ReplicaConfig{}); res[0].Code != wire.ErrNoAvailableHandle {
		t.Fatalf("put during the quarantine: %v", res[0].Code)
	}
	clk2.Advance(time.Second)
	r.Tick()
	res, _ := r.PutStart("w", "", []string{"new"}, []uint64{100}, wire.ReplicaConfig{})
	if res[0].Code != wire.OK {
		t.Fatalf("put after the quarantine: %v", res[0].Code)
	}
	// The new range overlaps no restored replica, nor the open put's.
	if nr := res[0].Replicas[0]; nr.SegID == open[0].Replicas[0].SegID &&
		nr.Offset < open[0].Replicas[0].Offset+4096 && open[0].Replicas[0].Offset < nr.Offset+100 {
		t.Fatalf("new range %+v overlaps the held range of the open put %+v", nr, open[0].Replicas[0])
	}
	for _, g := range after {
		for _, rep := range g.Replicas {
			for _, nr := range res[0].Replicas {
				if nr.SegID == rep.SegID && nr.Offset < rep.Offset+g.Size && rep.Offset < nr.Offset+100 {
					t.Fatalf("new range %+v overlaps a restored replica %+v of %d bytes (%+v); segs %+v", nr, rep, g.Size, g, r.Segments())
				}
			}
		}
	}
	// Segment ids continue above the restored ones; the same client
	// mounting its segment again gets it back as it was.
	if id, err := r.MountSegment(wire.SegmentDesc{Name: "sa", ClientID: "a", Size: 1 << 20, ShmPath: "/x/sa"}, nil); err != nil || id != before[0].Replicas[0].SegID && id != before[0].Replicas[1].SegID {
		t.Fatalf("remount of sa: id %d, %v", id, err)
	}
	if id := mount(t, r, "c", "sc", 1<<20); id <= 2 {
		t.Fatalf("a new segment got id %d, taken before the restart", id)
	}
}

// Two objects claiming one range (a record lost between them) cannot both
// be served: one is dropped, never both handed the same bytes. The newer
// write (y, the higher epoch) keeps the range: its bytes were copied last.
func TestRestoreDropsAClaimOnATakenRange(t *testing.T) {
	st := NewState()
	st.Segments[1] = wire.SegmentDesc{ID: 1, Name: "s", ClientID: "a", Size: 1 << 20}
	st.Objects["x"] = DurableObject{Size: 4096, Epoch: 1, Replicas: []DurableReplica{{SegID: 1, Offset: 0}}}
	st.Objects["y"] = DurableObject{Size: 4096, Epoch: 2, Replicas: []DurableReplica{{SegID: 1, Offset: 2048}}}
	st.Objects["z"] = DurableObject{Size: 4096, Epoch: 3, Replicas: []DurableReplica{{SegID: 7, Offset: 0}}} // no such segment
	c, _ := newTestCore(t)
	rep := c.Restore(st)
	if rep.Objects != 1 || rep.Dropped != 2 {
		t.Fatalf("restore: %+v", rep)
	}
	if got := c.Exist([]string{"x", "y", "z"}); got[0] != wire.ErrObjectNotFound || got[1] != wire.OK || got[2] != wire.ErrObjectNotFound {
		t.Fatalf("exist: %v", got)
	}
}

func keysN(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("k%d", i)
	}
	return out
}

// The stored form gives every change back as it was, and nothing else:
// cut or altered bytes are an error, never a panic.
func TestChangesRoundTripAndRefuseDamage(t *testing.T) {
	changes := kindChanges()
	for _, ch := range changes {
		b, err := EncodeChange(nil, ch)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeChange(b)
		if err != nil || !reflect.DeepEqual(got, ch) {
			t.Fatalf("%+v came back as %+v (%v)", ch, got, err)
		}
		for cut := 0; cut < len(b); cut++ {
			if _, err := DecodeChange(b[:cut]); err == nil && ch.Kind <= ObjectGone {
				t.Fatalf("%d of %d bytes of %+v decoded", cut, len(b), ch)
			}
		}
		if _, err := DecodeChange(append(append([]byte{}, b...), 0)); err == nil && ch.Kind <= ObjectGone {
			t.Fatalf("a byte after %+v decoded", ch)
		}
	}
	rng := rand.New(rand.NewPCG(1, 1))
	for i := 0; i < 20000; i++ {
		junk := make([]byte, rng.IntN(40))
		for j := range junk {
			junk[j] = byte(rng.Uint32())
		}
		DecodeChange(junk) // must not panic
	}
	if _, err := DecodeChange([]byte{byte(ObjectSet), 1, 'k', 1, 1, 0, 0, 0xff, 0xff, 0xff, 0x0f}); err == nil {
		t.Fatal("a replica count past the record decoded")
	}
}
