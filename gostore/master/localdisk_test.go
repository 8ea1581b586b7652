package master

import (
	"slices"
	"testing"

	"github.com/gostore/gostore/gostore/wire"
)

// An SSD tier leaving the pool, step by step: its copies are forgotten
// (disk-only objects with them), it is asked for and accepted nothing
// more, objects on its client's segment no longer wait for a copy to be
// evictable, and the directory's next holder is told the files are stale.
func TestUnmountLocalDisk(t *testing.T) {
	steps := []struct {
		what string
		do   func(c *Core) any
		want any
	}{
		{"k lives in memory on a's segment", func(c *Core) any {
			res, _ := c.PutStart("w", "", []string{"k"}, []uint64{100}, wire.ReplicaConfig{})
			return c.PutEnd("w", []string{"k"}, []uint64{res[0].Epoch})[0]
		}, wire.OK},
		{"it waits for its disk copy before eviction may take it", func(c *Core) any {
			return c.waitsForDisk(c.shardOf("k").objects["k"])
		}, true},
		{"the heartbeat hands k to a's tier", func(c *Core) any {
			keys, _, _ := c.OffloadHeartbeat("a", "dir-a", 10)
			return keys
		}, []string{"k"}},
		{"a's tier holds a disk-only object d", func(c *Core) any {
			return c.RecoverDisk("a", "ep-a", "dir-a", []string{"d"}, []uint64{10})
		}, []wire.Code{wire.OK}},
		{"and a copy of m, which b also holds in memory", func(c *Core) any {
			mount(t, c, "b", "seg-b", 1<<20)
			put(t, c, "m", 50, wire.ReplicaConfig{Preferred: []string{"seg-b"}})
			return notify(c, "a", 50, "m")
		}, []wire.Code{wire.OK}},
		{"an empty client id is refused", func(c *Core) any { return c.UnmountLocalDisk("") }, wire.ErrInvalidParams},
		{"a's tier leaves", func(c *Core) any { return c.UnmountLocalDisk("a") }, nil},
		{"d lived only there: gone", func(c *Core) any { return c.GetReplicas([]string{"d"}, false)[0].Code }, wire.ErrObjectNotFound},
		{"m keeps its memory replica, loses its disk copy", func(c *Core) any {
			info, ok := c.QueryKey("m")
			return ok && info.Disk == "" && len(info.Replicas) == 1
		}, true},
		{"k no longer waits for a disk copy", func(c *Core) any {
			return c.waitsForDisk(c.shardOf("k").objects["k"])
		}, false},
		{"a new object on a's segment is not queued for the tier", func(c *Core) any {
			put(t, c, "k2", 10, wire.ReplicaConfig{Preferred: []string{"seg"}})
			return c.OffloadPending("a")
		}, false},
		{"the heartbeat hands a nothing", func(c *Core) any {
			keys, _, drop := c.OffloadHeartbeat("a", "dir-a", 10)
			return len(keys) + len(drop)
		}, 0},
		{"a late copy from a is refused", func(c *Core) any { return notify(c, "a", 100, "k") }, []wire.Code{wire.ErrUnableOffload}},
		{"so is a re-registration", func(c *Core) any {
			return c.RecoverDisk("a", "ep-a", "dir-a", []string{"d"}, []uint64{10})
		}, []wire.Code{wire.ErrUnableOffload}},
		{"a remount of a's segment does not announce the tier", func(c *Core) any {
			mountTier(t, c, "a", "seg2", 1<<20)
			put(t, c, "k3", 10, wire.ReplicaConfig{Preferred: []string{"seg2"}})
			return c.OffloadPending("a")
		}, false},
		{"asking again is fine", func(c *Core) any { return c.UnmountLocalDisk("a") }, nil},
		{"the directory's next holder finds d stale", func(c *Core) any {
			return c.RecoverDisk("a2", "ep-a2", "dir-a", []string{"d"}, []uint64{10})
		}, []wire.Code{wire.ErrObjectAlreadyExists}},
	}
	c, _ := offloadCore(t, false)
	for i, s := range steps {
		got := s.do(c)
		if err, ok := got.(error); ok || got == nil {
			got = wire.CodeOf(err)
			if s.want == nil {
				s.want = wire.OK
			}
		}
		if !equalAny(got, s.want) {
			t.Fatalf("step %d (%s): got %v, want %v", i, s.what, got, s.want)
		}
	}
}

func equalAny(a, b any) bool {
	switch x := a.(type) {
	case []string:
		y, ok := b.([]string)
		return ok && slices.Equal(x, y)
	case []wire.Code:
		y, ok := b.([]wire.Code)
		return ok && slices.Equal(x, y)
	}
	return a == b
}

// A master without the SSD tier answers -1300, as Mooncake's.
func TestUnmountLocalDiskWithoutOffload(t *testing.T) {
	c, _ := newTestCore(t)
	if err := c.UnmountLocalDisk("a"); wire.CodeOf(err) != wire.ErrUnableOffload {
		t.Fatalf("got %v, want -1300", err)
	}
}
