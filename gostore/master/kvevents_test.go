package master

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gostore/gostore/gostore/wire"
)

// eventsCore is an offload-enabled core (client "a", one segment with an
// SSD tier) whose KV events go to a queue of capacity events.
func eventsCore(t *testing.T, capacity int) (*Core, *fakeClock, *EventQueue) {
	c, clk := offloadCore(t, false)
	q := NewEventQueue(capacity)
	c.cfg.Events = q
	return c, clk, q
}

// ev spells an event for comparison: kind, medium, key, seconds on the clock.
func ev(e Event) string {
	kind := map[EventKind]string{EventStored: "stored", EventRemoved: "removed", EventAllCleared: "cleared"}[e.Kind]
	return fmt.Sprintf("%s %s %s @%d", kind, e.Medium, e.Key, e.At/int64(time.Second))
}

func drained(q *EventQueue) ([]string, uint64) {
	evs, lost := q.Drain(nil, 1<<20)
	out := []string{}
	for _, e := range evs {
		out = append(out, ev(e))
	}
	return out, lost
}

// Each step changes the core and lists the events it must queue, in order:
// an object's events follow what becomes readable on which medium, and
// nothing else (a write in progress, a refused call, a read say nothing).
func TestKVEventsFollowWhatIsReadable(t *testing.T) {
	c, clk, q := eventsCore(t, 0)
	steps := []struct {
		name string
		do   func()
		want []string
	}{
		{"a put's start announces nothing", func() {
			c.PutStart("w", "", []string{"k1"}, []uint64{100}, wire.ReplicaConfig{})
		}, nil},
		{"its end: stored in memory", func() { c.PutEnd("w", []string{"k1"}, nil) },
			[]string{"stored cpu k1 @1002"}},
		{"a second put of it is refused: nothing", func() {
			c.PutStart("w", "", []string{"k1"}, []uint64{100}, wire.ReplicaConfig{})
		}, nil},
		{"a read: nothing", func() { c.GetReplicas([]string{"k1"}, false) }, nil},
		{"more puts, in order", func() {
			put(t, c, "k2", 100, wire.ReplicaConfig{})
			put(t, c, "k3", 100, wire.ReplicaConfig{})
		}, []string{"stored cpu k2 @1005", "stored cpu k3 @1005"}},
		{"a disk copy: stored on disk", func() {
			c.OffloadHeartbeat("a", "dir-a", 10)
			notify(c, "a", 100, "k1")
		}, []string{"stored disk k1 @1006"}},
		{"eviction of its memory: removed from memory, still on disk", func() {
			c.cfg.EvictionRatio = 1
			if r := c.Evict(); r.Objects != 1 {
				t.Fatalf("evicted %d, want k1 (the only one with a disk copy)", r.Objects)
			}
		}, []string{"removed cpu k1 @1007"}},
		{"remove of one key", func() { c.Remove([]string{"k2"}, false) },
			[]string{"removed cpu k2 @1008"}},
		{"a remove of a key not there: nothing", func() { c.Remove([]string{"nope"}, false) }, nil},
		{"its disk copy evicted: removed from disk", func() { c.EvictDiskReplicas("a", []string{"k1"}) },
			[]string{"removed disk k1 @1010"}},
		{"remove all: each, then all cleared", func() {
			put(t, c, "k4", 100, wire.ReplicaConfig{})
			q.Drain(nil, 10)
			c.RemoveAll(false)
		}, []string{"removed cpu k3 @1011", "removed cpu k4 @1011", "cleared   @1011"}},
	}
	for _, s := range steps {
		clk.Advance(time.Second)
		s.do()
		got, lost := drained(q)
		if s.name == "remove all: each, then all cleared" {
			slices.Sort(got[:2]) // shards are swept in their order, not the keys'
		}
		if !slices.Equal(got, append([]string{}, s.want...)) || lost != 0 {
			t.Fatalf("%s: events %q (lost %d), want %q", s.name, got, lost, s.want)
		}
	}
}

// A client's end takes its replicas: each object it held is announced
// removed from memory; one kept on another client's disk stays there.
func TestKVEventsOnClientLoss(t *testing.T) {
	c, clk, q := eventsCore(t, 0)
	mountTier(t, c, "b", "seg-b", 1<<20)
	for i := range 6 {
		put(t, c, fmt.Sprintf("k%d", i), 100, wire.ReplicaConfig{})
	}
	before, _ := drained(q)
	var onA []string
	for _, s := range before {
		var k string
		fmt.Sscanf(s, "stored cpu %s", &k)
		if info, _ := c.QueryKey(k); info.Replicas[0].Segment == "seg" {
			onA = append(onA, "removed cpu "+k+" @1001")
		}
	}
	if len(onA) == 0 || len(onA) == 6 {
		t.Fatalf("placement put %d of 6 objects on a's segment; the test wants some on each", len(onA))
	}
	clk.Advance(time.Second)
	c.ClientLeave("a")
	got, _ := drained(q)
	slices.Sort(got)
	slices.Sort(onA)
	if !slices.Equal(got, onA) {
		t.Fatalf("after a left: %q, want %q", got, onA)
	}
}

