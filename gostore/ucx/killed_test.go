package ucx

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// The reader process of TestReaderKilledMidGet: the test binary
// re-executed with envReader naming the transports and envReaderDesc the
// owner's desc (hex). It gets from the owner in a loop, batches of small
// gets and then of large ones, prints READY once a round brought the
// owner's bytes, and goes on until it is killed.
const (
	envReader     = "GOSTORE_UCX_TEST_READER"
	envReaderDesc = "GOSTORE_UCX_TEST_READER_DESC"
	// envKillRounds overrides how many readers each subtest kills (a
	// longer run to measure how often an owner dies).
	envKillRounds = "GOSTORE_UCX_TEST_KILL_ROUNDS"
	// envReaderSmall overrides how many small (1 KiB) gets each reader
	// round posts (the owner answers each from its handler).
	envReaderSmall = "GOSTORE_UCX_TEST_READER_SMALL"
)

func TestReaderChild(t *testing.T) {
	tls := os.Getenv(envReader)
	if tls == "" {
		t.Skip("the reader process of TestReaderKilledMidGet")
	}
	d, err := hex.DecodeString(os.Getenv(envReaderDesc))
	if err != nil {
		t.Fatal(err)
	}
	w := newInitiator(t, tls)
	want := make([]byte, peerSize)
	fill(want, peerSeed)
	var ops []Op
	small := 32
	if n, err := strconv.Atoi(os.Getenv(envReaderSmall)); err == nil && n > 0 && n <= 4096 {
		small = n
	}
	for i := 0; i < small; i++ { // small gets: the owner answers each at once
		ops = append(ops, Op{Desc: d, Offset: uint64(i) * (1 << 10), Parts: []Part{{Host: make([]byte, 1<<10)}}})
	}
	for i := 0; i < 4; i++ { // large ones: the owner's answer outlasts a socket buffer
		ops = append(ops, Op{Desc: d, Offset: uint64(i+1) * (8 << 20), Parts: []Part{{Host: make([]byte, 4<<20)}}})
	}
	for round := 0; ; round++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		errs := w.Do(ctx, ops)
		cancel()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d op %d: %v", round, i, err)
			}
			o := &ops[i]
			if got := o.Parts[0].Host; string(got) != string(want[o.Offset:o.Offset+uint64(len(got))]) {
				t.Fatalf("round %d op %d: bytes differ from the owner's", round, i)
			}
		}
		if round == 0 {
			fmt.Println("READY")
		}
	}
}

// A reader killed (SIGKILL) while its gets are in flight must not take the
// owner down: the owner process (a peer process exposing memory) lives
// through each kill. Over tcp it must also serve another reader the right
// bytes after each. Over tcp the owner answers gets in software, and UCX
// aborts it when an answer meets the dead reader's reset connection
// (ucp_request.inl:346): the window is narrow, and nothing on the owner's
// side closes it (ucx.LimitReaderDeath, docs/ucx.md "Known limits"), so a
// pass here says the owner survived these kills, not that it always will,
// and that abort skips the test (naming the limit) rather than failing
// it: it is UCX's, and CI can do nothing about it; any other death, or
// wrong bytes, fails.
// Over shared memory the owner's answer cannot fail, but a reader killed
// mid-send can block the owner's exposure (the receive-queue limit in
// docs/ucx.md): that is logged, and a fresh owner is started.
func TestReaderKilledMidGet(t *testing.T) {
	for _, tc := range []struct {
		tls    string
		rounds int // each starts a reader process: ~5 s under -race on a busy 2-core box
	}{{"tcp", 2}, {"posix,sysv,self", 1}, {"cma,posix,self", 1}} {
		tls, rounds := tc.tls, tc.rounds
		if n, err := strconv.Atoi(os.Getenv(envKillRounds)); err == nil && n > 0 {
			rounds = n
		}
		t.Run(tls, func(t *testing.T) {
			needUCX(t)
			owner := startPeer(t, tls)
			w := newInitiator(t, tls)
			rnd := rand.New(rand.NewSource(time.Now().UnixNano()))
			blocked := 0
			for round := 0; round < rounds; round++ {
				killReader(t, tls, owner, time.Duration(rnd.Intn(3000))*time.Microsecond)
				err := readPeer(t, w, owner, 30*time.Second)
				if !alive(owner) || ucx113Abort.MatchString(owner.stderr.String()) {
					if tls == "tcp" && readerDeathAbort.MatchString(owner.stderr.String()) {
						t.Skipf("round %d: UCX aborted the owner as its reader died mid-get over tcp: the known limit ucx.LimitReaderDeath (docs/ucx.md, Known limits), not a gostore defect:\n%s", round, owner.stderr.String())
					}
					t.Fatalf("round %d: the owner died when its reader was killed mid-get:\n%s", round, owner.stderr.String())
				}
				if err == nil {
					continue
				}
				if tls == "tcp" {
					t.Fatalf("round %d: the owner does not serve after its reader was killed mid-get: %v\n%s", round, err, owner.stderr.String())
				}
				blocked++
				t.Logf("round %d: the owner lives but its exposure is blocked (a reader killed mid-send over shared memory; docs/ucx.md, Known limits): %v", round, err)
				w.Forget(owner.desc)
				owner = startPeer(t, tls)
			}
			t.Logf("%d readers killed mid-get over %s: the owner lived through every kill; its exposure was blocked after %d", rounds, tls, blocked)
		})
	}
}

// readerDeathAbort is UCX's abort of an owner whose answer to a get met
// the reset connection of a reader that died (ucx.LimitReaderDeath).
var readerDeathAbort = regexp.MustCompile(`ucp_request\.inl:\d+ +Fatal: unexpected error: Endpoint timeout`)

// killReader starts a reader process against owner, waits until its gets
// brought the owner's bytes once (it goes on getting), lets it run for
// after, and kills it with SIGKILL.
func killReader(t *testing.T, tls string, owner *peer, after time.Duration) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestReaderChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), envReader+"="+tls, envReaderDesc+"="+hex.EncodeToString(owner.desc))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if sc.Text() == "READY" {
			time.Sleep(after)
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("the reader ended before its first round: %v", cmd.Wait())
}

// alive reports whether p's process still runs: not exited, and not a
// zombie waiting to be reaped (which a signal 0 cannot tell).
func alive(p *peer) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return false
	}
	// The state follows the command name's closing parenthesis.
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] != 'Z' && b[i+2] != 'X'
}
