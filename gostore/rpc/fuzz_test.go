// fuzz_test.go feeds arbitrary byte streams to a Server connection, as a
// misbehaving or hostile peer would send them, and checks the server's
// answers against a model of the protocol. `go test` replays the seeds
// and testdata/fuzz/; to explore:
//
//	go test -ldflags=-checklinkname=0 -run='^$' -fuzz='^FuzzServerConn$' -fuzztime=60s -parallel=1 ./gostore/rpc

package rpc

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/gostore/gostore/gostore/internal/fuzzkit"
	"github.com/gostore/gostore/gostore/wire"
)

// The fuzz server's handlers: typed, deterministic, and never panicking
// by themselves, so that a recovered panic can only come from this
// package or the decoders. Each answers some requests with a contract
// error, so that error answers are exercised too.
func fuzzPing(r *echoReq) (*echoResp, error) {
	if r.Fail != 0 {
		return nil, wire.Errorf(wire.ErrInvalidParams, "asked to fail with %d", r.Fail)
	}
	return &echoResp{S: r.S + "!"}, nil
}

func fuzzExist(r *wire.KeysReq) (*wire.CodesResp, error) {
	if len(r.Keys) > 8 {
		return nil, wire.Errorf(wire.ErrInvalidParams, "%d keys", len(r.Keys))
	}
	codes := make([]wire.Code, len(r.Keys))
	for i, k := range r.Keys {
		if k == "" || k[0] != 'k' {
			codes[i] = wire.ErrObjectNotFound
		}
	}
	return &wire.CodesResp{Codes: codes}, nil
}

func fuzzPutStart(r *wire.PutStartReq) (*wire.PutStartResp, error) {
	if len(r.Keys) != len(r.Sizes) {
		return nil, wire.Errorf(wire.ErrInvalidParams, "%d keys but %d sizes", len(r.Keys), len(r.Sizes))
	}
	res := make([]wire.PutStartResult, len(r.Keys))
	for i := range res {
		res[i] = wire.PutStartResult{Code: wire.OK, Replicas: []wire.Replica{{SegID: 1, Offset: r.Sizes[i]}}, Epoch: uint64(i)}
	}
	return &wire.PutStartResp{Results: res}, nil
}

// modelHandler is what the server should do with a body: answer with a
// status and body, or (ok false) close the connection.
type modelHandler func(body []byte) (status wire.Code, resp []byte, ok bool)

// model mirrors HandleFunc (vet, decode into a fresh Req; garbage closes),
// dispatch (a *wire.Error answers its code and message) and
// encodeResponse (msgpack of the result).
func model[Req, Resp any](f func(*Req) (*Resp, error)) modelHandler {
	return func(body []byte) (wire.Code, []byte, bool) {
		if wire.CheckBody(body) != nil {
			return 0, nil, false
		}
		req := new(Req)
		if err := msgpack.Unmarshal(body, req); err != nil {
			return 0, nil, false
		}
		resp, err := f(req)
		var out any = resp
		if err != nil {
			var we *wire.Error
			if !errors.As(err, &we) {
				panic("fuzz handlers return *wire.Error only")
			}
			out = we.Msg
		}
		b, err2 := msgpack.Marshal(out)
		if err2 != nil {
			panic(err2)
		}
		return wire.CodeOf(err), b, true
	}
}

var fuzzModel = map[wire.Op]modelHandler{
	wire.OpPing:     model(fuzzPing),
	wire.OpExist:    model(fuzzExist),
	wire.OpPutStart: model(fuzzPutStart),
}

// startFuzzServer serves the fuzz handlers, and those more registers, on
// an in-memory listener until tb ends.
func startFuzzServer(tb testing.TB, more func(*Server)) (*Server, *fuzzkit.Listener) {
	s := NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	HandleFunc(s, wire.OpPing, fuzzPing)
	HandleFunc(s, wire.OpExist, fuzzExist)
	HandleFunc(s, wire.OpPutStart, fuzzPutStart)
	if more != nil {
		more(s)
	}
	ln := fuzzkit.NewListener()
	go s.Serve(ln)
	tb.Cleanup(s.Close)
	return s, ln
}

type answer struct {
	h    wire.Header
	body []byte
}