// The queue is bounded: full, it drops its oldest event and counts it, and
// Drain says how many went since the last Drain.
func TestEventQueueDropsTheOldest(t *testing.T) {
	for _, tc := range []struct {
		capacity, pushed int
		want             []string
		lost             uint64
	}{
		{capacity: 3, pushed: 2, want: []string{"k0", "k1"}},
		{capacity: 3, pushed: 3, want: []string{"k0", "k1", "k2"}},
		{capacity: 3, pushed: 5, want: []string{"k2", "k3", "k4"}, lost: 2},
		{capacity: 1, pushed: 4, want: []string{"k3"}, lost: 3},
		{capacity: 0, pushed: 3000, want: nil}, // unbounded: every one kept (checked below)
		{capacity: 2000, pushed: 3000, want: nil, lost: 1000},
	} {
		q := NewEventQueue(tc.capacity)
		for i := range tc.pushed {
			q.Push(Event{Kind: EventStored, Key: fmt.Sprintf("k%d", i)})
		}
		evs, lost := q.Drain(nil, 1<<20)
		var keys []string
		for _, e := range evs {
			keys = append(keys, e.Key)
		}
		name := fmt.Sprintf("capacity %d, %d pushed", tc.capacity, tc.pushed)
		if tc.want == nil {
			kept := tc.pushed - int(tc.lost)
			if len(keys) != kept || keys[0] != fmt.Sprintf("k%d", tc.lost) || keys[kept-1] != fmt.Sprintf("k%d", tc.pushed-1) {
				t.Fatalf("%s: kept %d from %s to %s", name, len(keys), keys[0], keys[len(keys)-1])
			}
		} else if !slices.Equal(keys, tc.want) {
			t.Fatalf("%s: kept %v, want %v", name, keys, tc.want)
		}
		if lost != tc.lost || q.Dropped() != tc.lost {
			t.Fatalf("%s: lost %d, dropped %d, want %d", name, lost, q.Dropped(), tc.lost)
		}
		if _, lost := q.Drain(nil, 10); lost != 0 {
			t.Fatalf("%s: a second Drain reports %d lost again", name, lost)
		}
	}
}

// An all-cleared event is never the one dropped: the next goes instead
// (the all-cleared stays first), or the new event when the all-cleared is
// all there is. A held queue (Hold, until Release) drops nothing, and
// what it held comes out first.
func TestEventQueueKeepsAllClearedAndHeld(t *testing.T) {
	cl := Event{Kind: EventAllCleared}
	st := func(k string) Event { return Event{Kind: EventStored, Key: k} }
	for _, tc := range []struct {
		name     string
		capacity int
		hold     []Event // pushed while held
		pushed   []Event
		want     []string
		lost     uint64
	}{
		{name: "cleared oldest, capacity 2", capacity: 2, pushed: []Event{cl, st("k1"), st("k2"), st("k3")},
			want: []string{"cleared", "k3"}, lost: 2},
		{name: "cleared alone, capacity 1", capacity: 1, pushed: []Event{cl, st("k1"), st("k2")},
			want: []string{"cleared"}, lost: 2},
		{name: "a newer cleared replaces it", capacity: 1, pushed: []Event{cl, st("k1"), cl},
			want: []string{"cleared"}, lost: 2},
		{name: "two cleared, capacity 2", capacity: 2, pushed: []Event{cl, cl, st("k1")},
			want: []string{"cleared", "k1"}, lost: 1},
		{name: "held beyond capacity", capacity: 2, hold: []Event{cl, st("r1"), st("r2"), st("r3"), st("r4")},
			pushed: []Event{st("k1"), st("k2"), st("k3")},
			want:   []string{"cleared", "r1", "r2", "r3", "r4", "k2", "k3"}, lost: 1},
	} {
		q := NewEventQueue(tc.capacity)
		q.Hold()
		for _, e := range tc.hold {
			q.Push(e)
		}
		q.Release()
		for _, e := range tc.pushed {
			q.Push(e)
		}
		if q.Len() != len(tc.want) {
			t.Errorf("%s: Len %d, want %d", tc.name, q.Len(), len(tc.want))
		}
		var got []string
		for {
			evs, lost := q.Drain(nil, 3) // in pieces: the held part, then the ring
			if lost != 0 && lost != tc.lost {
				t.Errorf("%s: lost %d, want %d", tc.name, lost, tc.lost)
			}
			if len(evs) == 0 {
				break
			}
			for _, e := range evs {
				if e.Kind == EventAllCleared {
					got = append(got, "cleared")
				} else {
					got = append(got, e.Key)
				}
			}
		}
		if !slices.Equal(got, tc.want) || q.Dropped() != tc.lost {
			t.Errorf("%s: kept %v (dropped %d), want %v (%d)", tc.name, got, q.Dropped(), tc.want, tc.lost)
		}
	}
}

