// fuzz_test.go holds the native fuzz targets (go test -fuzz) for the bytes
// this package takes from another process: the request stream a peer sends
// to a Server (which then reads and writes segment memory at the offsets
// and lengths the peer chose), and the response stream a peer's Server sends
// back to the Engine's TCP client (which then fills the caller's buffers).
// Both sides trust nothing of the other, so each target drives the real
// code with arbitrary bytes and compares it with a model of the protocol
// written from doc.go, byte for byte.
//
//	FuzzTransferServer  raw bytes on a connection to a Server over a 64 KiB segment
//	FuzzTransferClient  raw bytes as a Server's answers to an Engine's requests
//
// Other bytes from peers are not decoded here: a Peer's descriptor comes
// from the master (wire), IPC handles go to the caller's Driver untouched,
// and a ShmPath is only opened after Readlink shows a memfd (mapPeer).
//
// Run one for N seconds (seeds in testdata/fuzz/<name>/ and the f.Add calls):
//
//	CGO_CFLAGS="-O2 -g -Wno-deprecated-declarations" go test -ldflags=-checklinkname=0 \
//	    -run='^$' -fuzz='^FuzzTransferServer$' -fuzztime=60s -parallel=1 ./gostore/transfer

package transfer

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gostore/gostore/gostore/grant"
	"github.com/gostore/gostore/gostore/internal/fuzzkit"
	"github.com/gostore/gostore/gostore/wire"
)

// exchange sends in on a new in-memory connection to ln's server,
// half-closes, and returns every byte the server sent until it closed.
func exchange(t *testing.T, ln *fuzzkit.Listener, in []byte) []byte {
	t.Helper()
	c, err := ln.Dial()
	if err != nil {
		t.Fatal(err)
	}
	out, ok := c.Exchange(in, 10*time.Second)
	if !ok {
		t.Fatalf("server neither answered nor closed the connection within 10s (%d request bytes)", len(in))
	}
	return out
}

const fuzzSegSize = 64 << 10

// fuzzServerModel is what a correct Server does with the request stream in
// (doc.go's protocol, handle's rules for bad requests) on seg, which it
// changes in place: the bytes it answers, and whether that answer is all of
// them (false: the connection ends with answers still unsent, so only a
// prefix is promised). device: a device segment copies a write's payload
// only once a whole staging chunk of it arrived.
func fuzzServerModel(in, seg []byte, device bool) (out []byte, exact bool) {
	size := uint64(len(seg))
	for {
		if len(in) < reqHdrSize {
			return out, true // end of stream (or a torn header): closed after answering
		}
		op, id, off, n := in[0], le.Uint64(in[1:]), le.Uint64(in[9:]), le.Uint64(in[17:])
		in = in[reqHdrSize:]
		var tok []byte
		switch op {
		case opWrite, opRead:
		case opGrantedWrite, opGrantedRead:
			if len(in) < grant.Size {
				return out, true // a torn grant: closed after answering
			}
			tok, in = in[:grant.Size], in[grant.Size:]
		default:
			return out, true // unknown op: answered what came before, closed
		}
		write := isWrite(op)
		status := wire.OK
		if !inRange(off, n, size) {
			status = wire.ErrInvalidParams
		} else {
			_, err := grant.Verify(fuzzKey, tok, grant.Request{Offset: off, N: n, Write: write}, time.Now().UnixNano())
			status = wire.CodeOf(err)
		}
		if status != wire.OK {
			out = putRespHdr(out, id, status, 0)
			if !write {
				continue
			}
			if n > maxDiscard {
				return out, true // refused, then closed
			}
			if uint64(len(in)) < n {
				return out, false // closed while draining, answers pending
			}
			in = in[n:]
			continue
		}
		switch {
		case write:
			got := min(n, uint64(len(in)))
			if device {
				for done := uint64(0); done < n; done += deviceChunk {
					k := min(deviceChunk, n-done)
					if done+k > got {
						break
					}
					copy(seg[off+done:off+done+k], in[done:done+k])
				}
			} else {
				copy(seg[off:off+got], in[:got])
			}
			in = in[got:]
			if got < n {
				return out, true // payload cut short: answers were flushed first
			}
			out = putRespHdr(out, id, wire.OK, 0)
		default:
			out = putRespHdr(out, id, wire.OK, n)
			out = append(out, seg[off:off+n]...)
		}
	}
}

