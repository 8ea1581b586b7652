// grants_test.go checks the grants the core mints, by its injected clock:
// which ranges, which direction, until when, and that keys survive the
// journal and snapshots.

package master

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/gostore/gostore/gostore/grant"
	"github.com/gostore/gostore/gostore/wire"
)

// at is a replica's place, without its grant (comparable).
func at(r wire.Replica) [2]uint64 { return [2]uint64{r.SegID, r.Offset} }

func testGrantKey(seed byte) []byte { return bytes.Repeat([]byte{seed}, grant.KeySize) }

func mountKeyed(t *testing.T, c *Core, client, name string, size uint64, key []byte) uint64 {
	t.Helper()
	id, err := c.MountSegment(wire.SegmentDesc{Name: name, ClientID: client, Size: size, ShmPath: "/x/" + name}, key)
	if err != nil {
		t.Fatalf("mount %s: %v", name, err)
	}
	return id
}

// verifies checks rep's grant as its owner (key) would, for n bytes at
// off in the replica, at time now.
func verifies(key []byte, rep wire.Replica, off, n uint64, write bool, now time.Time) error {
	k, _ := grant.NewKey(key)
	_, err := grant.Verify(k, rep.Grant, grant.Request{SegID: rep.SegID, Offset: rep.Offset + off, N: n, Write: write}, now.UnixNano())
	return err
}

// The master signs every range it hands out with its segment's key, for
// the direction and the time the range is the caller's, by its injected
// clock.
func TestGrantsMinted(t *testing.T) {
	clk := &fakeClock{now: time.Unix(1000, 0)}
	c := New(Config{DefaultKVLeaseTTL: time.Second, PutStartDiscardTimeout: 5 * time.Second,
		GrantSlack: 2 * time.Second, Now: clk.Now})
	ka, kb := testGrantKey(1), testGrantKey(2)
	mountKeyed(t, c, "a", "seg-a", 1<<20, ka)
	mountKeyed(t, c, "b", "seg-b", 1<<20, kb)
	keyOf := map[uint64][]byte{1: ka, 2: kb}

	res, _ := c.PutStart("w", "", []string{"k"}, []uint64{1000}, wire.ReplicaConfig{ReplicaNum: 2})
	if res[0].Code != wire.OK || len(res[0].Replicas) != 2 {
		t.Fatalf("PutStart = %+v", res[0])
	}
	t0 := clk.Now()
	for _, rep := range res[0].Replicas {
		key := keyOf[rep.SegID]
		cases := []struct {
			name     string
			off, n   uint64
			write    bool
			now      time.Time
			key      []byte
			seg      uint64
			wantFail error
		}{
			{"the whole replica", 0, 1000, true, t0, key, rep.SegID, nil},
			{"its end, just before expiry", 999, 1, true, t0.Add(7*time.Second - 1), key, rep.SegID, nil},
			{"past its end", 1, 1000, true, t0, key, rep.SegID, grant.ErrRange},
			{"reading it back", 0, 10, false, t0, key, rep.SegID, nil},
			{"reading past its end", 1, 1000, false, t0, key, rep.SegID, grant.ErrRange},
			{"at discard timeout + slack", 0, 10, true, t0.Add(7 * time.Second), key, rep.SegID, grant.ErrExpired},
			{"the other segment's key", 0, 10, true, t0, testGrantKey(3), rep.SegID, grant.ErrForged},
		}
		for _, tc := range cases {
			err := verifies(tc.key, wire.Replica{SegID: tc.seg, Offset: rep.Offset, Grant: rep.Grant}, tc.off, tc.n, tc.write, tc.now)
			if !errors.Is(err, tc.wantFail) {
				t.Errorf("write grant on %d, %s: %v, want %v", rep.SegID, tc.name, err, tc.wantFail)
			}
		}
	}
	c.PutEnd("w", []string{"k"}, nil)

	clk.Advance(time.Minute)
	t1 := clk.Now()
	g := c.GetReplicas([]string{"k"}, true)
	if g[0].Code != wire.OK || len(g[0].Replicas) != 2 {
		t.Fatalf("GetReplicas = %+v", g[0])
	}
	for _, rep := range g[0].Replicas {
		key := keyOf[rep.SegID]
		if err := verifies(key, rep, 100, 900, false, t1.Add(3*time.Second-1)); err != nil {
			t.Errorf("read grant within lease + slack: %v", err)
		}
		if err := verifies(key, rep, 0, 10, true, t1); !errors.Is(err, grant.ErrDirection) {
			t.Errorf("read grant used to write: %v", err)
		}
		if err := verifies(key, rep, 0, 10, false, t1.Add(3*time.Second)); !errors.Is(err, grant.ErrExpired) {
			t.Errorf("read grant after lease + slack: %v", err)
		}
	}
	// A peek (the SSD tier's own reads) carries none.
	for _, rep := range c.PeekReplicas([]string{"k"})[0].Replicas {
		if rep.Grant != nil {
			t.Errorf("peek minted a grant: %+v", rep)
		}
	}

	// An upsert in place grants the writer its ranges again.
	c.ReadDone([]string{"k"}, []uint64{g[0].Epoch})
	up, _ := c.UpsertStart("w", "", []string{"k"}, []uint64{1000}, wire.ReplicaConfig{})
	if up[0].Code != wire.OK {
		t.Fatalf("UpsertStart = %+v", up[0])
	}
	for _, rep := range up[0].Replicas {
		if err := verifies(keyOf[rep.SegID], rep, 0, 1000, true, t1); err != nil {
			t.Errorf("upsert's write grant: %v", err)
		}
	}
	c.PutEnd("w", []string{"k"}, nil)
}

