package ucx

import (
	"bytes"
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/gostore/gostore/gostore/wire"
)

// Forget while batches of small gets are in flight on the endpoint: the
// owner answers each get as it reads its request. Every op moves its
// bytes or fails with TRANSFER_FAIL, and the process (owner and reader)
// lives; run in a child process so that an abort fails the test with
// UCX's message. (The code before CloseDrainBound passed this too: a
// Forget keeps the reader's UCP worker, which takes the owner's late
// answers; TestCloseWithGetsInFlight is the one that destroys it.)
func TestForgetWithSmallGetsInFlight(t *testing.T) {
	if !inChild(t) {
		return
	}
	const (
		readers = 6
		batch   = 32
		opSize  = 16 << 10
	)
	r := newRig(t, "tcp", readers*batch*opSize)
	fill(r.mem, 23)
	d := r.x.Desc()
	stop := make(chan struct{})
	done := make(chan error, readers)
	moved := make(chan int, readers)
	for g := 0; g < readers; g++ {
		go func(g int) {
			bufs := make([][]byte, batch)
			ops := make([]Op, batch)
			for i := range ops {
				bufs[i] = make([]byte, opSize)
				ops[i] = Op{Desc: d, Offset: uint64((g*batch + i) * opSize), Parts: []Part{{Host: bufs[i]}}}
			}
			n := 0
			for {
				select {
				case <-stop:
					moved <- n
					done <- nil
					return
				default:
				}
				for i := range bufs {
					clear(bufs[i])
				}
				for i, err := range doAll(r.w, ops) {
					if err != nil && wire.CodeOf(err) != wire.ErrTransferFail {
						done <- err
						return
					}
					off := ops[i].Offset
					if err == nil {
						if !bytes.Equal(bufs[i], r.mem[off:off+opSize]) {
							done <- fmt.Errorf("reader %d op %d: wrong bytes", g, i)
							return
						}
						n++
					}
				}
			}
		}(g)
	}
	deadline := time.Now().Add(2 * time.Second)
	forgets := 0
	for time.Now().Before(deadline) {
		r.w.Forget(d)
		forgets++
		time.Sleep(500 * time.Microsecond)
	}
	close(stop)
	total := 0
	for g := 0; g < readers; g++ {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	for g := 0; g < readers; g++ {
		total += <-moved
	}
	t.Logf("%d Forgets, %d gets of %d KiB moved their bytes", forgets, total, opSize>>10)
	buf := make([]byte, 4096)
	if err := one(r.w, Op{Desc: d, Parts: []Part{{Host: buf}}}); err != nil || !bytes.Equal(buf, r.mem[:4096]) {
		t.Fatalf("after the Forgets: %v", err)
	}
}

func doAll(w *Worker, ops []Op) []error {
	ctx, cancel := contextMinute()
	defer cancel()
	return w.Do(ctx, ops)
}

func contextMinute() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), time.Minute)
}

// A Worker closed while its gets are in flight, again and again: Close
// used to force-close their endpoint and destroy the UCP worker at once,
// while the owner (here, in this process) was still sending the gets'
// bytes back into the worker's now closed connection, which UCX 1.13
// turns into an abort of the owner's process (ucp_request.inl:346). Close
// now waits for the requests (within CloseDrainBound) before it destroys
// anything. Every op moves its bytes or fails with TRANSFER_FAIL, and the
// process lives; run in a child process so that an abort fails the test
// with UCX's message.
func TestCloseWithGetsInFlight(t *testing.T) {
	if !inChild(t) {
		return
	}
	const (
		rounds = 40
		gets   = 8
		opSize = 1 << 20
	)
	r := newRig(t, "tcp", gets*opSize)
	fill(r.mem, 29)
	d := r.x.Desc()
	moved := 0
	for round := 0; round < rounds; round++ {
		w, err := r.ctx.NewWorker()
		if err != nil {
			t.Fatal(err)
		}
		bufs := make([][]byte, gets)
		ops := make([]Op, gets)
		for i := range ops {
			bufs[i] = make([]byte, opSize)
			ops[i] = Op{Desc: d, Offset: uint64(i * opSize), Parts: []Part{{Host: bufs[i]}}}
		}
		ctx, cancel := contextMinute()
		b := w.Begin(ctx, ops)
		closed := make(chan struct{})
		go func() { w.Close(); close(closed) }()
		errs := b.Wait()
		cancel()
		<-closed
		for i, err := range errs {
			if err != nil && wire.CodeOf(err) != wire.ErrTransferFail {
				t.Fatalf("round %d op %d: %v", round, i, err)
			}
			if err == nil {
				if !bytes.Equal(bufs[i], r.mem[ops[i].Offset:ops[i].Offset+opSize]) {
					t.Fatalf("round %d op %d: wrong bytes", round, i)
				}
				moved++
			}
		}
	}
	t.Logf("%d rounds of %d gets of %d KiB, each Worker closed right after Begin: %d moved their bytes", rounds, gets, opSize>>10, moved)
	buf := make([]byte, 4096)
	if err := one(r.w, Op{Desc: d, Parts: []Part{{Host: buf}}}); err != nil || !bytes.Equal(buf, r.mem[:4096]) {
		t.Fatalf("after the Closes: %v", err)
	}
}