// fuzzKey is the fuzzed servers' grant key: fixed, so that an input
// holding a grant the fuzzer found means the same in every run.
var fuzzSecret = bytes.Repeat([]byte{0x42}, grant.KeySize)
var fuzzKey, _ = grant.NewKey(fuzzSecret)

// fuzzGrant is a grant under fuzzKey; far in the future or long past.
func fuzzGrant(off, n uint64, write, expired bool) []byte {
	exp := time.Now().Add(100 * 365 * 24 * time.Hour)
	if expired {
		exp = time.Unix(1, 0)
	}
	return grant.Mint(nil, fuzzKey, grant.Fields{Offset: off, Length: n, Write: write, Expiry: exp.UnixNano()})
}

// useFuzzKey gives s the fuzz key (before it serves).
func useFuzzKey(s *Server) {
	s.secret, s.key = fuzzSecret, fuzzKey
}

// fuzzServerSeeds are request streams built with the protocol's header
// layout (reqHdr, as tcp_client.go's send lays it out).
func fuzzServerSeeds() [][]byte {
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	payload := bytes.Repeat([]byte("w"), 100)
	rAll, wAll := fuzzGrant(0, fuzzSegSize, false, false), fuzzGrant(0, fuzzSegSize, true, false)
	w100 := fuzzGrant(100, 100, true, false)
	forged := bytes.Clone(w100)
	forged[len(forged)-1] ^= 1
	return [][]byte{
		cat(reqHdr(opGrantedRead, 1, 0, 16), rAll),
		cat(reqHdr(opGrantedWrite, 2, 100, 100), w100, payload, reqHdr(opGrantedRead, 3, 90, 120), rAll),
		cat(reqHdr(opGrantedWrite, 2, 100, 100), w100, payload, reqHdr(opGrantedWrite, 3, 150, 50), w100, payload[:50]), // a cached grant
		cat(reqHdr(opGrantedWrite, 4, 99, 100), w100, payload, reqHdr(opGrantedRead, 5, 100, 1), w100),                  // outside the grant; a write grant read
		cat(reqHdr(opGrantedWrite, 6, 100, 100), forged, payload, reqHdr(opGrantedRead, 7, 0, 4), rAll),                 // forged
		cat(reqHdr(opGrantedWrite, 8, 100, 100), fuzzGrant(100, 100, true, true), payload),                              // expired
		cat(reqHdr(opGrantedRead, 9, 0, 16), wAll[:30]),                                                                 // torn grant
		cat(reqHdr(opGrantedWrite, 10, 0, 1<<62), wAll, payload),                                                        // huge: refused, closed
		cat(reqHdr(opGrantedWrite, 11, 10, 100), wAll, payload[:50]),                                                    // payload cut short
		cat(reqHdr(opRead, 1, 0, 16)),
		cat(reqHdr(opWrite, 2, 100, 100), payload, reqHdr(opRead, 3, 90, 120)),
		cat(reqHdr(opWrite, 4, fuzzSegSize-10, 100), payload, reqHdr(opRead, 5, 0, 4)),           // refused, drained
		cat(reqHdr(opWrite, 6, 0, 1<<62), payload),                                               // huge: refused, closed
		cat(reqHdr(opWrite, 7, 10, 100), payload[:50]),                                           // payload cut short
		cat(reqHdr(opRead, 8, ^uint64(0)-1, 4), reqHdr(opRead, 9, 8, ^uint64(0)-4)),              // overflowing ranges
		cat(reqHdr(opWrite, 10, ^uint64(0), 0), reqHdr(opWrite, 11, fuzzSegSize, 0)),             // empty writes at the ends
		cat(reqHdr(opRead, 12, 0, fuzzSegSize), reqHdr(opRead, 13, 4096, smallRead+1)),           // large reads: writev path
		cat(reqHdr(opRead, 14, 0, 1), reqHdr(0x77, 15, 0, 0), reqHdr(opRead, 16, 0, 1)),          // unknown op
		cat(reqHdr(opWrite, 17, 0, 10), payload[:10], reqHdr(opRead, 18, 0, 10))[:reqHdrSize+20], // torn header
		cat(reqHdr(opWrite, 19, fuzzSegSize+1, 100), payload[:30]),                               // refused, drain cut short
		[]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
		nil,
	}
}