// expected runs the model over a stream: the answers due, in order; the
// connection closes after the last.
func expected(stream []byte) []answer {
	var out []answer
	r := bytes.NewReader(stream)
	for {
		h, body, err := wire.ReadFrame(r, nil)
		if err != nil {
			return out // EOF, a frame cut short, or too large: closed
		}
		m := fuzzModel[h.Op]
		if m == nil {
			return out // unknown opcode: closed
		}
		status, resp, ok := m(body)
		if !ok {
			return out // undecodable body: closed
		}
		out = append(out, answer{wire.Header{Len: uint32(len(resp)), ID: h.ID, Op: h.Op, Status: status}, resp})
	}
}

// exchange sends stream on a new connection, half-closes it and reads
// every answer until the server closes. A server that neither answers nor
// closes within the watchdog's time fails t.
func exchange(t *testing.T, ln *fuzzkit.Listener, stream []byte) []answer {
	t.Helper()
	c, err := ln.Dial()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var hung bool
	var mu sync.Mutex
	watchdog := time.AfterFunc(10*time.Second, func() {
		mu.Lock()
		hung = true
		mu.Unlock()
		c.Close()
	})
	defer watchdog.Stop()
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		c.Write(stream) // fails once the server closes: expected on garbage
		c.CloseWrite()
	}()
	var got []answer
	for {
		h, body, err := wire.ReadFrame(c, nil)
		if err != nil {
			if err != io.EOF {
				t.Fatalf("after %d answers the server sent a bad frame: %v", len(got), err)
			}
			break
		}
		got = append(got, answer{h, body})
	}
	<-wrote
	mu.Lock()
	defer mu.Unlock()
	if hung {
		t.Fatalf("the server neither answered nor closed within 10s (%d answers)", len(got))
	}
	return got
}

