package master

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gostore/gostore/gostore/wire"
)

// runTranscript plays a transcript against c: one command per line, each
// followed by "=>" and what it must answer. Blank lines and lines starting
// with '#' are skipped. Commands:
//
//	mount CLIENT NAME SIZE        => ok | CODE
//	drain CLIENT NAME DURATION    => ok | CODE        (DrainSegment)
//	unmount CLIENT NAME           => ok | CODE        (UnmountSegment)
//	put KEY SIZE [PREFERRED]      => SEGMENT | CODE   (a hard-pinned PutStart + PutEnd; where the replica went)
//	copy KEY TARGET               => ok | CODE        (CreateCopyTask)
//	get KEY                       => SEGMENT,... | CODE
//	advance DURATION              => ok               (the clock moves; nothing runs)
//	tick                          => ok
//	segments                      => NAME[*],... | none   (* marks a draining segment)
//	usage                         => PERCENT          (the pool's usage, as eviction sees it)
//	ping CLIENT                   => known | unknown
//	offloaded CLIENT KEY STORAGE  => ok | CODE        (NotifyOffloaded: a disk copy in directory STORAGE, at endpoint ep-CLIENT)
//	recover CLIENT KEY STORAGE    => ok | CODE        (RecoverDisk of KEY, at its size, from directory STORAGE)
//	disk KEY                      => ENDPOINT | none | CODE  (where KEY's disk copy is served)
//	start KEY SIZE                => SEGMENT | CODE   (a plain PutStart by w: one item of a put call)
//	end KEY HOLD                  => ok | CODE        (PutEndHold of w's write of KEY; HOLD 0: a plain PutEnd)
//	unhold KEY GRACE              => ok               (PutUnhold: w's call is over; the hold ends after GRACE)
//	ondisk CLIENT KEY             => ok | CODE        (CLIENT's SSD tier reports KEY's disk copy)
//	evict                         => N                (one eviction pass now; the objects it evicted)
//	present KEY                   => yes | no         (QueryKey: uses nothing, extends no lease)
func runTranscript(t *testing.T, c *Core, clk *fakeClock, script string) {
	t.Helper()
	for n, line := range strings.Split(script, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		cmd, want, ok := strings.Cut(line, "=>")
		if !ok {
			t.Fatalf("line %d %q: no =>", n+1, line)
		}
		f := strings.Fields(cmd)
		if got := step(t, c, clk, f); got != strings.TrimSpace(want) {
			t.Fatalf("line %d: %s => %s, want %s", n+1, strings.TrimSpace(cmd), got, strings.TrimSpace(want))
		}
	}
}

func step(t *testing.T, c *Core, clk *fakeClock, f []string) string {
	t.Helper()
	errText := func(err error) string {
		if err == nil {
			return "ok"
		}
		return strconv.Itoa(int(wire.CodeOf(err)))
	}
	num := func(s string) uint64 {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("bad number %q", s)
		}
		return v
	}
	dur := func(s string) time.Duration {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("bad duration %q", s)
		}
		return d
	}
	segName := func(id uint64) string {
		if s := c.QuerySegments([]uint64{id}); len(s) == 1 {
			return s[0].Name
		}
		return fmt.Sprint("gone#", id)
	}
	switch f[0] {
	case "mount":
		_, err := c.MountSegment(wire.SegmentDesc{Name: f[2], ClientID: f[1], Size: num(f[3])}, nil)
		return errText(err)
	case "drain":
		return errText(c.DrainSegment(f[1], f[2], dur(f[3])))
	case "unmount":
		return errText(c.UnmountSegment(f[1], f[2]))
	case "put":
		// Hard-pinned: the eviction pass a refused allocation asks for
		// must not take objects the transcript follows.
		cfg := wire.ReplicaConfig{HardPin: true}
		if len(f) > 3 {
			cfg.Preferred = []string{f[3]}
		}
		res, err := c.PutStart("w", "", []string{f[1]}, []uint64{num(f[2])}, cfg)
		if err != nil {
			return errText(err)
		}
		if res[0].Code != wire.OK {
			return strconv.Itoa(int(res[0].Code))
		}
		if codes := c.PutEnd("w", []string{f[1]}, nil); codes[0] != wire.OK {
			return "PutEnd " + strconv.Itoa(int(codes[0]))
		}
		return segName(res[0].Replicas[0].SegID)
	case "copy":
		_, err := c.CreateTask(wire.CreateTaskReq{ClientID: "w", Kind: wire.TaskCopy, Key: f[1], Targets: []string{f[2]}})
		return errText(err)
	case "get":
		g := c.GetReplicas([]string{f[1]}, false)[0]
		if g.Code != wire.OK {
			return strconv.Itoa(int(g.Code))
		}
		var names []string
		for _, r := range g.Replicas {
			names = append(names, segName(r.SegID))
		}
		return strings.Join(names, ",")
	case "advance":
		clk.Advance(dur(f[1]))
		return "ok"
	case "tick":
		c.Tick()
		return "ok"
	case "segments":
		var names []string
		for _, s := range c.Segments() {
			if s.Draining {
				names = append(names, s.Name+"*")
			} else {
				names = append(names, s.Name)
			}
		}
		if len(names) == 0 {
			return "none"
		}
		return strings.Join(names, ",")
	case "usage":
		return fmt.Sprintf("%.0f%%", 100*c.usage())
	case "ping":
		if c.Ping(f[1]) {
			return "known"
		}
		return "unknown"
	case "offloaded", "recover":
		info, ok := c.QueryKey(f[2])
		if !ok {
			return strconv.Itoa(int(wire.ErrObjectNotFound))
		}
		var codes []wire.Code
		if f[0] == "offloaded" {
			codes = c.NotifyOffloaded(f[1], "ep-"+f[1], f[3], []string{f[2]}, []uint64{info.Size}, nil)
		} else {
			codes = c.RecoverDisk(f[1], "ep-"+f[1], f[3], []string{f[2]}, []uint64{info.Size})
		}
		if codes[0] != wire.OK {
			return strconv.Itoa(int(codes[0]))
		}
		return "ok"
	case "disk":
		info, ok := c.QueryKey(f[1])
		switch {
		case !ok:
			return strconv.Itoa(int(wire.ErrObjectNotFound))
		case info.Disk == "":
			return "none"
		}
		return info.Disk
	case "start":
		res, err := c.PutStart("w", "", []string{f[1]}, []uint64{num(f[2])}, wire.ReplicaConfig{})
		if err != nil {
			return errText(err)
		}
		if res[0].Code != wire.OK {
			return strconv.Itoa(int(res[0].Code))
		}
		return segName(res[0].Replicas[0].SegID)
	case "end":
		return codeText(c.PutEndHold("w", []string{f[1]}, nil, dur(f[2]))[0])
	case "unhold":
		c.PutUnhold("w", []string{f[1]}, nil, dur(f[2]))
		return "ok"
	case "ondisk":
		info, ok := c.QueryKey(f[2])
		if !ok {
			return codeText(wire.ErrObjectNotFound)
		}
		return codeText(notify(c, f[1], info.Size, f[2])[0])
	case "evict":
		return strconv.Itoa(c.Evict().Objects)
	case "present":
		if _, ok := c.QueryKey(f[1]); ok {
			return "yes"
		}
		return "no"
	}
	t.Fatalf("unknown command %q", f[0])
	return ""
}

