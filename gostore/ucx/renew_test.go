package ucx

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"
)

// A same-host peer killed while it answers reads must not take a live peer
// with it: on UCX 1.13's shared memory a sender killed between reserving a
// slot of the initiator's receive FIFO and marking it written blocks that
// FIFO for every later sender, so without the worker's renewal every read
// of the live peer c stalled past PeerStallBound (about half the runs).
// c is read throughout, by one goroutine while b dies and is given up on,
// and after: every read returns c's bytes.
func TestLivePeerAfterAnotherDied(t *testing.T) {
	for _, tls := range []string{"posix", "cma,posix,self"} {
		t.Run(tls, func(t *testing.T) {
			needUCX(t)
			b, c := startPeer(t, tls), startPeer(t, tls)
			w := newInitiator(t, tls)
			want := make([]byte, peerSize)
			fill(want, peerSeed)

			read := func(p *peer, buf []byte, d time.Duration) error {
				ctx, cancel := context.WithTimeout(context.Background(), d)
				defer cancel()
				return w.Do(ctx, []Op{{Desc: p.desc, Parts: []Part{{Host: buf}}}})[0]
			}
			got := make([]byte, 16<<20)
			if err := read(c, got, time.Minute); err != nil || !bytes.Equal(got, want[:len(got)]) {
				t.Fatalf("c before the kill: %v", err)
			}
			// Readers of b, each until its first error.
			var wg sync.WaitGroup
			var mu sync.Mutex
			var reads int
			firstErr := make(chan error, 4)
			for g := 0; g < 4; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					buf := make([]byte, 16<<20)
					for {
						if err := read(b, buf, time.Hour); err != nil {
							firstErr <- err
							return
						}
						mu.Lock()
						reads++
						mu.Unlock()
					}
				}()
			}
			deadline := time.Now().Add(10 * time.Second)
			for {
				mu.Lock()
				n := reads
				mu.Unlock()
				if n >= 4 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("no reads of b before the kill")
				}
				time.Sleep(time.Millisecond)
			}
			// c's reader, through the kill until b's readers are done.
			bDone := make(chan struct{})
			cErr := make(chan error, 1)
			go func() {
				buf := make([]byte, 4<<20)
				for n := 0; ; n++ {
					select {
					case <-bDone:
						cErr <- nil
						return
					default:
					}
					if err := read(c, buf, 20*time.Second); err != nil {
						cErr <- fmt.Errorf("read %d of c during b's death: %w", n, err)
						return
					}
					if !bytes.Equal(buf, want[:len(buf)]) {
						cErr <- fmt.Errorf("read %d of c during b's death: bytes differ", n)
						return
					}
				}
			}()
			if err := b.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			killed := time.Now()
			wg.Wait()
			t.Logf("b's reads failed %v after the kill: %v", time.Since(killed), <-firstErr)
			close(bDone)
			if err := <-cErr; err != nil {
				t.Fatal(err)
			}

			for i := 0; i < 3; i++ {
				clear(got)
				start := time.Now()
				if err := read(c, got, 20*time.Second); err != nil {
					t.Fatalf("read %d of the live peer c after b died, %v: %v", i, time.Since(start), err)
				}
				if !bytes.Equal(got, want[:len(got)]) {
					t.Fatalf("read %d of c: bytes differ", i)
				}
			}
		})
	}
}
