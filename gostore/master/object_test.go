package master

import (
	"slices"
	"testing"
	"unsafe"

	"github.com/gostore/gostore/gostore/wire"
)

// The common object (one replica, nothing rare set) is one allocation of
// the 80-byte size class, with no side struct: what a master of 10^8
// objects pays per object beyond its map slot and key.
func TestCommonObjectIsOneSmallAllocation(t *testing.T) {
	if sz := unsafe.Sizeof(object{}); sz > 80 {
		t.Fatalf("object is %d bytes: it left the 80-byte size class", sz)
	}
	c, _ := newTestCore(t)
	mount(t, c, "a", "seg", 1<<20)
	put(t, c, "k", 64, wire.ReplicaConfig{})
	o := c.shardOf("k").objects["k"]
	if o.x != nil || o.numReplicas() != 1 || o.writerID() != "w" {
		t.Fatalf("common object: extra %v, %d replicas, writer %q", o.x, o.numReplicas(), o.writerID())
	}
}

// Every field of the compact object reads back as it was set, for replica
// sets of 1..n, and the side struct goes away once its fields are clear.
func TestCompactObjectFieldsRoundTrip(t *testing.T) {
	segs := make([]*segment, 5)
	for i := range segs {
		segs[i] = &segment{}
	}
	for n := 0; n <= len(segs); n++ {
		var o object
		want := make([]replica, n)
		for i := range want {
			want[i] = replica{seg: segs[i], offset: uint64(64 * (i + 1)), status: replicaStatus(i % 2)}
		}
		o.setReplicas(want)
		if got := o.replicaList(); o.numReplicas() != n || !slices.Equal(got, want) {
			t.Fatalf("%d replicas: got %v (%d), want %v", n, got, o.numReplicas(), want)
		}
		for i, r := range o.reps() {
			if r != want[i] {
				t.Fatalf("%d replicas: reps()[%d] = %v, want %v", n, i, r, want[i])
			}
		}
		if n > 1 {
			want[1].offset = 1 // setReplicas copied: the caller's slice is its own
			if o.replicaList()[1].offset != 128 {
				t.Fatal("setReplicas kept the caller's slice")
			}
		}
		o.setStatus(replicaComplete)
		if n > 0 && (!o.complete() || o.unfinished()) {
			t.Fatalf("%d replicas: setStatus(COMPLETE) left one unfinished", n)
		}
		o.setStatus(replicaProcessing)
		if n > 0 && (o.complete() || !o.unfinished()) {
			t.Fatalf("%d replicas: setStatus(PROCESSING) left one complete", n)
		}
		if n > 1 && o.x == nil {
			t.Fatalf("%d replicas without a side struct", n)
		}
		if o.setReplicas(nil); o.numReplicas() != 0 || o.x != nil {
			t.Fatalf("cleared %d replicas: %d left, extra %v", n, o.numReplicas(), o.x)
		}
	}

	var o object
	o.setReplicas([]replica{{seg: segs[0], offset: 64, status: replicaComplete}})
	d := &diskCopy{client: "c", endpoint: "e", storage: "s"}
	o.setSoftPin(11)
	o.setHeld(22)
	o.setDisk(d)
	o.addTasks(2)
	o.setWriter("writer-1")
	if o.softPinUntil() != 11 || o.heldUntil() != 22 || o.onDisk() != d || o.taskCount() != 2 || o.writerID() != "writer-1" {
		t.Fatalf("fields: pin %d held %d disk %v tasks %d writer %q", o.softPinUntil(), o.heldUntil(), o.onDisk(), o.taskCount(), o.writerID())
	}
	// Each cleared in turn: the side struct lives while any is set.
	clear := []func(){func() { o.setSoftPin(0) }, func() { o.setHeld(0) }, func() { o.setDisk(nil) }, func() { o.addTasks(-2) }}
	for i, f := range clear {
		if o.x == nil {
			t.Fatalf("side struct gone with %d fields still set", len(clear)-i)
		}
		f()
	}
	if o.x != nil || o.softPinUntil() != 0 || o.heldUntil() != 0 || o.onDisk() != nil || o.taskCount() != 0 {
		t.Fatalf("cleared: extra %+v", o.x)
	}
	if o.numReplicas() != 1 || o.writerID() != "writer-1" {
		t.Fatal("clearing the rare fields touched the replica or the writer")
	}
	// Clearing what was never set allocates nothing.
	var fresh object
	fresh.setSoftPin(0)
	fresh.setHeld(0)
	fresh.setDisk(nil)
	if fresh.x != nil || fresh.writerID() != "" {
		t.Fatal("a zero object grew a side struct or a writer")
	}
}
