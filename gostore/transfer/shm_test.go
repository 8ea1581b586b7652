// shm_test.go tests the Engine's shared-memory path, its fallback to TCP and
// a peer segment owned by another process.

package transfer

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gostore/gostore/gostore/wire"
)

func TestShmWriteReadScatter(t *testing.T) {
	const size = 8 << 20
	seg := localSegment(t, "shm-peer", size)
	p := shmPeer(seg)
	e := NewEngine(Options{Log: quietLog()})
	defer e.Close()
	if e.Route(p).String() != "shm" {
		t.Fatalf("PathFor = %q, want shm", e.Route(p))
	}
	ctx := context.Background()
	type obj struct {
		off  uint64
		data []byte
		lens []int
	}
	objs := []obj{
		{0, pattern(10, 1), nil},
		{4096, pattern(11, 4096), []int{100, 3996}},
		{1 << 20, pattern(12, 1<<20+3), []int{65536, 7, 1 << 19}},
		{size - 3<<20, pattern(13, 3<<20), []int{1<<20 + 5}},
	}
	var ops []Op
	for _, o := range objs {
		ops = append(ops, Op{Peer: p, Offset: o.off, Bufs: scatter(o.data, o.lens...), Write: true})
	}
	mustOK(t, grantDo(e, ctx, ops))
	for i, o := range objs {
		if d := firstDiff(seg.Bytes()[o.off:o.off+uint64(len(o.data))], o.data); d != "" {
			t.Fatalf("object %d in segment: %s", i, d)
		}
	}
	ops = ops[:0]
	var dsts [][][]byte
	for _, o := range objs {
		dst := scatter(make([]byte, len(o.data)), append(o.lens, 12345)...)
		dsts = append(dsts, dst)
		ops = append(ops, Op{Peer: p, Offset: o.off, Bufs: dst})
	}
	mustOK(t, grantDo(e, ctx, ops))
	for i, o := range objs {
		if d := firstDiff(join(dsts[i]), o.data); d != "" {
			t.Fatalf("object %d read back: %s", i, d)
		}
	}

	// Out of range: -600, nothing written; for a peer whose size is known
	// and for one whose size is only known from the mapping.
	before := append([]byte(nil), seg.Bytes()[size-64:]...)
	unknown := p
	unknown.Size = 0
	for _, peer := range []Peer{p, unknown} {
		errs := grantDo(e, ctx, []Op{
			{Peer: peer, Offset: size - 10, Bufs: [][]byte{make([]byte, 5), make([]byte, 15)}, Write: true},
			{Peer: peer, Offset: ^uint64(0) - 2, Bufs: [][]byte{make([]byte, 8)}, Write: true},
			{Peer: peer, Offset: size, Bufs: [][]byte{make([]byte, 1)}},
		})
		for i, err := range errs {
			wantCode(t, err, wire.ErrInvalidParams)
			_ = i
		}
	}
	if d := firstDiff(seg.Bytes()[size-64:], before); d != "" {
		t.Fatalf("out-of-range write changed the segment: %s", d)
	}
}

