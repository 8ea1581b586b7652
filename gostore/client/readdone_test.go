// readdone_test.go tests where a small read's ReadDone goes: with the
// reader's next call to the master, or first and on its own when that call
// reads the same key again.

package client

import (
	"bytes"
	"testing"
	"time"

	"github.com/gostore/gostore/gostore/internal/testkit"
	"github.com/gostore/gostore/gostore/wire"
)

// A read's ReadDone waits for the reader's next call to the master (here
// for good, without one): until then the reader still counts, and another
// client's upsert in place is busy (-714). The next call, a get of another
// key, carries it: an upsert once that call returned goes through, and
// the reader then reads the new bytes.
func TestAReadDoneRidesTheReadersNextCall(t *testing.T) {
	withConfig(t, func(c *Config) { c.ReadDoneWait = time.Hour })
	reader, writer := spotCluster(t, "tcp")
	v1, v2, o := testkit.Pattern(1, 4096), testkit.Pattern(2, 4096), testkit.Pattern(3, 4096)
	mustPut(t, writer, "k", v1, false)
	mustPut(t, writer, "other", o, false)
	if got := readOne(t, reader, "k", len(v1)); !bytes.Equal(got, v1) {
		t.Fatal("first read: wrong bytes")
	}
	if code := writeOne(writer, "k", v2, true); code != wire.ErrObjectReplicaBusy {
		t.Fatalf("upsert while the reader's ReadDone waits: %v, want OBJECT_REPLICA_BUSY", code)
	}
	if got := readOne(t, reader, "other", len(o)); !bytes.Equal(got, o) {
		t.Fatal("read of the other key: wrong bytes")
	}
	if code := writeOne(writer, "k", v2, true); code != wire.OK {
		t.Fatalf("upsert after the reader's next call carried its ReadDone: %v", code)
	}
	if got := readOne(t, reader, "k", len(v2)); !bytes.Equal(got, v2) {
		t.Fatal("read after the upsert: wrong bytes")
	}
	if n := reader.ends.readDoneAlone.Load(); n != 0 {
		t.Fatalf("%d ReadDones went on their own; every get read a key of its own", n)
	}
}

// A get of a key whose own ReadDone still waits sends it first, on its
// own, so that the reader count drops to 0 between two reads of a key
// read in a loop; gets of other keys carry theirs. The bytes read stay
// right throughout, and the reader's own upsert is never busy.
func TestARereadSendsItsWaitingReadDoneFirst(t *testing.T) {
	withConfig(t, func(c *Config) { c.ReadDoneWait = time.Hour })
	reader, writer := spotCluster(t, "tcp")
	v, o := testkit.Pattern(4, 4096), testkit.Pattern(5, 4096)
	mustPut(t, writer, "k", v, false)
	mustPut(t, writer, "other", o, false)
	for i := range 3 {
		if got := readOne(t, reader, "k", len(v)); !bytes.Equal(got, v) {
			t.Fatalf("read %d: wrong bytes", i)
		}
	}
	if n := reader.ends.readDoneAlone.Load(); n != 2 {
		t.Fatalf("%d of 2 re-reads sent the waiting ReadDone first", n)
	}
	if got := readOne(t, reader, "other", len(o)); !bytes.Equal(got, o) {
		t.Fatal("read of the other key: wrong bytes")
	}
	if n := reader.ends.readDoneAlone.Load(); n != 2 {
		t.Fatalf("a read of another key sent the waiting ReadDone on its own (%d)", n)
	}
	if code := writeOne(reader, "other", v, true); code != wire.OK {
		t.Fatalf("the reader's own upsert right after its read: %v", code)
	}
}

// The keys whose ReadDone may wait are few, so that each lookup's check
// stays short: a read of more than laterReadMax keys, or one that would
// pass laterKeysMax, is not recorded (its ReadDone is written at once);
// a check empties the set and finds a key in it.
func TestLaterReadsBounds(t *testing.T) {
	var l laterReads
	keys := func(prefix string, n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = prefix + string(rune('a'+i))
		}
		return out
	}
	if l.add(keys("big", laterReadMax+1)) {
		t.Fatalf("a read of %d keys may wait", laterReadMax+1)
	}
	for i := range laterKeysMax / laterReadMax {
		if !l.add(keys(string(rune('A'+i)), laterReadMax)) {
			t.Fatalf("read %d of %d keys refused below the bound", i, laterReadMax)
		}
	}
	if l.add([]string{"one more"}) {
		t.Fatalf("more than %d keys wait", laterKeysMax)
	}
	if !l.overlap([]string{"x", "Ab"}) {
		t.Fatal("a waiting key was not found")
	}
	if l.overlap([]string{"Ab"}) {
		t.Fatal("the check did not empty the set")
	}
	if !l.add(keys("C", laterReadMax)) || l.overlap([]string{"zz"}) {
		t.Fatal("after a check: a read may wait again, and no other key matches")
	}
}
