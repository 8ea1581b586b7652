// polled_test.go tests Polled on real loopback connections: a hot
// connection served by its poll, cold and alternating ones never polling,
// payloads that do not poll, the end of the stream, Close and deadlines during a poll,
// and the gate that bounds polling reads.

package blockconn

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// polledPair returns a Polled server end (spin, gate) and its client end.
func polledPair(t *testing.T, spin time.Duration, gate *SpinGate) (*Polled, net.Conn) {
	t.Helper()
	client, sc := loopback(t)
	p, err := NewPolled(sc, spin, gate)
	if err != nil {
		t.Fatal(err)
	}
	return p, client
}

// answeredHot makes p a hot connection that has just answered (one byte,
// read by its client c): its next read polls.
func answeredHot(p *Polled, c net.Conn) {
	p.streak = hot // as after requests that came at once
	p.Write([]byte("!"))
	io.ReadFull(c, make([]byte, 1))
}

// serveEcho answers each 8-byte request with its bytes reversed until the
// stream ends, then reports the read error.
func serveEcho(p *Polled) chan error {
	done := make(chan error, 1)
	go func() {
		var req [8]byte
		for {
			if _, err := io.ReadFull(p, req[:]); err != nil {
				done <- err
				return
			}
			var ans [8]byte
			for i := range req {
				ans[i] = req[7-i]
			}
			if _, err := p.Write(ans[:]); err != nil {
				done <- err
				return
			}
		}
	}()
	return done
}

// ask sends one request and checks its answer.
func ask(t *testing.T, c net.Conn, i int) {
	t.Helper()
	req := []byte{byte(i), 1, 2, 3, 4, 5, 6, byte(i >> 8)}
	if _, err := c.Write(req); err != nil {
		t.Fatal(err)
	}
	var ans [8]byte
	if _, err := io.ReadFull(c, ans[:]); err != nil {
		t.Fatal(err)
	}
	for k := range req {
		if ans[k] != req[7-k] {
			t.Fatalf("request %d: answer % x to % x", i, ans, req)
		}
	}
}

// A client asking in a loop is served by the poll: after the first three
// requests (the first answer has no gap to judge, the next two heat the
// connection) the reads poll, and with a spin of a second nearly all of
// them find their request while polling. The stream's end met while
// polling is io.EOF, as net.Conn says it.
func TestPolledServesAHotConnectionByPolling(t *testing.T) {
	gate := NewSpinGate(1)
	p, c := polledPair(t, time.Second, gate)
	done := serveEcho(p)
	const n = 200
	for i := range n {
		ask(t, c, i)
	}
	c.Close()
	if err := <-done; err != io.EOF {
		t.Fatalf("the end of the stream read as %v, want io.EOF", err)
	}
	polls, hits := gate.Counts()
	// A request later than the spin after its answer (a test descheduled
	// for a second) cools the connection for one read: most must still poll.
	if polls < n/2 || hits < polls-2 {
		t.Fatalf("%d requests: %d reads polled, %d served by the poll", n, polls, hits)
	}
}

// Requests that miss the spin are not polled for: a poll that would not be
// met is not repeated. Neither every request coming late, nor every other
// (a large read, then the note that ends it: half the polls would miss).
func TestPolledNeverPollsForRequestsThatMissTheSpin(t *testing.T) {
	const spin = 2 * time.Millisecond
	for name, late := range map[string]func(i int) bool{
		"every request late": func(int) bool { return true },
		"every other late":   func(i int) bool { return i%2 == 0 },
	} {
		gate := NewSpinGate(1)
		p, c := polledPair(t, spin, gate)
		serveEcho(p)
		for i := range 8 {
			ask(t, c, i)
			if late(i) {
				time.Sleep(5 * spin) // the gap under test, not a wait for an event
			}
		}
		if polls, _ := gate.Counts(); polls != 0 {
			t.Fatalf("%s (%v after a spin of %v): polled %d times", name, 5*spin, spin, polls)
		}
	}
}

// Only the first read after an answer polls: the payload that follows a
// header is read by the netpoller.
func TestPolledPayloadDoesNotPoll(t *testing.T) {
	gate := NewSpinGate(1)
	p, c := polledPair(t, time.Second, gate)
	answeredHot(p, c)
	got := make(chan []byte, 1)
	go func() {
		var hdr [4]byte
		io.ReadFull(p, hdr[:])
		payload := make([]byte, 3<<10)
		io.ReadFull(p, payload)
		got <- append(hdr[:], payload...)
	}()
	want := append([]byte("head"), bytes.Repeat([]byte{9}, 3<<10)...)
	c.Write(want[:4])
	for k := 0; k < 3; k++ {
		c.Write(want[4+k<<10 : 4+(k+1)<<10])
	}
	if b := <-got; !bytes.Equal(b, want) {
		t.Fatal("the payload read differs from the one sent")
	}
	if polls, _ := gate.Counts(); polls != 1 {
		t.Fatalf("a header and its payload: %d reads polled, want 1 (the header's)", polls)
	}
}