// Many goroutines copy while another keeps forgetting the segment: copies
// must stay correct and never touch an unmapped range (that would crash).
// A transfer may fail as "forgotten" when it loses every race with Forget,
// which is allowed, but most must succeed.
func TestShmForgetWhileCopying(t *testing.T) {
	const size = 1 << 20
	seg := localSegment(t, "shm-forget", size)
	p := shmPeer(seg)
	e := NewEngine(Options{Log: quietLog()})
	defer e.Close()
	ctx := context.Background()
	var wg sync.WaitGroup
	stop := make(chan struct{})
	forgets := 0
	go func() {
		defer close(stop)
		for forgets = 0; forgets < 200; forgets++ {
			e.Forget(p.SegID)
			time.Sleep(200 * time.Microsecond)
		}
	}()
	const goroutines, iters = 8, 50
	errc := make(chan error, goroutines)
	var mu sync.Mutex
	ok := 0
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			off := uint64(g) * (size / goroutines)
			for it := 0; it < iters; it++ {
				data := pattern(uint64(g*1000+it), size/goroutines)
				errs := grantDo(e, ctx, []Op{{Peer: p, Offset: off, Bufs: scatter(data, 4096, 5000), Write: true}})
				if errs[0] != nil {
					if !strings.Contains(errs[0].Error(), "forgotten") {
						errc <- errs[0]
						return
					}
					continue
				}
				got := make([]byte, len(data))
				errs = grantDo(e, ctx, []Op{{Peer: p, Offset: off, Bufs: [][]byte{got}}})
				if errs[0] != nil {
					if !strings.Contains(errs[0].Error(), "forgotten") {
						errc <- errs[0]
						return
					}
					continue
				}
				if d := firstDiff(got, data); d != "" {
					errc <- fmt.Errorf("goroutine %d iteration %d: %s", g, it, d)
					return
				}
				mu.Lock()
				ok++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	<-stop
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if ok < goroutines*iters/2 {
		t.Fatalf("only %d of %d write+read rounds succeeded", ok, goroutines*iters)
	}
	t.Logf("%d of %d rounds succeeded across %d forgets", ok, goroutines*iters, forgets)
}

// A same-host peer whose memfd cannot be opened is reached over TCP, and the
// engine remembers it.
func TestShmFallbackToTCP(t *testing.T) {
	tp := newTCPPeer(t, 1<<20)
	p := tp.peer
	p.HostID = HostID()
	p.ShmPath = "/proc/self/fd/does-not-exist"
	e := NewEngine(Options{Log: quietLog()})
	defer e.Close()
	if e.Route(p).String() != "shm" {
		t.Fatalf("PathFor before = %q", e.Route(p))
	}
	data := pattern(3, 10000)
	mustOK(t, grantDo(e, context.Background(), []Op{{Peer: p, Offset: 777, Bufs: [][]byte{data}, Write: true}}))
	if d := firstDiff(tp.seg.Bytes()[777:777+10000], data); d != "" {
		t.Fatal(d)
	}
	if e.Route(p).String() != "tcp" {
		t.Fatalf("PathFor after failed mapping = %q, want tcp", e.Route(p))
	}
	e.Forget(p.SegID)
	if e.Route(p).String() != "shm" {
		t.Fatalf("PathFor after Forget = %q", e.Route(p))
	}
}

// One batch mixing a shared-memory peer and a TCP peer.
func TestMixedBatch(t *testing.T) {
	seg := localSegment(t, "mixed", 1<<20)
	sp := shmPeer(seg)
	tp := newTCPPeer(t, 1<<20)
	e := NewEngine(Options{Log: quietLog()})
	defer e.Close()
	a, b := pattern(4, 300000), pattern(5, 300001)
	mustOK(t, grantDo(e, context.Background(), []Op{
		{Peer: sp, Offset: 5, Bufs: scatter(a, 1000), Write: true},
		{Peer: tp.peer, Offset: 6, Bufs: scatter(b, 70000), Write: true},
	}))
	if d := firstDiff(seg.Bytes()[5:5+len(a)], a); d != "" {
		t.Fatal("shm:", d)
	}
	if d := firstDiff(tp.seg.Bytes()[6:6+len(b)], b); d != "" {
		t.Fatal("tcp:", d)
	}
}

const childEnv = "GOSTORE_TRANSFER_TEST_CHILD"

// TestCrossProcessShm maps a segment owned by another process (this test
// binary re-run as a child) through its /proc/<pid>/fd path.
func TestCrossProcessShm(t *testing.T) {
	const size = 2 << 20
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrossProcessChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	r := bufio.NewReader(stdout)
	var p Peer
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("child said nothing useful: %v", err)
		}
		if f := strings.Fields(line); len(f) == 4 && f[0] == "SEGMENT" {
			p = Peer{SegID: 1, HostID: f[1], ShmPath: f[2]}
			p.Size, _ = strconv.ParseUint(f[3], 10, 64)
			break
		}
	}
	e := NewEngine(Options{Log: quietLog()})
	defer e.Close()
	if e.Route(p).String() != "shm" {
		t.Fatalf("PathFor = %q (child host %q, ours %q)", e.Route(p), p.HostID, HostID())
	}
	got := make([]byte, size)
	mustOK(t, grantDo(e, context.Background(), []Op{{Peer: p, Offset: 0, Bufs: scatter(got, 1<<20)}}))
	if d := firstDiff(got, pattern(77, size)); d != "" {
		t.Fatalf("child's bytes: %s", d)
	}
	if e.Route(p).String() != "shm" {
		t.Fatal("fell back to TCP")
	}
	mustOK(t, grantDo(e, context.Background(), []Op{{Peer: p, Offset: 4096, Bufs: [][]byte{pattern(78, 8192)}, Write: true}}))
	fmt.Fprintln(stdin, "CHECK")
	line, err := r.ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "CHILD OK" {
		t.Fatalf("child: %q %v", line, err)
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	// The owner is gone: the cached mapping still works until Forget, and a
	// fresh mapping attempt fails and falls back to TCP (no address: -800).
	e.Forget(p.SegID)
	errs := grantDo(e, context.Background(), []Op{{Peer: p, Offset: 0, Bufs: [][]byte{got[:10]}}})
	wantCode(t, errs[0], wire.ErrTransferFail)
	if e.Route(p).String() != "tcp" {
		t.Fatal("dead owner's segment still reported as shm")
	}
}