func TestTaskGrants(t *testing.T) {
	clk := &fakeClock{now: time.Unix(1000, 0)}
	c := New(Config{PutStartDiscardTimeout: 5 * time.Second, GrantSlack: time.Second, Now: clk.Now})
	ka, kb := testGrantKey(1), testGrantKey(2)
	mountKeyed(t, c, "a", "seg-a", 1<<20, ka)
	mountKeyed(t, c, "b", "seg-b", 1<<20, kb)
	put(t, c, "k", 4096, wire.ReplicaConfig{Preferred: []string{"seg-a"}})
	plan, err := c.CreateTask(wire.CreateTaskReq{ClientID: "x", Kind: wire.TaskCopy, Key: "k", Targets: []string{"seg-b"}})
	if err != nil || len(plan.Sources) != 1 || len(plan.Targets) != 1 {
		t.Fatalf("CreateTask = %+v, %v", plan, err)
	}
	end := clk.Now().Add(11*time.Second - 1)
	if err := verifies(ka, plan.Sources[0], 0, 4096, false, end); err != nil {
		t.Errorf("source read grant: %v", err)
	}
	if err := verifies(kb, plan.Targets[0], 0, 4096, true, end); err != nil {
		t.Errorf("target write grant: %v", err)
	}
	if err := verifies(ka, plan.Sources[0], 0, 4096, true, end); !errors.Is(err, grant.ErrDirection) {
		t.Errorf("source grant used to write: %v", err)
	}
}