// The peer's end met while polling is one read of (0, io.EOF), as
// net.Conn says it: not a read of nothing that a caller would retry.
func TestPolledEndOfStreamWhilePolling(t *testing.T) {
	gate := NewSpinGate(1)
	p, c := polledPair(t, time.Second, gate)
	answeredHot(p, c)
	c.Close()
	if n, err := p.Read(make([]byte, 8)); n != 0 || err != io.EOF {
		t.Fatalf("the end of the stream read as (%d, %v), want (0, io.EOF)", n, err)
	}
	if polls, hits := gate.Counts(); polls != 1 || hits != 1 {
		t.Fatalf("polls %d hits %d, want the end found by the poll", polls, hits)
	}
}

// A read that polled and parked still ends at its deadline, and at Close.
func TestPolledDeadlineAndCloseEndAPoll(t *testing.T) {
	gate := NewSpinGate(1)
	p, c := polledPair(t, time.Millisecond, gate)
	answeredHot(p, c)
	p.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := p.Read(make([]byte, 8)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a read past its deadline: %v", err)
	}
	if polls, hits := gate.Counts(); polls != 1 || hits != 0 {
		t.Fatalf("polls %d hits %d, want one fruitless poll", polls, hits)
	}
	p.SetReadDeadline(time.Time{})
	answeredHot(p, c)
	ended := make(chan error, 1)
	go func() {
		_, err := p.Read(make([]byte, 8))
		ended <- err
	}()
	p.Close()
	if err := <-ended; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("a read when its connection closed: %v", err)
	}
}

// A read that would poll on a connection already closed (or already past
// its deadline) fails at once, before any try: it must give the gate back,
// or no read of the process would poll again. (transfer's
// TestServerPollsForALoopingClient found no poll served in CI when an
// earlier test's server closed under a hot connection so.)
func TestPolledReadThatNeverTriesLeavesTheGate(t *testing.T) {
	gate := NewSpinGate(1)
	p, c := polledPair(t, time.Second, gate)
	answeredHot(p, c)
	p.Close()
	if _, err := p.Read(make([]byte, 8)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("a read on a closed connection: %v", err)
	}
	q, d := polledPair(t, time.Second, gate)
	answeredHot(q, d)
	go d.Write([]byte("12345678"))
	if _, err := io.ReadFull(q, make([]byte, 8)); err != nil {
		t.Fatal(err)
	}
	if polls, hits := gate.Counts(); polls < 1 || hits < 1 {
		t.Fatalf("polls %d hits %d: the closed connection's read kept the gate", polls, hits)
	}
}

// The gate lets max reads poll at once: while one connection polls, a
// second one reads through the netpoller and gets its bytes all the same.
func TestSpinGateBoundsPollingReads(t *testing.T) {
	gate := NewSpinGate(1)
	a, ca := polledPair(t, time.Hour, gate)
	b, cb := polledPair(t, time.Hour, gate)
	answeredHot(a, ca)
	answeredHot(b, cb)
	aDone := make(chan error, 1)
	go func() {
		_, err := io.ReadFull(a, make([]byte, 1))
		aDone <- err
	}()
	// Wait until a holds the gate.
	for gate.busy.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	cb.Write([]byte("b"))
	var one [1]byte
	if _, err := b.Read(one[:]); err != nil || one[0] != 'b' {
		t.Fatalf("the second connection's read: %q %v", one, err)
	}
	if polls, _ := gate.Counts(); polls != 1 {
		t.Fatalf("%d reads polled, want the first connection's alone: the second polled past a full gate", polls)
	}
	ca.Write([]byte("a"))
	if err := <-aDone; err != nil {
		t.Fatal(err)
	}
	if polls, hits := gate.Counts(); polls != 1 || hits != 1 {
		t.Fatalf("polls %d hits %d, want the first connection's one, served by its poll", polls, hits)
	}
	if gate.busy.Load() != 0 {
		t.Fatalf("the gate holds %d after the polls ended", gate.busy.Load())
	}
}

// NewSpinGate(0) sizes itself from GOMAXPROCS: at least 1, at most 4.
func TestSpinGateDefaultSize(t *testing.T) {
	if g := NewSpinGate(0); g.max < 1 || g.max > 4 {
		t.Fatalf("default gate %d", g.max)
	}
}
