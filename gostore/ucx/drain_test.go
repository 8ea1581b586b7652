package ucx

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gostore/gostore/gostore/wire"
)

// Forget while batches of small gets are in flight on the endpoint: the
// owner answers each get as it reads its request, so an endpoint closed
// under them used to leave the owner replying into a reset socket, which
// UCX 1.13 turns into an abort of the owner's process
// (ucp_request.inl:346). Every op moves its bytes or fails with
// TRANSFER_FAIL, and the process (owner and reader) lives; run in a child
// process so that an abort fails the test with UCX's message.
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