// TestCrossProcessChild is the child of TestCrossProcessShm.
func TestCrossProcessChild(t *testing.T) {
	if os.Getenv(childEnv) != "1" {
		t.Skip("runs as the child of TestCrossProcessShm")
	}
	const size = 2 << 20
	seg := localSegment(t, "child", size)
	copy(seg.Bytes(), pattern(77, size))
	fmt.Printf("SEGMENT %s %s %d\n", HostID(), seg.ShmPath(), size)
	in := bufio.NewReader(os.Stdin)
	if line, _ := in.ReadString('\n'); strings.TrimSpace(line) != "CHECK" {
		t.Fatalf("parent said %q", line)
	}
	want := pattern(77, size)
	copy(want[4096:], pattern(78, 8192))
	if d := firstDiff(seg.Bytes(), want); d != "" {
		fmt.Printf("CHILD BAD %s\n", d)
		t.Fatal(d)
	}
	fmt.Println("CHILD OK")
	in.ReadString('\n') // until the parent closes stdin
}

func TestCopyParallelScatter(t *testing.T) {
	for _, layout := range [][]int{{6 << 20}, {1, 3<<20 + 5, 7, 2 << 20}, {5 << 20, 0, 1 << 20}} {
		total := 0
		for _, n := range layout {
			total += n
		}
		src := make([][]byte, len(layout))
		for i, n := range layout {
			src[i] = make([]byte, n)
			for j := range src[i] {
				src[i][j] = byte(i*31 + j*7)
			}
		}
		seg := make([]byte, total)
		copyParallel(seg, src, true, 3)
		pos := 0
		for i := range src {
			if !bytes.Equal(seg[pos:pos+len(src[i])], src[i]) {
				t.Fatalf("layout %v: write part %d differs", layout, i)
			}
			pos += len(src[i])
		}
		dst := make([][]byte, len(layout))
		for i, n := range layout {
			dst[i] = make([]byte, n)
		}
		copyParallel(seg, dst, false, 2)
		for i := range dst {
			if !bytes.Equal(dst[i], src[i]) {
				t.Fatalf("layout %v: read part %d differs", layout, i)
			}
		}
	}
}