// FuzzServerConn sends an arbitrary byte stream (a sequence of frames,
// well formed or not) on one connection to a Server with three typed
// handlers. The server must answer exactly what the model says: every
// complete frame with a registered opcode and a decodable body gets its
// answer (same id and opcode, the handler's contract code and body), in
// order, and the first frame that is not one closes the connection (no
// answer, no hang); answers already due are delivered before it closes.
// No handler may panic (Panics stays 0), and afterwards the server still
// serves a new connection.
func FuzzServerConn(f *testing.F) {
	ping := func(id uint64, s string, fail int32) []byte {
		b, _ := msgpack.Marshal(&echoReq{S: s, Fail: fail})
		return wire.AppendFrame(nil, id, wire.OpPing, wire.OK, b)
	}
	exist, _ := msgpack.Marshal(&wire.KeysReq{ClientID: "c", Keys: []string{"k1", "x"}, ForRead: true})
	put, _ := msgpack.Marshal(&wire.PutStartReq{ClientID: "c", Keys: []string{"k1", "k2"}, Sizes: []uint64{4096, 64},
		Config: wire.ReplicaConfig{ReplicaNum: 1}})
	badPut, _ := msgpack.Marshal(&wire.PutStartReq{ClientID: "c", Keys: []string{"k1"}})
	huge := make([]byte, wire.HeaderSize)
	wire.PutHeader(huge, wire.Header{Len: wire.MaxBody + 1, ID: 1, Op: wire.OpPing})
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

	f.Add(ping(1, "hi", 0))
	f.Add(ping(1, "no", int32(wire.ErrObjectHasLease)))
	f.Add(cat(ping(1, "a", 0), wire.AppendFrame(nil, 2, wire.OpExist, 0, exist), wire.AppendFrame(nil, 3, wire.OpPutStart, 0, put),
		wire.AppendFrame(nil, 4, wire.OpPutStart, 0, badPut)))
	f.Add(cat(ping(1, "a", 0), ping(2, "b", 0), []byte{0xc1, 0xc1, 0xc1}))              // answers due, then garbage
	f.Add(cat(ping(1, "a", 0), wire.AppendFrame(nil, 2, wire.OpPing, 0, []byte{0xc1}))) // undecodable body
	f.Add(cat(ping(1, "a", 0), wire.AppendFrame(nil, 2, wire.OpRemoveAll, 0, nil)))     // unregistered op
	f.Add(wire.AppendFrame(nil, 1, wire.Op(63), 0, nil))                                // last slot of the table
	f.Add(wire.AppendFrame(nil, 1, wire.Op(0xffff), 0, nil))                            // beyond the table
	f.Add(cat(ping(1, "a", 0), huge))
	f.Add(ping(1, "cut short", 0)[:wire.HeaderSize+3])
	f.Add([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	f.Add(wire.AppendFrame(nil, 1, wire.OpExist, 0, append([]byte{0x94, 0xa1, 'c'}, 0xdd, 0xff, 0xff, 0xff, 0xff)))

	s, ln := startFuzzServer(f, nil)
	probe := ping(99, "still there", 0)
	f.Fuzz(func(t *testing.T, stream []byte) {
		want := expected(stream)
		got := exchange(t, ln, stream)
		for i := 0; i < len(got) || i < len(want); i++ {
			switch {
			case i >= len(got):
				t.Fatalf("answer %d of %d missing: want %+v", i, len(want), want[i].h)
			case i >= len(want):
				t.Fatalf("answer %d unexpected (%d due): %+v", i, len(want), got[i].h)
			case !got[i].h.Status.Known():
				t.Fatalf("answer %d carries %v, not a contract code", i, got[i].h.Status)
			case got[i].h != want[i].h || !bytes.Equal(got[i].body, want[i].body):
				t.Fatalf("answer %d: got %+v % x, want %+v % x", i, got[i].h, got[i].body, want[i].h, want[i].body)
			}
		}
		if n := s.Panics(); n != 0 {
			t.Fatalf("%d handler panics recovered", n)
		}
		if got := exchange(t, ln, probe); len(got) != 1 || got[0].h.Status != wire.OK {
			t.Fatalf("the server stopped serving new connections: %+v", got)
		}
	})
}

// Panics counts what safeCall recovered: the hook the fuzz targets (here
// and the master's) use to fail on a handler panic, which the server
// otherwise turns into an INTERNAL_ERROR answer.
func TestPanicsCountsRecoveredPanics(t *testing.T) {
	s, ln := startFuzzServer(t, func(s *Server) {
		HandleFunc(s, wire.OpRemove, func(*echoReq) (*echoResp, error) { panic("handler bug") })
	})
	b, _ := msgpack.Marshal(&echoReq{S: "x"})
	got := exchange(t, ln, wire.AppendFrame(nil, 1, wire.OpRemove, 0, b))
	if len(got) != 1 || got[0].h.Op != wire.OpRemove || got[0].h.Status != wire.ErrInternal || s.Panics() != 1 {
		t.Fatalf("answers %+v, %d panics", got, s.Panics())
	}
}

// Bodies whose lengths or nesting msgpack would trust close the
// connection before anything decodes them (wire.CheckBody). Before, the
// nesting overflowed the connection goroutine's stack, a fatal error that
// took the whole process down, and each 4 GiB string claim grew a pooled
// decoder's buffer by a quarter, for good.
func TestUntrustworthyBodiesCloseTheConnection(t *testing.T) {
	s, ln := startFuzzServer(t, nil)
	// KeysReq's decoder skips a sixth field it does not know.
	nested := append([]byte{0x96, 0xa1, 'c', 0x90, 0x90, 0xc2, 0xc2}, bytes.Repeat([]byte{0x91}, 8<<20)...)
	if got := exchange(t, ln, wire.AppendFrame(nil, 1, wire.OpExist, 0, append(nested, 0xc0))); len(got) != 0 {
		t.Fatalf("8 MiB of nesting answered: %+v", got)
	}
	bomb := wire.AppendFrame(nil, 1, wire.OpPing, 0, []byte{0x92, 0xdb, 0xff, 0xff, 0xff, 0xff})
	for range 100 {
		if got := exchange(t, ln, bomb); len(got) != 0 {
			t.Fatalf("a 4 GiB string claim answered: %+v", got)
		}
	}
	b, _ := msgpack.Marshal(&echoReq{S: "x"})
	if got := exchange(t, ln, wire.AppendFrame(nil, 2, wire.OpPing, 0, b)); len(got) != 1 || got[0].h.Status != wire.OK || s.Panics() != 0 {
		t.Fatalf("after: %+v, %d panics", got, s.Panics())
	}
}