// FuzzTransferServer sends arbitrary bytes as one peer's request stream to
// a real Server (host memory, or a device segment through the fake
// DeviceMemory of device_test.go when device is set) over a 64 KiB segment
// holding a known pattern, half-closes, and reads every answer. The
// connection is in memory (fuzzkit.Conn): the Server's own Serve and handle
// run, without TCP's resets and timing. Properties:
//   - no panic, and the server ends the connection within 10s;
//   - a request without a grant (ops 1 and 2), or with one that is not
//     the fixed key's for its range, direction and time, is refused and
//     changes nothing; the model checks grants with the grant package;
//   - the answers are exactly fuzzServerModel's (a prefix of them where the
//     model says answers may be left unsent): ids, statuses, lengths and
//     read payloads, which reflect the writes before them;
//   - the segment afterwards is exactly the model's: no byte outside the
//     in-range write requests changed, and those hold the payload sent;
//   - the server still serves a whole-segment read on a new connection.
func FuzzTransferServer(f *testing.F) {
	pat := pattern(77, fuzzSegSize)
	host := make([]byte, fuzzSegSize)
	dev := &fakeDevice{mu: new(sync.Mutex), mem: make([]byte, fuzzSegSize)}
	lnHost, lnDev := fuzzkit.NewListener(), fuzzkit.NewListener()
	srvHost := NewServer(lnHost, host, quietLog())
	srvDev := NewDeviceServer(lnDev, dev, quietLog())
	useFuzzKey(srvHost)
	useFuzzKey(srvDev)
	go srvHost.Serve()
	go srvDev.Serve()
	f.Cleanup(func() {
		srvHost.Close()
		srvDev.Close()
	})
	for _, s := range fuzzServerSeeds() {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, in []byte, device bool) {
		ln, seg, mu := lnHost, host, new(sync.Mutex)
		if device {
			ln, seg, mu = lnDev, dev.mem, dev.mu // the fake copies under dev.mu
		}
		mu.Lock()
		copy(seg, pat)
		mu.Unlock()
		want := bytes.Clone(pat)
		wantOut, exact := fuzzServerModel(in, want, device)

		out := exchange(t, ln, in)
		if exact && !bytes.Equal(out, wantOut) || !bytes.HasPrefix(wantOut, out) {
			k := min(len(out), len(wantOut))
			t.Fatalf("answers differ from the protocol's (%d bytes, want %d, exact %v): %s",
				len(out), len(wantOut), exact, firstDiff(out[:k], wantOut[:k]))
		}
		mu.Lock()
		d := firstDiff(seg, want)
		mu.Unlock()
		if d != "" {
			t.Fatalf("segment differs from the protocol's: %s", d)
		}

		// The server still serves.
		got := exchange(t, ln, append(reqHdr(opGrantedRead, 99, 0, fuzzSegSize), fuzzGrant(0, fuzzSegSize, false, false)...))
		if w := append(putRespHdr(nil, 99, wire.OK, fuzzSegSize), want...); !bytes.Equal(got, w) {
			k := min(len(got), len(w))
			t.Fatalf("whole-segment read after the stream: %d bytes, %s", len(got), firstDiff(got[:k], w[:k]))
		}
	})
}

// fuzzClientOps is the batch FuzzTransferClient runs: with one stream and
// 4 KiB slices it becomes requests 1-3 (op 0, a 10000-byte read), 4 (op 1,
// a 300-byte write) and 5 (op 2, a 7-byte read), in that order.
func fuzzClientOps(p Peer) []Op {
	return []Op{
		{Peer: p, Offset: 100, Bufs: scatter(make([]byte, 10000), 3000, 5000), Grant: fuzzClientGrant(0)},
		{Peer: p, Offset: 20000, Bufs: [][]byte{pattern(5, 300)}, Write: true, Grant: fuzzClientGrant(1)},
		{Peer: p, Offset: 7, Bufs: [][]byte{make([]byte, 7)}, Grant: fuzzClientGrant(2)},
	}
}

// fuzzClientGrants are the ops' grants, each for its op's range: the
// engine sends them as they are with every slice.
var fuzzClientGrants = [][]byte{fuzzGrant(100, 10000, false, false), fuzzGrant(20000, 300, true, false), fuzzGrant(7, 7, false, false)}

func fuzzClientGrant(i int) []byte { return fuzzClientGrants[i] }

type fuzzReq struct {
	op    byte
	n     uint64
	opIdx int
}

// fuzzClientReqs are the requests of fuzzClientOps by id (index 0 unused),
// and the bytes they take on the wire.
var fuzzClientReqs = []fuzzReq{{}, {opGrantedRead, 4096, 0}, {opGrantedRead, 4096, 0}, {opGrantedRead, 10000 - 8192, 0},
	{opGrantedWrite, 300, 1}, {opGrantedRead, 7, 2}}