// One Do's ctx end does not cut short another Do's ops on the same
// endpoint: the cancelled Do waits for its own requests, which end here
// (the owner answers them), and leaves the endpoint as it is; the other
// Do's large get, held up past CloseDrainBound by its owner stopped,
// brings the owner's bytes once the owner runs again. The cancelled Do
// used to drop the endpoint, whose force close CloseDrainBound later
// cancelled the other Do's get.
func TestCancelSparesOtherCallsOps(t *testing.T) {
	needUCX(t)
	p := startPeer(t, "tcp")
	w := newInitiator(t, "tcp")
	if err := readPeer(t, w, p, time.Minute); err != nil { // connected, canary read
		t.Fatal(err)
	}
	cont := func() {
		if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
	}
	stopPeer(t, p)
	defer p.cmd.Process.Signal(syscall.SIGCONT)

	// a: a small get whose ctx ends while the stopped owner holds it.
	actx, acancel := context.WithCancel(context.Background())
	abuf := make([]byte, 4096)
	a := w.Begin(actx, []Op{{Desc: p.desc, Offset: 4096, Parts: []Part{{Host: abuf}}}})
	// b: a large get behind it on the same endpoint, with a minute.
	bctx, bcancel := contextMinute()
	defer bcancel()
	bbuf := make([]byte, peerSize-(8<<20))
	b := w.Begin(bctx, []Op{{Desc: p.desc, Offset: 8 << 20, Parts: []Part{{Host: bbuf}}}})
	bdone := make(chan error, 1)
	go func() { bdone <- b.Wait()[0] }()
	acancel()
	adone := make(chan error, 1)
	go func() { adone <- a.Wait()[0] }()
	// Give a's Wait a moment to see its ctx end with its get in flight
	// (its error says whether it did), then let the owner answer a's get
	// and stop it again, in b's.
	time.Sleep(100 * time.Millisecond)
	cont()
	aerr := <-adone
	stopPeer(t, p)
	if aerr == nil {
		t.Skip("a's get moved before its Wait saw the ctx end (the owner ran first): nothing cancelled")
	}
	if wire.CodeOf(aerr) != wire.ErrTransferFail {
		t.Fatalf("a's get: %v", aerr)
	}
	select {
	case err := <-bdone:
		t.Skipf("b's get ended (%v) before the owner was stopped again: nothing to spare", err)
	default:
	}
	// Twice the bound: the old code's force close came once.
	time.Sleep(2 * CloseDrainBound)
	cont()
	if err := <-bdone; err != nil {
		t.Fatalf("b's get, with its ctx live, after a's ctx ended: %v", err)
	}
	want := make([]byte, peerSize)
	fill(want, peerSeed)
	if !bytes.Equal(bbuf, want[8<<20:]) {
		t.Fatal("b's get: bytes differ from the owner's")
	}
}

// A Do whose ctx ends while its owner is stopped returns TRANSFER_FAIL
// within about CloseDrainBound (its endpoint is force-closed then, which
// cancels its requests): not at the owner's return. The owner, run again,
// answers the cancelled get late: its bytes must not reach the caller's
// buffer, which Do returned. The owner then serves the next Do the right
// bytes and lives.
func TestCancelledDoAgainstStoppedPeer(t *testing.T) {
	needUCX(t)
	p := startPeer(t, "tcp")
	w := newInitiator(t, "tcp")
	if err := readPeer(t, w, p, time.Minute); err != nil {
		t.Fatal(err)
	}
	stopPeer(t, p)
	defer p.cmd.Process.Signal(syscall.SIGCONT)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	buf := make([]byte, 4<<20)
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- w.Do(ctx, []Op{{Desc: p.desc, Parts: []Part{{Host: buf}}}})[0] }()
	var err error
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		// The deferred SIGCONT lets the Do end before the worker's Close.
		t.Fatalf("Do not returned %v after its start (ctx 50 ms, CloseDrainBound %v)", time.Since(start), CloseDrainBound)
	}
	t.Logf("Do with a 50 ms ctx against the stopped owner: %v after %v", err, time.Since(start))
	if wire.CodeOf(err) != wire.ErrTransferFail {
		t.Fatalf("code %v: %v", wire.CodeOf(err), err)
	}
	marked := bytes.Repeat([]byte{0x5A}, len(buf))
	copy(buf, marked)
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	// The next read progresses the worker after the owner's late answer.
	if err := readPeer(t, w, p, time.Minute); err != nil || !alive(p) || ucx113Abort.MatchString(p.stderr.String()) {
		t.Fatalf("after the owner ran again: %v (owner alive: %v)\n%s", err, alive(p), p.stderr.String())
	}
	if !bytes.Equal(buf, marked) {
		t.Fatal("the cancelled get's buffer was written after Do returned")
	}
}