func codeText(code wire.Code) string {
	if code == wire.OK {
		return "ok"
	}
	return strconv.Itoa(int(code))
}

// A graceful unmount: the segment stops taking replicas at once, keeps
// serving what it holds for the grace period, then goes with its objects.
func TestDrainSegmentTranscript(t *testing.T) {
	c, clk := newTestCore(t)
	runTranscript(t, c, clk, `
		mount a main 4096          => ok
		mount a extra 4096         => ok
		put k1 2048 extra          => extra
		put k2 1024 main           => main
		segments                   => extra,main
		usage                      => 38%

		# only the owner may drain; an unknown name is -101
		drain b extra 2s           => -601
		drain a nope 2s            => -101
		drain a extra 2s           => ok
		segments                   => extra*,main
		# draining: left out of the pool's usage, nothing new lands there
		usage                      => 25%
		put k3 1024 extra          => main
		copy k2 extra              => -200
		get k1                     => extra

		# asking again keeps the earlier deadline
		advance 1s                 => ok
		drain a extra 10s          => ok
		advance 999ms              => ok
		tick                       => ok
		get k1                     => extra
		segments                   => extra*,main
		advance 1ms                => ok
		tick                       => ok
		get k1                     => -704
		get k2                     => main
		segments                   => main
		drain a extra 1s           => -101
	`)
}

// Draining every segment: a put has nowhere to go and is told so without
// waiting; the grace period still ends the segments one Tick after it.
func TestDrainEveryHostSegment(t *testing.T) {
	c, clk := newTestCore(t)
	runTranscript(t, c, clk, `
		mount a s1 4096            => ok
		put k 100                  => s1
		drain a s1 1s              => ok
		put k2 100                 => -200
		get k                      => s1
		# a zero grace period is an immediate unmount
		mount a s2 4096            => ok
		put k3 100 s2              => s2
		drain a s2 0s              => ok
		get k3                     => -704
		segments                   => s1*
		advance 1s                 => ok
		tick                       => ok
		segments                   => none
		get k                      => -704
	`)
	// The refusal says why and that waiting will not help.
	mount(t, c, "a", "s3", 4096)
	if err := c.DrainSegment("a", "s3", time.Second); err != nil {
		t.Fatal(err)
	}
	res, _ := c.PutStart("w", "", []string{"k4"}, []uint64{10}, wire.ReplicaConfig{})
	if res[0].Code != wire.ErrNoAvailableHandle || res[0].NoSpace == nil || res[0].NoSpace.Space != wire.SpaceNone ||
		!strings.Contains(res[0].NoSpace.Why, "being unmounted") {
		t.Fatalf("put with every segment draining: %+v %+v", res[0], res[0].NoSpace)
	}
}

// A client that leaves takes its draining segments with it at once.
func TestLeaveDropsDrainingSegments(t *testing.T) {
	c, clk := newTestCore(t)
	runTranscript(t, c, clk, `
		mount a s1 4096            => ok
		put k 100                  => s1
		drain a s1 1h              => ok
	`)
	c.ClientLeave("a")
	runTranscript(t, c, clk, `
		segments                   => none
		get k                      => -704
	`)
}