// A segment without a key (an owner that sent none) gets no grants; a
// remount that brings one makes the master sign with it; a key of the
// wrong size is refused.
func TestGrantKeyMount(t *testing.T) {
	c, clk := newTestCore(t)
	id := mount(t, c, "a", "seg-a", 1<<20)
	res, _ := c.PutStart("w", "", []string{"k"}, []uint64{64}, wire.ReplicaConfig{})
	if res[0].Replicas[0].Grant != nil {
		t.Fatalf("a keyless segment's replica has a grant")
	}
	key := testGrantKey(4)
	if again := mountKeyed(t, c, "a", "seg-a", 1<<20, key); again != id {
		t.Fatalf("remount gave id %d, want %d", again, id)
	}
	res, _ = c.PutStart("w", "", []string{"k2"}, []uint64{64}, wire.ReplicaConfig{})
	if err := verifies(key, res[0].Replicas[0], 0, 64, true, clk.Now()); err != nil {
		t.Fatalf("after the remount with a key: %v", err)
	}
	if _, err := c.MountSegment(wire.SegmentDesc{Name: "seg-b", ClientID: "b", Size: 1 << 20}, make([]byte, 16)); wire.CodeOf(err) != wire.ErrInvalidParams {
		t.Fatalf("a 16-byte key: %v", err)
	}
}

// The key survives a restart: in the journal (EncodeChange) and in a
// snapshot (DurableState), and Restore signs with it; a state without it
// (written before grants) restores a segment that signs nothing until its
// owner remounts.
func TestGrantKeyDurable(t *testing.T) {
	var changes []Change
	c := New(Config{OnChange: func(ch Change) { changes = append(changes, ch) }})
	key := testGrantKey(5)
	id := mountKeyed(t, c, "a", "seg-a", 1<<20, key)
	st := NewState()
	for _, ch := range changes {
		b, err := EncodeChange(nil, ch)
		if err != nil {
			t.Fatal(err)
		}
		back, err := DecodeChange(b)
		if err != nil {
			t.Fatalf("decode %v: %v", ch.Kind, err)
		}
		st.Apply(back)
	}
	if !bytes.Equal(st.GrantKeys[id], key) {
		t.Fatalf("journal replay lost the key: %x", st.GrantKeys[id])
	}
	if snap := c.DurableState(nil); !bytes.Equal(snap.GrantKeys[id], key) {
		t.Fatalf("snapshot lost the key: %x", snap.GrantKeys[id])
	}
	r := New(Config{})
	r.Restore(st)
	res, _ := r.PutStart("w", "", []string{"k"}, []uint64{64}, wire.ReplicaConfig{})
	if err := verifies(key, res[0].Replicas[0], 0, 64, true, time.Now()); err != nil {
		t.Fatalf("restored master's grant: %v", err)
	}

	// A record written before grants: the msgpack body alone.
	old, _ := EncodeChange(nil, Change{Kind: SegmentMounted, Segment: &wire.SegmentDesc{ID: 9, Name: "s", ClientID: "c", Size: 1 << 20}})
	ch, err := DecodeChange(old)
	if err != nil || ch.GrantKey != nil {
		t.Fatalf("an old SegmentMounted record: %+v, %v", ch, err)
	}
	st = NewState()
	st.Apply(ch)
	st.GrantKeys = nil // a snapshot from before grants has no such map
	r = New(Config{})
	r.Restore(st)
	res, _ = r.PutStart("w", "", []string{"k"}, []uint64{64}, wire.ReplicaConfig{})
	if res[0].Code != wire.OK || res[0].Replicas[0].Grant != nil {
		t.Fatalf("a keyless restored segment: %+v", res[0])
	}
	if _, err := r.MountSegment(wire.SegmentDesc{Name: "s", ClientID: "c", Size: 1 << 20}, key); err != nil {
		t.Fatal(err)
	}
	res, _ = r.PutStart("w", "", []string{"k2"}, []uint64{64}, wire.ReplicaConfig{})
	if err := verifies(key, res[0].Replicas[0], 0, 64, true, time.Now()); err != nil {
		t.Fatalf("after the owner's remount: %v", err)
	}

	// Bytes after the key are damage.
	withKey, _ := EncodeChange(nil, Change{Kind: SegmentMounted, Segment: &wire.SegmentDesc{ID: 9}, GrantKey: key})
	if _, err := DecodeChange(append(withKey, 0)); err == nil {
		t.Fatal("a byte after the grant key was accepted")
	}
}