const fuzzClientReqBytes = 5*(reqHdrSize+grant.Size) + 300

// fuzzClientModel is what a correct client makes of the answers in: per
// op, nil or the code of its error, and the bytes a successful read op
// holds. A request that gets an error status with no payload fails its op
// for good, with that status if it is a contract code (ErrTransferFail
// otherwise); anything else that is not the exact answer to a pending
// request breaks the connection, failing what is pending, and those ops
// are retried once on a new connection, where the test's server fails
// them again (ErrTransferFail).
func fuzzClientModel(in []byte) (codes []wire.Code, reads map[int][]byte) {
	const nops = 3
	first := make([]wire.Code, nops) // the op's first error
	final := make([]bool, nops)      // failed for good: not retried
	broken := make([]bool, nops)     // failed with the connection: retried
	fail := func(i int, c wire.Code, retry bool) {
		if first[i] == wire.OK {
			first[i] = c
		}
		if retry {
			broken[i] = true
		} else {
			final[i] = true
		}
	}
	reads = map[int][]byte{}
	pending := map[uint64]bool{1: true, 2: true, 3: true, 4: true, 5: true}
answers:
	for len(in) >= respHdrSize {
		id, status, n := le.Uint64(in), wire.Code(int32(le.Uint32(in[8:]))), le.Uint64(in[12:])
		in = in[respHdrSize:]
		if !pending[id] {
			break // unknown or already answered: the connection breaks
		}
		delete(pending, id)
		r := fuzzClientReqs[id]
		switch {
		case status != wire.OK && n == 0:
			c := status
			if !c.Known() {
				c = wire.ErrTransferFail
			}
			fail(r.opIdx, c, false)
		case !isWrite(r.op) && status == wire.OK && n == r.n:
			if uint64(len(in)) < n {
				fail(r.opIdx, wire.ErrTransferFail, true)
				break answers
			}
			reads[r.opIdx] = append(reads[r.opIdx], in[:n]...)
			in = in[n:]
		case isWrite(r.op) && status == wire.OK && n == 0:
		default:
			fail(r.opIdx, wire.ErrTransferFail, true)
			break answers
		}
	}
	for id := range pending {
		fail(fuzzClientReqs[id].opIdx, wire.ErrTransferFail, true)
	}
	codes = make([]wire.Code, nops)
	for i := range codes {
		switch {
		case final[i]:
			codes[i] = first[i]
		case broken[i]:
			codes[i] = wire.ErrTransferFail // the retry fails too
		}
		if codes[i] != wire.OK {
			delete(reads, i)
		}
	}
	return codes, reads
}

// fuzzClientSeeds are answer streams built with the response layout
// (putRespHdr, as handle writes them).
func fuzzClientSeeds() [][]byte {
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	r := func(id uint64, status wire.Code, n uint64) []byte { return putRespHdr(nil, id, status, n) }
	p := pattern(9, 10000)
	good := cat(r(1, wire.OK, 4096), p[:4096], r(2, wire.OK, 4096), p[4096:8192], r(3, wire.OK, 1808), p[8192:],
		r(4, wire.OK, 0), r(5, wire.OK, 7), p[:7])
	return [][]byte{
		good,
		cat(r(5, wire.OK, 7), p[:7], r(4, wire.OK, 0), r(3, wire.OK, 1808), p[:1808]), // out of order, then cut
		cat(r(4, wire.ErrInvalidParams, 0), r(1, wire.ErrObjectNotFound, 0)),          // contract codes
		cat(r(4, wire.Code(5), 0), r(5, wire.Code(-12345), 0)),                        // codes outside the contract
		cat(r(999, wire.OK, 1<<40)),                                                   // unknown id, huge length
		cat(r(1, wire.OK, 4095), p[:4095]),                                            // wrong length
		cat(r(4, wire.OK, 300)),                                                       // payload for a write
		cat(r(1, wire.OK, 4096), p[:100]),                                             // payload cut short
		cat(r(5, wire.OK, 7), p[:7], r(5, wire.OK, 7), p[:7]),                         // answered twice
		good[:respHdrSize-1],
		nil,
	}
}

