// procmem_test.go covers parts in another process's memory (DevicePart.Pid)
// on every route. The "other process" is this test's own: process_vm_readv
// and writev take the same path in the kernel for any process one may
// trace; tests/test_standalone.py moves bytes between real processes.

package transfer

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sync"
	"testing"

	"github.com/gostore/gostore/gostore/wire"
)

// processParts turns parts k of bufs into parts in "another process" (this
// one, by address): the op's Bufs get nil placeholders there.
func processParts(bufs [][]byte, k ...int) ([][]byte, []DevicePart) {
	out := append([][]byte(nil), bufs...)
	var dev []DevicePart
	for _, i := range k {
		dev = append(dev, DevicePart{Index: i, Ptr: addrOf(bufs[i]), Size: uint64(len(bufs[i])), Pid: os.Getpid()})
		out[i] = nil
	}
	return out, dev
}

// Writes from and reads into another process's memory, mixed with host
// parts, against a same-host segment, a TCP peer (through plain bounces:
// no driver, or one that cannot pin) and a GPU segment (through the
// host), bytes verified. A part of 5 MiB is split across threads.
func TestProcessPartsOnEveryRoute(t *testing.T) {
	seg := localSegment(t, t.Name(), 16<<20)
	dev := &fakeDevice{mu: new(sync.Mutex), mem: make([]byte, 16<<20)}
	devPeer := newDevicePeer(t, dev)
	devPeer.HostID, devPeer.IPC = HostID(), []byte("handle")
	mapped := &fakeDevice{mu: dev.mu, mem: dev.mem}
	for _, tc := range []struct {
		name   string
		peer   Peer
		driver Driver
		route  string
	}{
		{"shm", shmPeer(seg), nil, "shm"},
		{"tcp", newTCPPeer(t, 16<<20).peer, nil, "tcp"},
		// The client's driver on a host without CUDA refuses to pin:
		// the bounces are plain memory all the same.
		{"tcp, a driver that cannot pin", newTCPPeer(t, 16<<20).peer, &fakeDriver{refuseNewPinned: true}, "tcp"},
		{"gpu segment", devPeer, &fakeDriver{open: func(Peer) (DeviceMemory, error) { return mapped, nil }}, "ipc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := NewEngine(Options{Log: quietLog(), Driver: tc.driver})
			defer e.Close()
			if got := e.Route(tc.peer).String(); got != tc.route {
				t.Fatalf("route %s, want %s", got, tc.route)
			}
			v := pattern(11, 5<<20+4096+77)
			bufs, parts := processParts(scatter(v, 4096, 5<<20), 0, 2)
			mustOK(t, grantDo(e, context.Background(), []Op{{Peer: tc.peer, Offset: 333, Bufs: bufs, Device: parts, Write: true}}))
			back := make([]byte, len(v))
			bufs, parts = processParts(scatter(back, 77, 4096), 1, 2)
			mustOK(t, grantDo(e, context.Background(), []Op{{Peer: tc.peer, Offset: 333, Bufs: bufs, Device: parts}}))
			if d := firstDiff(back, v); d != "" {
				t.Fatal(d)
			}
		})
	}
}