// Drain takes at most max, oldest first, and Ready wakes a waiting
// publisher once an event arrives in an empty queue.
func TestEventQueueDrainsInBatches(t *testing.T) {
	q := NewEventQueue(100)
	select {
	case <-q.Ready():
		t.Fatal("ready while empty")
	default:
	}
	for i := range 5 {
		q.Push(Event{Key: fmt.Sprint(i)})
	}
	<-q.Ready()
	a, _ := q.Drain(nil, 3)
	b, _ := q.Drain(nil, 3)
	if len(a) != 3 || len(b) != 2 || a[0].Key != "0" || b[0].Key != "3" || q.Len() != 0 {
		t.Fatalf("batches %v %v", a, b)
	}
}

// A restored core announces what it restored, each object's media.
func TestKVEventsAfterRestore(t *testing.T) {
	c, clk, _ := eventsCore(t, 0)
	put(t, c, "m", 100, wire.ReplicaConfig{})
	put(t, c, "d", 100, wire.ReplicaConfig{})
	c.OffloadHeartbeat("a", "dir-a", 10)
	notify(c, "a", 100, "d")
	st := c.DurableState(nil)

	c2 := New(Config{Now: clk.Now, EnableOffload: true})
	q := NewEventQueue(0)
	c2.cfg.Events = q
	c2.Restore(st)
	got, _ := drained(q)
	slices.Sort(got)
	want := []string{"stored cpu d @1000", "stored cpu m @1000", "stored disk d @1000"}
	if !slices.Equal(got, want) {
		t.Fatalf("restored: %q, want %q", got, want)
	}
}

// BenchmarkPutWithEvents: PutStart+PutEnd of 128 keys, events off and on
// (the queue drained by a goroutine, as the publisher does): what the
// core's side of KV events costs a put.
func BenchmarkPutWithEvents(b *testing.B) {
	for _, on := range []bool{false, true} {
		b.Run(fmt.Sprintf("events=%v", on), func(b *testing.B) {
			c := New(Config{ClientTTL: time.Hour})
			c.MountSegment(wire.SegmentDesc{Name: "s", ClientID: "c", Size: 1 << 40}, nil)
			if on {
				q := NewEventQueue(65536)
				c.cfg.Events = q
				done := make(chan struct{})
				defer close(done)
				go func() {
					var buf []Event
					for {
						buf, _ = q.Drain(buf[:0], 64)
						if len(buf) == 0 {
							select {
							case <-q.Ready():
							case <-done:
								return
							}
						}
					}
				}()
			}
			keys := make([]string, 128)
			sizes := make([]uint64, 128)
			n := 0
			for b.Loop() {
				for i := range keys {
					keys[i], sizes[i] = fmt.Sprintf("k/%d", n), 4096
					n++
				}
				c.PutStart("w", "", keys, sizes, wire.ReplicaConfig{})
				c.PutEnd("w", keys, nil)
			}
		})
	}
}

// Under --enable_multi_tenants a tenant's object is stored under its
// scoped key; its events carry the tenant's own key and the tenant's name,
// and the default tenant's object is announced as it is stored.
func TestKVEventsNameTheTenant(t *testing.T) {
	c, _, q := eventsCore(t, 0)
	c.cfg.MultiTenants = true
	put(t, c, wire.ScopeKey("tenant-a", "k"), 100, wire.ReplicaConfig{})
	put(t, c, "k", 100, wire.ReplicaConfig{})
	evs, _ := q.Drain(nil, 10)
	if len(evs) != 2 || evs[0].Key != "k" || evs[0].Tenant != "tenant-a" || evs[1].Key != "k" || evs[1].Tenant != "" {
		t.Fatalf("events %+v, want k of tenant-a then k of the default tenant", evs)
	}
}

// A remove-all racing with a put never queues its all-cleared after the
// stored event of an object still there. The put lands at the last moment
// it can: the clock read for the all-cleared event's time (after the
// sweep), the injected clock being the one seam the core has.
func TestRemoveAllClearedNotAfterANewerStored(t *testing.T) {
	c, clk := newTestCore(t)
	mount(t, c, "a", "seg-a", 1<<20)
	q := NewEventQueue(0)
	c.cfg.Events = q
	put(t, c, "old", 64, wire.ReplicaConfig{})
	calls, fired := 0, false
	c.cfg.Now = func() time.Time {
		if calls++; calls == 3 && !fired { // removeMatching's, "old"'s removed, the all-cleared's
			fired = true
			put(t, c, "late", 64, wire.ReplicaConfig{})
		}
		return clk.Now()
	}
	if n := c.RemoveAll(true); n != 1 {
		t.Fatalf("removed %d", n)
	}
	got, _ := drained(q)
	known := map[string]bool{}
	for _, e := range got {
		kind, key, _ := strings.Cut(e, " ")
		switch kind {
		case "stored":
			known[strings.Fields(key)[1]] = true
		case "removed":
			delete(known, strings.Fields(key)[1])
		case "cleared":
			clear(known)
		}
	}
	if !fired || !known["late"] {
		t.Fatalf("events %q: a subscriber does not know \"late\", which is there (put: %v)", got, fired)
	}
}
