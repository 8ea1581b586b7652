// helpers_test.go defines test helpers: byte patterns, scatter lists and
// TCP peers served from a LocalSegment.

package transfer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gostore/gostore/gostore/wire"
)

// pattern returns n pseudo-random bytes determined by seed: a xorshift block
// of 8191 bytes (a prime, so misplaced slices show) repeated, with every
// 4 KiB page stamped with its number. Cheap under the race detector.
func pattern(seed uint64, n int) []byte {
	b := make([]byte, n)
	x := seed*0x9E3779B97F4A7C15 + 1
	const block = 8191
	for i := 0; i < min(n, block); i++ {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[i] = byte(x >> 32)
	}
	for done := min(n, block); done < n; done *= 2 {
		copy(b[done:], b[:done])
	}
	for i := 0; i+8 <= n; i += 4096 {
		le.PutUint64(b[i:], uint64(i/4096)^seed<<40)
	}
	return b
}

// scatter cuts b into pieces of the given lengths (cycled), with an empty
// buffer thrown in, so ops exercise multi-buffer lists.
func scatter(b []byte, lens ...int) [][]byte {
	var out [][]byte
	if len(lens) == 0 {
		return [][]byte{b}
	}
	for i := 0; len(b) > 0; i++ {
		n := min(lens[i%len(lens)], len(b))
		out = append(out, b[:n:n])
		if i == 1 {
			out = append(out, []byte{})
		}
		b = b[n:]
	}
	return out
}

func join(bufs [][]byte) []byte { return bytes.Join(bufs, nil) }

func codeOf(err error) wire.Code { return wire.CodeOf(err) }

func quietLog() *slog.Logger {
	return slog.New(slog.NewTextHandler(discard{}, &slog.HandlerOptions{Level: slog.LevelError + 100}))
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// tcpPeer is a LocalSegment served by a Server on 127.0.0.1.
type tcpPeer struct {
	seg  *LocalSegment
	srv  *Server
	peer Peer
}

var nextSegID = uint64(1000)

// rawPeer listens on 127.0.0.1 and hands each connection to serve, which
// plays the peer's side by hand (a scripted, silent or broken server);
// the connection is closed when serve returns, the listener when the test
// ends. The Peer names a fresh segment of size bytes (0: unknown).
func rawPeer(t testing.TB, size uint64, serve func(c net.Conn)) Peer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				serve(c)
			}()
		}
	}()
	nextSegID++
	return Peer{SegID: nextSegID, HostID: "x", TransferAddr: ln.Addr().String(), Size: size}
}

func newTCPPeer(t testing.TB, size uint64) *tcpPeer {
	t.Helper()
	seg := localSegment(t, t.Name(), size) // closed after the server (cleanups run last first)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(ln, seg.Bytes(), quietLog())
	go srv.Serve()
	nextSegID++
	serveGranted(srv, nextSegID)
	p := &tcpPeer{seg: seg, srv: srv, peer: Peer{
		SegID: nextSegID, HostID: "elsewhere", TransferAddr: ln.Addr().String(), Size: size,
	}}
	t.Cleanup(func() { srv.Close() })
	return p
}

// localSegment is a shared-memory segment of size bytes for one test or
// benchmark, closed when it ends.
func localSegment(tb testing.TB, name string, size uint64) *LocalSegment {
	tb.Helper()
	seg, err := NewLocalSegment(name, size)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { seg.Close() })
	return seg
}

// shmPeer describes seg as a same-host peer.
func shmPeer(seg *LocalSegment) Peer {
	nextSegID++
	return Peer{SegID: nextSegID, HostID: HostID(), ShmPath: seg.ShmPath(), Size: seg.Size()}
}

func mustOK(t testing.TB, errs []error) {
	t.Helper()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("op %d: %v", i, err)
		}
	}
}

func firstDiff(a, b []byte) string {
	if len(a) != len(b) {
		return fmt.Sprintf("lengths %d and %d", len(a), len(b))
	}
	if bytes.Equal(a, b) {
		return ""
	}
	for i := range a {
		if a[i] != b[i] {
			return fmt.Sprintf("first difference at byte %d: %#x vs %#x", i, a[i], b[i])
		}
	}
	return ""
}

func wantCode(t testing.TB, err error, c wire.Code) {
	t.Helper()
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != c {
		t.Fatalf("error %v, want code %d (%v)", err, c, c)
	}
}

// testServers are the servers of the tests' TCP peers, by address: the
// owners whose grants grantDo mints.
var testServers sync.Map // string → *Server

// serveGranted makes srv the server of segment id, for grantDo.
func serveGranted(srv *Server, id uint64) {
	srv.SetSegID(id)
	testServers.Store(srv.Addr().String(), srv)
}

// granted returns a copy of ops in which every op bound for a test server
// without a grant has one for exactly its range and direction, as the
// master would mint it (for the segment the server serves: some tests
// give one server's bytes several names).
func granted(ops []Op) []Op {
	out := slices.Clone(ops)
	for i := range out {
		op := &out[i]
		v, ok := testServers.Load(op.Peer.TransferAddr)
		if !ok || op.Grant != nil {
			continue
		}
		n, _ := opLen(op)
		op.Grant = v.(*Server).Mint(op.Offset, n, op.Write, time.Now().Add(time.Hour))
	}
	return out
}

// grantDo is e.Do with the ops granted.
func grantDo(e *Engine, ctx context.Context, ops []Op) []error { return e.Do(ctx, granted(ops)) }

// movablePeer is a LocalSegment served as segment id at a fixed address
// by a server the test can close and start again there (a restarted
// owner, with a new grant key).
type movablePeer struct {
	seg  *LocalSegment
	srv  *Server
	peer Peer
}

func newMovablePeer(t *testing.T, name string, size, id uint64) *movablePeer {
	t.Helper()
	seg := localSegment(t, name, size)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := &movablePeer{seg: seg, peer: Peer{SegID: id, HostID: "x", TransferAddr: ln.Addr().String(), Size: size}}
	m.serve(t, ln)
	return m
}

func (m *movablePeer) serve(t *testing.T, ln net.Listener) {
	srv := NewServer(ln, m.seg.Bytes(), quietLog())
	go srv.Serve()
	serveGranted(srv, m.peer.SegID)
	t.Cleanup(func() { srv.Close() })
	m.srv = srv
}

// restart closes the server and serves the segment at the same address
// again; the test is skipped if the port was taken meanwhile.
func (m *movablePeer) restart(t *testing.T) {
	t.Helper()
	m.srv.Close()
	ln, err := net.Listen("tcp", m.peer.TransferAddr)
	if err != nil {
		t.Skipf("cannot listen on %s again: %v", m.peer.TransferAddr, err)
	}
	m.serve(t, ln)
}
