package master

import (
	"strings"
	"testing"
	"time"

	"github.com/gostore/gostore/gostore/wire"
)

// A client restarted under its old name (node:1) takes the dead one's
// segment over once the dead one has been silent for TakeoverSilence (1 s
// here), without waiting for ClientTTL (10 s): the dead one's memory
// objects go, its disk copies stay, bound to their directory, until the
// new client's tier claims them. A holder heard from within the silence
// keeps its segment, and a retired client cannot come back under it.
func TestTakeoverTranscript(t *testing.T) {
	c, clk := newTestCore(t)
	runTranscript(t, c, clk, `
		mount a node:1 1048576              => ok
		mount x node:2 1048576              => ok
		ping a                              => unknown
		ping x                              => unknown
		put mem 1000 node:1                 => node:1
		put ssd 1000 node:1                 => node:1
		offloaded a ssd dirA                => ok
		disk ssd                            => ep-a

		# a is alive: pinged 0.5 s ago, then 0.9 s ago.
		advance 500ms                       => ok
		mount b node:1 1048576              => -102
		ping a                              => known
		advance 900ms                       => ok
		mount b node:1 1048576              => -102
		segments                            => node:1,node:2

		# a stopped pinging 1.1 s ago: dead. b takes node:1 over.
		advance 200ms                       => ok
		ping x                              => known
		mount b node:1 1048576              => ok
		segments                            => node:1,node:2
		get mem                             => -704
		disk ssd                            => ep-a
		recover b ssd dirA                  => ok
		disk ssd                            => ep-b
		put new 1000 node:1                 => node:1

		# The retired client is told it is unknown and cannot mount again.
		ping a                              => unknown
		mount a node:1 1048576              => -601
		mount a node:9 1048576              => -601

		# A ClientTTL on, a is forgotten for good; b's claimed copy stays.
		advance 11s                         => ok
		ping b                              => unknown
		ping x                              => known
		tick                                => ok
		disk ssd                            => ep-b
		segments                            => node:1,node:2
	`)
	if n := c.Stats().ClientsTakenOver.Load(); n != 1 {
		t.Fatalf("ClientsTakenOver = %d, want 1", n)
	}
}

// The refusal names the live holder, and Mount reports whom it took over.
func TestTakeoverReports(t *testing.T) {
	c, clk := newTestCore(t)
	if _, err := c.Mount(wire.SegmentDesc{Name: "n:1", ClientID: "old", Size: 1 << 20, TransferAddr: "10.0.0.1:1"}, nil); err != nil {
		t.Fatal(err)
	}
	clk.Advance(300 * time.Millisecond)
	_, err := c.Mount(wire.SegmentDesc{Name: "n:1", ClientID: "new", Size: 1 << 20}, nil)
	if wire.CodeOf(err) != wire.ErrSegmentAlreadyExists || !strings.Contains(err.Error(), "live client old (at 10.0.0.1:1, heard from 300ms ago)") {
		t.Fatalf("live holder: %v", err)
	}
	clk.Advance(time.Second)
	res, err := c.Mount(wire.SegmentDesc{Name: "n:1", ClientID: "new", Size: 1 << 20}, nil)
	if err != nil || res.TookOver != "old" || res.Silent != 1300*time.Millisecond {
		t.Fatalf("takeover: %+v %v", res, err)
	}
	if c.Clients() != 1 {
		t.Fatalf("%d clients known, want the new one only", c.Clients())
	}
}

// TakeoverSilence never reaches ClientTTL: with a short TTL a dead
// client's name is free before the TTL would have freed it.
func TestTakeoverSilenceBelowClientTTL(t *testing.T) {
	c := New(Config{ClientTTL: time.Second})
	if got := c.Config().TakeoverSilence; got != 500*time.Millisecond {
		t.Fatalf("TakeoverSilence = %v, want 500ms", got)
	}
}
