package ssdtier_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/gostore/gostore/gostore/client/clienttest"
	"github.com/gostore/gostore/gostore/internal/testkit"
	"github.com/gostore/gostore/gostore/wire"
)

// unmount_local_disk_segment through a real client: the objects that lived
// only on the tier are gone, those in memory stay readable, the call waits
// its grace period, and the tier takes no more offloads, so the pool evicts
// without waiting for disk copies that will never come.
func TestUnmountLocalDisk(t *testing.T) {
	m := startOffloadMaster(t)
	holder := newTierClient(t, m, 2<<20, t.TempDir(), tierEnv(nil))
	writer := clienttest.New(t, m, 0)
	const n, obj = 40, 128 << 10 // 5 MiB through a 2 MiB segment
	for i := range n {
		putRetrying(t, writer, fmt.Sprint("u", i), testkit.Pattern(uint64(i), obj))
	}
	testkit.WaitFor(t, "every object on disk", func() bool {
		st, _ := holder.SSDStats()
		return st.Offloaded >= n
	})
	inMemory := func(key string) bool {
		res, err := holder.SSD().Peek([]string{key})
		return err == nil && res[0].Code == wire.OK && len(res[0].Replicas) > 0
	}
	var mem, diskOnly []string
	for i := range n {
		if k := fmt.Sprint("u", i); inMemory(k) {
			mem = append(mem, k)
		} else {
			diskOnly = append(diskOnly, k)
		}
	}
	if len(mem) == 0 || len(diskOnly) == 0 {
		t.Fatalf("setup: %d objects in memory, %d on disk only", len(mem), len(diskOnly))
	}
	start := time.Now()
	if err := holder.Segments().UnmountLocalDisk(300 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < 300*time.Millisecond {
		t.Fatalf("returned after %v, before the grace period", el)
	}
	for _, k := range diskOnly {
		if got := writer.Keys().GetSize(k); got != int64(wire.ErrObjectNotFound) {
			t.Fatalf("%s lived only on the tier and is still there: %d", k, got)
		}
	}
	for _, k := range mem {
		res, _ := holder.SSD().Peek([]string{k})
		if res[0].Disk != "" {
			t.Fatalf("%s still has a disk copy: %+v", k, res[0])
		}
	}
	// More than the pool holds again: with no tier to wait for, eviction
	// makes room (the old objects go) and nothing more is offloaded.
	before, _ := holder.SSDStats()
	for i := range n {
		putRetrying(t, writer, fmt.Sprint("v", i), testkit.Pattern(uint64(1000+i), obj))
	}
	mustGet(t, writer, fmt.Sprint("v", n-1), testkit.Pattern(uint64(1000+n-1), obj))
	if after, _ := holder.SSDStats(); after.Offloaded != before.Offloaded {
		t.Fatalf("the unmounted tier offloaded %d more objects", after.Offloaded-before.Offloaded)
	}
	if _, err := holder.Offload([]string{"v0"}, []uint64{obj}); wire.CodeOf(err) != wire.ErrInternal {
		t.Fatalf("an explicit offload on the unmounted tier: %v", err)
	}
	if err := holder.Segments().UnmountLocalDisk(0); err != nil {
		t.Fatalf("second unmount: %v", err)
	}
	// A client without a tier has nothing to unmount.
	if err := writer.Segments().UnmountLocalDisk(time.Hour); err != nil {
		t.Fatalf("client without a tier: %v", err)
	}
}