// A part the kernel cannot reach (an unmapped address, a process that is
// not there) fails its op with ErrTransferFail, a failed write leaves the
// segment as it was, and the other ops of the batch are done.
func TestProcessPartThatCannotBeReached(t *testing.T) {
	seg := localSegment(t, t.Name(), 1<<20)
	peer := shmPeer(seg)
	e := NewEngine(Options{Log: quietLog()})
	defer e.Close()
	v := pattern(3, 8192)
	mustOK(t, grantDo(e, context.Background(), []Op{{Peer: peer, Offset: 0, Bufs: [][]byte{v}, Write: true}}))
	unmapped := []DevicePart{{Index: 0, Ptr: 4096, Size: 4096, Pid: os.Getpid()}}
	gone := []DevicePart{{Index: 0, Ptr: addrOf(v), Size: 4096, Pid: 1 << 30}}
	good := make([]byte, 8192)
	errs := grantDo(e, context.Background(), []Op{
		{Peer: peer, Offset: 0, Bufs: [][]byte{nil, make([]byte, 4096)}, Device: unmapped},
		{Peer: peer, Offset: 0, Bufs: [][]byte{nil}, Device: gone, Write: true},
		{Peer: peer, Offset: 0, Bufs: [][]byte{good}},
	})
	wantCode(t, errs[0], wire.ErrTransferFail)
	wantCode(t, errs[1], wire.ErrTransferFail)
	if errs[2] != nil || firstDiff(good, v) != "" {
		t.Fatalf("the good op: %v, %s", errs[2], firstDiff(good, v))
	}
	check := make([]byte, 8192)
	mustOK(t, grantDo(e, context.Background(), []Op{{Peer: peer, Offset: 0, Bufs: [][]byte{check}}}))
	if d := firstDiff(check, v); d != "" {
		t.Fatalf("a failed write changed the segment: %s", d)
	}
}

// A batch of small ops on a mapped route is copied by a goroutine per core
// (copyWorkers): every op lands, host parts and parts in another process
// alike, across two segments, and reads back whole (-race checks the
// sharing of errs and the fallback list).
func TestSmallOpsOfABatchCopiedInParallel(t *testing.T) {
	for _, tc := range []struct {
		sizes []int
		want  int
	}{
		{[]int{1 << 20}, 1},                            // one op
		{[]int{4 << 10, 4 << 10, 4 << 10}, 1},          // too little to share
		{[]int{1 << 20, 1 << 20, 1 << 20}, 1},          // one share (parallelCopyMin) in all
		{[]int{1 << 20, 1 << 20, 1 << 20, 1 << 20}, 2}, // several MiB of small ops
		{[]int{1 << 20, 4 << 20, 1 << 20}, 1},          // a large op splits itself
		{[]int{2 << 20, 2 << 20, 2<<20 - 1}, 2},        // just under the split
	} {
		ops := make([]Op, len(tc.sizes))
		idx := make([]int, len(tc.sizes))
		for i, n := range tc.sizes {
			ops[i], idx[i] = Op{Bufs: [][]byte{make([]byte, n)}}, i
		}
		if got := copyWorkers(ops, idx); got != min(tc.want, runtime.GOMAXPROCS(0)) {
			t.Errorf("sizes %v: %d workers, want %d", tc.sizes, got, tc.want)
		}
	}
	segs := make([]Peer, 2)
	for k := range segs {
		seg := localSegment(t, fmt.Sprintf("%s-%d", t.Name(), k), 32<<20)
		segs[k] = shmPeer(seg)
	}
	e := NewEngine(Options{Log: quietLog()})
	defer e.Close()
	const n, size = 24, 1<<20 + 3
	var writes, reads []Op
	want := make([][]byte, n)
	got := make([][]byte, n)
	for i := range n {
		want[i], got[i] = pattern(uint64(i), size), make([]byte, size)
		peer, off := segs[i%2], uint64(i/2)*size
		w, r := [][]byte{want[i]}, [][]byte{got[i]}
		var wd, rd []DevicePart
		if i%3 == 0 {
			w, wd = processParts(w, 0)
			r, rd = processParts(r, 0)
		}
		writes = append(writes, Op{Peer: peer, Offset: off, Bufs: w, Device: wd, Write: true})
		reads = append(reads, Op{Peer: peer, Offset: off, Bufs: r, Device: rd})
	}
	mustOK(t, grantDo(e, context.Background(), writes))
	mustOK(t, grantDo(e, context.Background(), reads))
	for i := range n {
		if d := firstDiff(got[i], want[i]); d != "" {
			t.Fatalf("op %d: %s", i, d)
		}
	}
}
