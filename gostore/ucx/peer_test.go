package ucx

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gostore/gostore/gostore/wire"
)

// The peer process: the test binary re-executed with envPeer naming the
// transports; it exposes peerSize bytes filled with fill(peerSeed), prints
// its desc, then answers "check OFF LEN SEED" lines until stdin closes.
const (
	envPeer  = "GOSTORE_UCX_TEST_PEER"
	peerSize = 64 << 20
	peerSeed = 42
)

func TestPeerChild(t *testing.T) {
	tls := os.Getenv(envPeer)
	if tls == "" {
		t.Skip("the peer process of TestAcrossProcesses")
	}
	c, err := NewContext(ContextOptions{Transports: tls})
	if err != nil {
		t.Fatal(err)
	}
	mem := make([]byte, peerSize)
	fill(mem, peerSeed)
	x, err := c.Expose(uintptrOf(mem), peerSize, MemHost)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("DESC %s\n", hex.EncodeToString(x.Desc()))
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		var off, n, seed int64
		if _, err := fmt.Sscanf(in.Text(), "check %d %d %d", &off, &n, &seed); err != nil {
			fmt.Printf("bad request %q\n", in.Text())
			continue
		}
		want := make([]byte, n)
		fill(want, seed)
		fmt.Printf("check %v\n", bytes.Equal(mem[off:off+n], want))
	}
	x.Close()
	c.Close()
}

// peer is a running peer process.
type peer struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Scanner
	desc   []byte
	stderr lockedBuffer // what it printed to stderr (also on the test's)
}

// lockedBuffer is a bytes.Buffer that a child's stderr copier writes while
// the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startPeer starts a peer process serving tls; env adds to the
// environment it inherits (the last value of a name wins).
func startPeer(t *testing.T, tls string, env ...string) *peer {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestPeerChild$", "-test.count=1")
	cmd.Env = append(append(os.Environ(), envPeer+"="+tls), env...)
	p := &peer{cmd: cmd}
	cmd.Stderr = io.MultiWriter(os.Stderr, &p.stderr)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.in, p.out = in, bufio.NewScanner(out)
	t.Cleanup(func() {
		p.in.Close()
		p.cmd.Process.Kill()
		p.cmd.Wait()
	})
	for p.out.Scan() {
		if hx, ok := strings.CutPrefix(p.out.Text(), "DESC "); ok {
			if p.desc, err = hex.DecodeString(hx); err != nil {
				t.Fatal(err)
			}
			return p
		}
	}
	t.Fatalf("peer printed no desc: %v", p.out.Err())
	return nil
}

// check asks the peer whether its memory at off holds fill(n, seed).
func (p *peer) check(t *testing.T, off, n, seed int64) {
	t.Helper()
	fmt.Fprintf(p.in, "check %d %d %d\n", off, n, seed)
	if !p.out.Scan() || p.out.Text() != "check true" {
		t.Fatalf("peer's memory at %d+%d: %q", off, n, p.out.Text())
	}
}

// Another process's exposed memory: a get returns its bytes and a put
// lands in it.
func TestAcrossProcesses(t *testing.T) {
	for _, tls := range []string{"tcp", "posix", "cma,tcp"} {
		t.Run(tls, func(t *testing.T) {
			needUCX(t)
			p := startPeer(t, tls)
			w := newInitiator(t, tls)

			want := make([]byte, peerSize)
			fill(want, peerSeed)
			got := make([]byte, 16<<20)
			if err := one(w, Op{Desc: p.desc, Offset: 1 << 20, Parts: scatter(got, 3)}); err != nil {
				t.Fatalf("get: %v", err)
			}
			if !bytes.Equal(got, want[1<<20:17<<20]) {
				t.Fatal("get: bytes differ from the peer's")
			}
			src := make([]byte, 4<<20)
			fill(src, 43)
			if err := one(w, Op{Desc: p.desc, Offset: 8 << 20, Parts: scatter(src, 2), Write: true}); err != nil {
				t.Fatalf("put: %v", err)
			}
			p.check(t, 8<<20, 4<<20, 43)
		})
	}
}

// A peer killed mid-transfer: Do returns an error within a bound (tcp
// detects the dead peer; shared memory in UCX 1.13 cannot, so there the
// op's deadline or, without a near one, PeerStallBound is the bound), and
// the worker stays usable and closes.
func TestPeerKilled(t *testing.T) {
	for _, tc := range []struct {
		name, tls string
		deadline  time.Duration // of each Do
		bound     time.Duration // from the kill to Do's error
	}{
		{"tcp", "tcp", time.Minute, 10 * time.Second},
		{"posix", "posix", 3 * time.Second, 10 * time.Second},
		{"posix_no_deadline", "posix", time.Hour, PeerStallBound + 7*time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			needUCX(t)
			p := startPeer(t, tc.tls)
			w := newInitiator(t, tc.tls)

			bufs := make([][]byte, 4)
			for i := range bufs {
				bufs[i] = make([]byte, 16<<20)
			}
			round := func() error {
				ops := make([]Op, len(bufs))
				for i := range ops {
					ops[i] = Op{Desc: p.desc, Offset: uint64(i) * (16 << 20), Parts: []Part{{Host: bufs[i]}}}
				}
				ctx, cancel := context.WithTimeout(context.Background(), tc.deadline)
				defer cancel()
				for _, err := range w.Do(ctx, ops) {
					if err != nil {
						return err
					}
				}
				return nil
			}
			if err := round(); err != nil {
				t.Fatalf("before the kill: %v", err)
			}
			failed := make(chan error, 1)
			started := make(chan struct{})
			go func() {
				close(started)
				for {
					if err := round(); err != nil {
						failed <- err
						return
					}
				}
			}()
			<-started
			if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			killed := time.Now()
			select {
			case err := <-failed:
				t.Logf("after %v: %v", time.Since(killed), err)
				if wire.CodeOf(err) != wire.ErrTransferFail {
					t.Fatalf("code %v", wire.CodeOf(err))
				}
			case <-time.After(tc.bound):
				t.Fatalf("no error %v after the peer was killed", tc.bound)
			}
			w.Forget(p.desc)
		})
	}
}

// Begin posts and returns without waiting for the peer: with the peer
// stopped (SIGSTOP) a get's Begin returns, and its Wait brings the peer's
// bytes once the peer runs again. (The client overlaps such a get with
// its question to the master.)
func TestBeginDoesNotWaitForThePeer(t *testing.T) {
	needUCX(t)
	p := startPeer(t, "tcp")
	w := newInitiator(t, "tcp")
	if err := readPeer(t, w, p, time.Minute); err != nil { // connected, canary read
		t.Fatal(err)
	}
	stopPeer(t, p)
	cont := func() { p.cmd.Process.Signal(syscall.SIGCONT) }
	defer cont()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got := make([]byte, 4096)
	b := w.Begin(ctx, []Op{{Desc: p.desc, Offset: 8192, Parts: []Part{{Host: got}}}})
	// A Begin that waited for the stopped peer could only have returned
	// at ctx's end.
	waited := ctx.Err()
	cont()
	err := b.Wait()[0] // before any Fatal: the worker's Close waits for it
	if waited != nil {
		t.Fatalf("Begin returned only at its context's end (%v) with the peer stopped (Wait: %v)", waited, err)
	}
	if err != nil {
		t.Fatalf("Wait after the peer ran again: %v", err)
	}
	want := make([]byte, peerSize)
	fill(want, peerSeed)
	if !bytes.Equal(got, want[8192:8192+len(got)]) {
		t.Fatal("Wait returned other bytes than the peer's")
	}
}
