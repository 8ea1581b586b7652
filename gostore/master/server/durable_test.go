package server

import (
	"testing"
	"time"

	"github.com/gostore/gostore/gostore/master"
	"github.com/gostore/gostore/gostore/wire"
)

// waitsLog is a change log that notes what each wait asked for: whose
// records an answer waits to be synced, and whose only to be written.
type waitsLog struct {
	next            uint64
	synced, written uint64 // the highest seq each kind of wait asked for
}

func (l *waitsLog) Enqueue([]byte) (uint64, error) { l.next++; return l.next, nil }
func (l *waitsLog) Wait(seq uint64) error          { l.synced = max(l.synced, seq); return nil }
func (l *waitsLog) WaitWritten(seq uint64) error   { l.written = max(l.written, seq); return nil }
func (l *waitsLog) LastSeq() uint64                { return l.next }
func (l *waitsLog) Snapshot(uint64, []byte) error  { return nil }
func (l *waitsLog) Close() error                   { return nil }

func hold() master.Change {
	return master.Change{Kind: master.RangesHeld, Hold: &master.DurableHold{ID: 1, Size: 8,
		Ranges: []master.DurableReplica{{SegID: 1}}}, OnlyHolds: true}
}

// A write start's answer waits for its holds to be written and for every
// other change before them to be synced: the put's ranges may have been
// freed by that change.
func TestAWriteStartWaitsForItsHoldsToBeWrittenAndTheRestSynced(t *testing.T) {
	gone := master.Change{Kind: master.ObjectGone, Key: "old"}
	for _, c := range []struct {
		name                  string
		changes               []master.Change
		synced, written       uint64
		allSynced, allWritten uint64 // what a durable op's answer waits for
	}{
		{"holds only", []master.Change{hold(), hold()}, 0, 2, 2, 0},
		{"a removal before the holds", []master.Change{gone, hold(), hold()}, 1, 3, 3, 0},
		{"a removal after the holds", []master.Change{hold(), gone}, 2, 2, 2, 0},
	} {
		l := &waitsLog{}
		d := &durability{j: l}
		for _, ch := range c.changes {
			d.record(ch)
		}
		if err := d.waitHeld(l.LastSeq()); err != nil {
			t.Fatal(err)
		}
		if l.synced != c.synced || l.written != c.written {
			t.Errorf("%s: waited for records synced up to %d and written up to %d, want %d and %d",
				c.name, l.synced, l.written, c.synced, c.written)
		}
		*l = waitsLog{next: l.next}
		d.wait(l.LastSeq())
		if l.synced != c.allSynced || l.written != c.allWritten {
			t.Errorf("%s: a durable op waited for %d synced, %d written", c.name, l.synced, l.written)
		}
	}
}

// Concurrent puts: a write start's answer does not wait for the sync of
// another put's end (a completion frees no range it could be handed), but
// still for that of a removal, whose freed ranges it may be handed. The
// changes come from a real core, as the server wires it.
func TestAWriteStartDoesNotWaitForAnotherPutsEndToBeSynced(t *testing.T) {
	l := &waitsLog{}
	d := &durability{j: l}
	c := master.New(master.Config{OnChange: d.record})
	if _, err := c.MountSegment(wire.SegmentDesc{Name: "s", ClientID: "c", Size: 1 << 20}, nil); err != nil {
		t.Fatal(err)
	}
	put := func(key string) {
		if _, err := c.PutStart("w", "", []string{key}, []uint64{4096}, wire.ReplicaConfig{}); err != nil {
			t.Fatal(err)
		}
	}
	put("a")
	if codes := c.PutEnd("w", []string{"a"}, nil); codes[0] != 0 {
		t.Fatalf("PutEnd: %v", codes)
	}
	afterMount := l.next - 2 // the mount's record(s), then a's start and end
	put("b")
	l.synced, l.written = 0, 0
	if err := d.waitHeld(l.LastSeq()); err != nil {
		t.Fatal(err)
	}
	if l.synced > afterMount || l.written != l.next {
		t.Fatalf("b's start waited for records synced up to %d (the mount is %d, a's end %d) and written up to %d of %d",
			l.synced, afterMount, afterMount+2, l.written, l.next)
	}
	c.Remove([]string{"a"}, false)
	gone := l.next
	put("c")
	l.synced, l.written = 0, 0
	d.waitHeld(l.LastSeq())
	if l.synced != gone || l.written != l.next {
		t.Fatalf("c's start after a's removal (record %d) waited for %d synced, %d written of %d",
			gone, l.synced, l.written, l.next)
	}
}

func TestAMachineRestartQuarantinesRestoredSegments(t *testing.T) {
	now := time.Unix(10_000, 0)
	opts := Options{PutStartDiscardTimeout: 30 * time.Second}
	asked := opts
	asked.RestoreQuarantine = 5 * time.Second
	for _, c := range []struct {
		name      string
		opts      Options
		rebooted  bool
		lastWrite time.Time
		want      time.Duration
	}{
		{"process crash", opts, false, now.Add(-time.Second), 0},
		{"process crash, quarantine asked", asked, false, now.Add(-time.Second), 5 * time.Second},
		{"reboot 10 s after the last write", opts, true, now.Add(-10 * time.Second), 20 * time.Second},
		{"reboot after the discard timeout", opts, true, now.Add(-time.Minute), 0},
		{"reboot, a longer quarantine asked", asked, true, now.Add(-28 * time.Second), 5 * time.Second},
		{"reboot, default discard timeout", Options{}, true, now, master.DefaultPutStartDiscardTimeout},
	} {
		if got := restoreQuarantine(c.opts, c.rebooted, c.lastWrite, now); got != c.want {
			t.Errorf("%s: quarantine %v, want %v", c.name, got, c.want)
		}
	}
}