// fuzzClientServer is a Server stand-in that reads the batch's requests on
// the first connection of an input and answers them with the input's bytes,
// then closes; any other connection (the client's retry) is closed at once.
type fuzzClientServer struct {
	ln  net.Listener
	cur atomic.Pointer[fuzzClientRound]
}

type fuzzClientRound struct {
	answers []byte
	used    atomic.Bool
	sawReqs chan []byte // the request bytes the first connection carried
}

func (s *fuzzClientServer) serve() {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		r := s.cur.Load()
		if r == nil || !r.used.CompareAndSwap(false, true) {
			c.Close()
			continue
		}
		go func() {
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			reqs := make([]byte, fuzzClientReqBytes)
			n, _ := io.ReadFull(c, reqs)
			r.sawReqs <- reqs[:n]
			if n == len(reqs) {
				c.Write(r.answers)
			}
		}()
	}
}

// FuzzTransferClient runs a batch of three granted ops (fuzzClientOps:
// five requests on one connection, each followed by its op's grant)
// through a real Engine, on its streams and then on its lane, against a
// stand-in server
// that answers with arbitrary bytes, then closes. Properties:
//   - no panic, and Do returns (the answers end with the connection);
//   - the requests on the wire are the ones the batch makes (ids 1-5,
//     offsets, lengths, the write's payload);
//   - each op succeeds exactly when fuzzClientModel says, and a read that
//     succeeds holds exactly the payloads of its slices' answers;
//   - a failed op carries a negative contract code (wire.Code.Known): the
//     status from an error answer when it is one, ErrTransferFail for
//     anything the peer got wrong. A peer's arbitrary status number must
//     not reach the caller (and Python) as if it were a contract code.
func FuzzTransferClient(f *testing.F) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	srv := &fuzzClientServer{ln: ln}
	go srv.serve()
	f.Cleanup(func() { ln.Close() })
	peer := Peer{SegID: 1, HostID: "elsewhere", TransferAddr: ln.Addr().String(), Size: 1 << 20}
	g0, g1, g2 := fuzzClientGrant(0), fuzzClientGrant(1), fuzzClientGrant(2)
	wantReqs := bytes.Join([][]byte{
		reqHdr(opGrantedRead, 1, 100, 4096), g0, reqHdr(opGrantedRead, 2, 100+4096, 4096), g0,
		reqHdr(opGrantedRead, 3, 100+8192, 1808), g0,
		reqHdr(opGrantedWrite, 4, 20000, 300), g1, pattern(5, 300), reqHdr(opGrantedRead, 5, 7, 7), g2}, nil)
	for _, s := range fuzzClientSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, answers []byte) {
		for _, laneBytes := range []int{-1, 0} { // the streams, then the lane
			fuzzClientRun(t, srv, peer, answers, wantReqs, laneBytes)
		}
	})
}

// fuzzClientRun is one input of FuzzTransferClient on an engine with
// Options.LaneBytes laneBytes.
func fuzzClientRun(t *testing.T, srv *fuzzClientServer, peer Peer, answers, wantReqs []byte, laneBytes int) {
	round := &fuzzClientRound{answers: answers, sawReqs: make(chan []byte, 1)}
	srv.cur.Store(round)
	defer srv.cur.Store(nil)
	e := NewEngine(Options{ForceTCP: true, StreamsPerPeer: 1, SliceSize: 4096, LaneBytes: laneBytes, Log: quietLog()})
	defer e.Close()
	ops := fuzzClientOps(peer)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errs := e.Do(ctx, ops)
	if ctx.Err() != nil {
		t.Fatal("Do hung until its deadline")
	}
	select {
	case reqs := <-round.sawReqs:
		if !bytes.Equal(reqs, wantReqs) {
			t.Fatalf("requests on the wire differ from the batch's: %s", firstDiff(reqs, wantReqs))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the batch never reached the server")
	}
	codes, reads := fuzzClientModel(answers)
	for i, err := range errs {
		if got := wire.CodeOf(err); got != codes[i] {
			t.Fatalf("op %d: %v (code %d), want code %d", i, err, got, codes[i])
		}
		if err != nil {
			var we *wire.Error
			if !errors.As(err, &we) || !we.Code.Known() || we.Code >= 0 {
				t.Fatalf("op %d failed with %v: not a contract code", i, err)
			}
			continue
		}
		if ops[i].Write {
			continue
		}
		if d := firstDiff(join(ops[i].Bufs), reads[i]); d != "" {
			t.Fatalf("op %d read other bytes than the peer sent: %s", i, d)
		}
	}
}
