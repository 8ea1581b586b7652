// conn_test.go tests Conn against a real loopback peer: reads that spin or
// sleep, writes of scattered parts, deadlines, shutdown and the peer's end.

package blockconn

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// loopback returns the two ends of a fresh loopback TCP connection: the
// dialled one and the accepted one, each closed when the test ends.
func loopback(t *testing.T) (dialled, accepted *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	peer, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { peer.Close() })
	return nc.(*net.TCPConn), peer.(*net.TCPConn)
}

// pair returns a Conn dialled to a fresh listener and the accepted end.
func pair(t *testing.T) (*Conn, net.Conn) {
	t.Helper()
	nc, peer := loopback(t)
	bc, err := FromTCP(nc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bc.Close() })
	return bc, peer
}

// An echo through the peer, with the spin on (the answer may land while
// the read polls) and off (it always sleeps): the same bytes either way,
// parts written in order.
func TestWritevAndReadWithAndWithoutSpin(t *testing.T) {
	for _, spin := range []time.Duration{DefaultSpin, time.Second, 0} {
		bc, peer := pair(t)
		bc.SetSpin(spin)
		go io.Copy(peer, peer) // echo
		parts := [][]byte{[]byte("head"), nil, bytes.Repeat([]byte{7}, 100000), []byte("tail")}
		if err := bc.Writev(parts...); err != nil {
			t.Fatal(err)
		}
		want := bytes.Join(parts, nil)
		got := make([]byte, len(want))
		if err := bc.ReadFull(got); err != nil {
			t.Fatalf("spin %v: %v", spin, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("spin %v: the echo differs", spin)
		}
		if parts[0] == nil || len(parts[2]) != 100000 {
			t.Fatal("Writev changed its arguments")
		}
	}
}

// A peer that never answers: the read returns at the deadline (past any
// spin) with os.ErrDeadlineExceeded; a peer that closes ends reads with
// ErrClosedByPeer, and PeerClosed sees it without reading.
func TestDeadlineAndPeerEnd(t *testing.T) {
	bc, peer := pair(t)
	if err := bc.SetDeadline(time.Now().Add(200 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if _, err := bc.Read(make([]byte, 10)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read from a silent peer: %v, want a deadline error", err)
	}
	if bc.PeerClosed() {
		t.Fatal("PeerClosed on a live connection")
	}
	peer.Close()
	if err := bc.SetDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	if _, err := bc.Read(make([]byte, 10)); !errors.Is(err, ErrClosedByPeer) {
		t.Fatalf("read after the peer closed: %v", err)
	}
	if !bc.PeerClosed() {
		t.Fatal("PeerClosed missed the peer's end")
	}
}

// Readable says whether a read would return at once, without consuming
// anything: not before the peer writes, yes once bytes are there (and they
// are still there to read), yes at the end of the stream.
func TestReadableConsumesNothing(t *testing.T) {
	bc, peer := pair(t)
	if bc.Readable() {
		t.Fatal("Readable before the peer wrote anything")
	}
	if _, err := peer.Write([]byte("xy")); err != nil {
		t.Fatal(err)
	}
	if err := bc.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	fd := bc.FD()
	if n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 10000); n != 1 || err != nil {
		t.Fatalf("the peer's bytes did not come: %d %v", n, err)
	}
	if !bc.Readable() || !bc.Readable() {
		t.Fatal("Readable missed bytes that arrived")
	}
	got := make([]byte, 2)
	if err := bc.ReadFull(got); err != nil || string(got) != "xy" {
		t.Fatalf("after Readable the bytes read %q, %v", got, err)
	}
	if bc.Readable() {
		t.Fatal("Readable with every byte read")
	}
	peer.Close()
	if n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 10000); n != 1 || err != nil {
		t.Fatalf("the peer's end did not come: %d %v", n, err)
	}
	if !bc.Readable() {
		t.Fatal("Readable missed the end of the stream")
	}
}

// Shutdown from another goroutine ends a read that is asleep (no
// deadline): the way a caller's cancelled context frees its thread.
func TestShutdownWakesASleepingRead(t *testing.T) {
	bc, _ := pair(t)
	bc.SetSpin(0)
	done := make(chan error, 1)
	go func() {
		_, err := bc.Read(make([]byte, 10))
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("the read returned before the shutdown: %v", err)
	case <-time.After(50 * time.Millisecond): // the read is asleep by now, or about to be
	}
	bc.Shutdown()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a shut-down read returned no error")
		}
	case <-time.After(time.Minute):
		t.Fatal("Shutdown did not wake the read")
	}
	bc.Close()
	bc.Shutdown() // after Close: nothing, no panic
}

// SetDeadline sets the socket's timeouts a little short of the time to
// the deadline, and again only when that time is shorter than them or
// longer by more than a 64th: a deadline of now + 30 s before every call
// keeps the value set first; one sooner, much later, in the past or none
// replaces it, and so does the same deadline once its time left fell
// below the timeout. Read back from the kernel.
func TestSetDeadlineKeepsATimeoutCloseEnough(t *testing.T) {
	const tick = 10 * time.Millisecond // the kernel keeps these timeouts in clock ticks, rounded up
	bc, _ := pair(t)
	timeouts := func() time.Duration {
		t.Helper()
		var got [2]time.Duration
		for i, opt := range []int{unix.SO_RCVTIMEO, unix.SO_SNDTIMEO} {
			tv, err := unix.GetsockoptTimeval(bc.FD(), unix.SOL_SOCKET, opt)
			if err != nil {
				t.Fatal(err)
			}
			got[i] = time.Duration(tv.Nano())
		}
		if got[0] != got[1] {
			t.Fatalf("receive timeout %v, send timeout %v", got[0], got[1])
		}
		return got[0]
	}
	set := func(at time.Time) time.Duration {
		t.Helper()
		if err := bc.SetDeadline(at); err != nil {
			t.Fatal(err)
		}
		return timeouts()
	}
	base := time.Now().Add(30 * time.Second)
	first := set(base)
	if first < 29*time.Second || first > 30*time.Second {
		t.Fatalf("timeout %v for a deadline 30 s away", first)
	}
	// A later call's deadline, 100 ms on: the timeout, set 234 ms (a
	// 128th) short of 30 s, is kept while it is short of the time left
	// by at most 469 ms (a 64th), which a stall of up to 330 ms between
	// the two calls still leaves.
	if got := set(base.Add(100 * time.Millisecond)); got != first {
		t.Fatalf("a deadline 100 ms later replaced the %v timeout with %v", first, got)
	}
	for _, c := range []struct {
		what   string
		in     time.Duration
		lo, hi time.Duration
	}{
		{"sooner", 10 * time.Second, 9 * time.Second, 10 * time.Second},
		{"much later", 60 * time.Second, 59 * time.Second, 60 * time.Second},
		{"past", -time.Second, time.Microsecond, tick},
	} {
		if got := set(time.Now().Add(c.in)); got < c.lo || got > c.hi {
			t.Fatalf("a deadline %s (%v away) left the timeout at %v", c.what, c.in, got)
		}
	}
	// The same deadline again once less time is left than the timeout
	// set for it: a kept timeout would outlast the deadline.
	soon := time.Now().Add(200 * time.Millisecond)
	kept := set(soon)
	for time.Until(soon) >= kept-2*tick {
		runtime.Gosched() // the clock, not a sleep, is what the test waits on
	}
	if got := set(soon); got > time.Until(soon)+tick || got >= kept {
		t.Fatalf("the same deadline, %v away now, left the timeout at %v (was %v)", time.Until(soon), got, kept)
	}
	if got := set(time.Time{}); got != 0 {
		t.Fatalf("no deadline left the timeout at %v", got)
	}
}
