// fuzz_test.go fuzzes the master as a peer reaches it: sequences of
// requests, any opcode, valid, mutated or arbitrary bodies, through the
// RPC server's connection loop and the handlers register() installs.
// `go test` replays the seeds and testdata/fuzz/; to explore:
//
//	go test -ldflags=-checklinkname=0 -run='^$' -fuzz='^FuzzMasterRequests$' -fuzztime=60s -parallel=1 ./gostore/master/server

package server

import (
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/gostore/gostore/gostore/internal/fuzzkit"
	"github.com/gostore/gostore/gostore/master"
	"github.com/gostore/gostore/gostore/rpc"
	"github.com/gostore/gostore/gostore/wire"
)

// masterOp is an opcode register() serves, with the types its handler
// decodes and answers (mirroring register(); TestFuzzOpsCoverTheProtocol
// keeps the list complete).
type masterOp struct {
	op        wire.Op
	req, resp func() any
}

func newOf[T any]() func() any { return func() any { return new(T) } }

var masterOps = []masterOp{
	{wire.OpPing, newOf[wire.PingReq](), newOf[wire.PingResp]()},
	{wire.OpMountSegment, newOf[wire.MountReq](), newOf[wire.MountResp]()},
	{wire.OpUnmountSegment, newOf[wire.UnmountReq](), newOf[struct{}]()},
	{wire.OpQuerySegments, newOf[wire.QuerySegmentsReq](), newOf[wire.QuerySegmentsResp]()},
	{wire.OpPutStart, newOf[wire.PutStartReq](), newOf[wire.PutStartResp]()},
	{wire.OpPutEnd, newOf[wire.KeysReq](), newOf[wire.CodesResp]()},
	{wire.OpPutRevoke, newOf[wire.KeysReq](), newOf[wire.CodesResp]()},
	{wire.OpGetReplicas, newOf[wire.KeysReq](), newOf[wire.GetReplicasResp]()},
	{wire.OpExist, newOf[wire.KeysReq](), newOf[wire.CodesResp]()},
	{wire.OpRemove, newOf[wire.RemoveReq](), newOf[wire.CodesResp]()},
	{wire.OpRemoveByRegex, newOf[wire.RemoveByRegexReq](), newOf[wire.CountResp]()},
	{wire.OpRemoveAll, newOf[wire.RemoveAllReq](), newOf[wire.CountResp]()},
	{wire.OpUpsertStart, newOf[wire.PutStartReq](), newOf[wire.PutStartResp]()},
	{wire.OpReadDone, newOf[wire.KeysReq](), newOf[struct{}]()},
	{wire.OpCreateTask, newOf[wire.CreateTaskReq](), newOf[wire.TaskPlan]()},
	{wire.OpTaskDone, newOf[wire.TaskDoneReq](), newOf[struct{}]()},
	{wire.OpQueryTask, newOf[wire.QueryTaskReq](), newOf[wire.TaskInfo]()},
	{wire.OpOffloadHeartbeat, newOf[wire.OffloadHeartbeatReq](), newOf[wire.OffloadHeartbeatResp]()},
	{wire.OpNotifyOffloaded, newOf[wire.NotifyOffloadedReq](), newOf[wire.CodesResp]()},
	{wire.OpEvictDiskReplicas, newOf[wire.KeysReq](), newOf[wire.CodesResp]()},
	{wire.OpRecoverDisk, newOf[wire.RecoverDiskReq](), newOf[wire.CodesResp]()},
	{wire.OpPlanJoin, newOf[wire.PlanJoinReq](), newOf[wire.PlanJoinResp]()},
	{wire.OpPlanMembers, newOf[wire.PlanMembersReq](), newOf[wire.PlanMembersResp]()},
	{wire.OpEvictUntil, newOf[wire.EvictUntilReq](), newOf[wire.EvictUntilResp]()},
	{wire.OpClientLeave, newOf[wire.LeaveReq](), newOf[struct{}]()},
	{wire.OpReplicaClear, newOf[wire.ReplicaClearReq](), newOf[wire.KeysResp]()},
	{wire.OpUnmountLocalDisk, newOf[wire.UnmountLocalDiskReq](), newOf[struct{}]()},
	{wire.OpPutUnhold, newOf[wire.KeysReq](), newOf[struct{}]()},
}

func masterOpOf(op wire.Op) *masterOp {
	for i := range masterOps {
		if masterOps[i].op == op {
			return &masterOps[i]
		}
	}
	return nil
}

// The input format is compact, because Go's fuzzer minimizes every input
// that finds new coverage with a pass quadratic in its length, each try a
// fresh master (0.1-0.5 ms): a sequence must fit in a few hundred bytes.
// So a request body is not spelled out in msgpack but chosen: each field
// of the op's request type takes a byte that picks among a few values
// (fuzzStrings, fuzzUints...), shared by every op so that clients, keys,
// segments and task ids meet across requests; the encoding may then be
// mutated, or the body given raw.
//
//	input    = flags request*          flags bit 0: --enable_offload
//	request  = selector ...            selector modulo selectors picks:
//	  masterOps[i]  form ...           form modulo 4: 0-1 a valid request
//	                                   (the choice bytes); 2 that request
//	                                   encoded, then a count and 1-4
//	                                   mutations (kind, position, byte);
//	                                   3 a raw body (length byte, bytes)
//	  selTick   seconds                the clock moves on, the tick loop's
//	                                   pass runs (expiry, eviction, reclaims)
//	  selRaw    op(u16 le) length body an opcode register() may not serve
//
// Reading past the input's end gives zeros; a request that starts there
// is not sent.
const (
	selTick   = 28 // len(masterOps), which TestFuzzOpsCoverTheProtocol checks
	selRaw    = selTick + 1
	selectors = selTick + 2
)

// maxRequests bounds a sequence, so that an iteration stays short.
const maxRequests = 64

var (
	fuzzStrings = []string{"", "c1", "c2", "k1", "k2", "k3", "k/4", "10.0.0.1:7000", "10.0.0.2:7000",
		"h1", "disk-1", "1", "2", "^k[0-9]$", "((", "cuda:0"}
	fuzzUints = []uint64{0, 1, 2, 3, 4, 5, 64, 100, 4096, 1 << 20, 1 << 30, 1 << 40, 1<<48 + 1, 1 << 62,
		math.MaxInt64, math.MaxUint64}
	fuzzInts   = []int64{0, 1, 2, 3, -1, 16, 1 << 31, -1 << 31, 1 << 40, math.MaxInt64, math.MinInt64}
	fuzzFloats = []float64{0, 0.1, 0.5, 0.9, 1, 1.5, -1, math.NaN(), math.Inf(1), math.SmallestNonzeroFloat64}
	fuzzCodes  = []wire.Code{wire.OK, wire.ErrInternal, wire.ErrTransferFail, wire.ErrObjectNotFound, -12345, math.MinInt32}
)

var codeType = reflect.TypeFor[wire.Code]()

// chooser reads the input's choices; past its end every choice is 0.
type chooser struct{ b []byte }

func (c *chooser) byte() byte {
	if len(c.b) == 0 {
		return 0
	}
	v := c.b[0]
	c.b = c.b[1:]
	return v
}

func (c *chooser) bytes(n int) []byte {
	n = min(n, len(c.b))
	v := c.b[:n:n]
	c.b = c.b[n:]
	return v
}

func pick[T any](c *chooser, from []T) T { return from[int(c.byte())%len(from)] }

// fillChoices sets v (a request, or a part of one) from c's choices: a
// byte per scalar, a count (0-4) and the elements for a list.
func fillChoices(c *chooser, v reflect.Value) {
	switch {
	case v.Type() == codeType:
		v.SetInt(int64(pick(c, fuzzCodes)))
		return
	case v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.Uint8:
		v.SetBytes(c.bytes(int(c.byte() % 8)))
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fillChoices(c, v.Field(i))
			}
		}
	case reflect.Slice:
		n := int(c.byte() % 5)
		v.Set(reflect.MakeSlice(v.Type(), n, n))
		for i := range n {
			fillChoices(c, v.Index(i))
		}
	case reflect.String:
		v.SetString(pick(c, fuzzStrings))
	case reflect.Bool:
		v.SetBool(c.byte()&1 != 0)
	case reflect.Uint8:
		v.SetUint(uint64(c.byte() % 4)) // TaskKind: 0 to 3, two of them valid
	case reflect.Uint64:
		v.SetUint(pick(c, fuzzUints))
	case reflect.Int, reflect.Int64:
		v.SetInt(pick(c, fuzzInts))
	case reflect.Float64:
		v.SetFloat(pick(c, fuzzFloats))
	default:
		panic(fmt.Sprintf("fillChoices: no choices for %v", v.Type()))
	}
}

// choose is fillChoices' inverse, for the seeds: the choice bytes that make v
// (whose strings and numbers must be among the choices).
func choose(tb testing.TB, v reflect.Value) []byte {
	index := func(i int) []byte {
		if i < 0 {
			tb.Fatalf("seed value %v of %v is not a choice", v, v.Type())
		}
		return []byte{byte(i)}
	}
	find := func(n int, eq func(i int) bool) []byte {
		for i := range n {
			if eq(i) {
				return index(i)
			}
		}
		return index(-1)
	}
	switch {
	case v.Type() == codeType:
		return find(len(fuzzCodes), func(i int) bool { return int64(fuzzCodes[i]) == v.Int() })
	case v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.Uint8:
		return append([]byte{byte(v.Len())}, v.Bytes()...)
	}
	switch v.Kind() {
	case reflect.Struct:
		var out []byte
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				out = append(out, choose(tb, v.Field(i))...)
			}
		}
		return out
	case reflect.Slice:
		out := []byte{byte(v.Len())}
		for i := range v.Len() {
			out = append(out, choose(tb, v.Index(i))...)
		}
		return out
	case reflect.String:
		return find(len(fuzzStrings), func(i int) bool { return fuzzStrings[i] == v.String() })
	case reflect.Bool:
		if v.Bool() {
			return []byte{1}
		}
		return []byte{0}
	case reflect.Uint8:
		return []byte{byte(v.Uint())}
	case reflect.Uint64:
		return find(len(fuzzUints), func(i int) bool { return fuzzUints[i] == v.Uint() })
	case reflect.Int, reflect.Int64:
		return find(len(fuzzInts), func(i int) bool { return fuzzInts[i] == v.Int() })
	case reflect.Float64:
		return find(len(fuzzFloats), func(i int) bool { return math.Float64bits(fuzzFloats[i]) == math.Float64bits(v.Float()) })
	}
	tb.Fatalf("choose: %v", v.Type())
	return nil
}

type request struct {
	tick time.Duration // > 0: a tick after the clock moved this far
	op   wire.Op
	body []byte
}

func parseRequests(data []byte) (offload bool, reqs []request) {
	c := &chooser{data}
	offload = c.byte()&1 != 0
	for len(c.b) > 0 && len(reqs) < maxRequests {
		sel := int(c.byte()) % selectors
		switch {
		case sel == selTick:
			reqs = append(reqs, request{tick: time.Duration(c.byte())*time.Second + time.Millisecond})
		case sel == selRaw:
			op := wire.Op(binary.LittleEndian.Uint16([]byte{c.byte(), c.byte()}))
			reqs = append(reqs, request{op: op, body: c.bytes(int(c.byte()))})
		default:
			m := masterOps[sel]
			form := c.byte() % 4
			if form == 3 {
				reqs = append(reqs, request{op: m.op, body: c.bytes(int(c.byte()))})
				break
			}
			v := m.req()
			fillChoices(c, reflect.ValueOf(v).Elem())
			body, err := msgpack.Marshal(v)
			if err != nil {
				panic(err)
			}
			if form == 2 {
				body = mutate(c, body)
			}
			reqs = append(reqs, request{op: m.op, body: body})
		}
	}
	return offload, reqs
}

// mutate applies 1-4 mutations to a valid encoding: overwrite, insert or
// delete a byte, or cut the body short.
func mutate(c *chooser, b []byte) []byte {
	for range 1 + c.byte()%4 {
		kind, pos, val := c.byte()%4, int(c.byte()), c.byte()
		if len(b) == 0 {
			b = append(b, val)
			continue
		}
		pos %= len(b)
		switch kind {
		case 0:
			b[pos] = val
		case 1:
			b = append(b[:pos], append([]byte{val}, b[pos:]...)...)
		case 2:
			b = append(b[:pos], b[pos+1:]...)
		default:
			b = b[:pos]
		}
	}
	return b
}

// Seed requests, spelled as the values they choose.
type (
	opRequest struct {
		op  wire.Op
		req any
	}
	rawRequest struct {
		op   wire.Op
		body []byte
	}
	mutated struct {
		opRequest
		muts [][3]byte // kind, position, byte
	}
	tick byte // seconds
)

// encodeRequests is parseRequests' inverse, for the seeds.
func encodeRequests(tb testing.TB, offload bool, reqs ...any) []byte {
	out := []byte{0}
	if offload {
		out[0] = 1
	}
	sel := func(op wire.Op) byte {
		for i, m := range masterOps {
			if m.op == op {
				return byte(i)
			}
		}
		tb.Fatalf("seed op %v", op)
		return 0
	}
	for _, r := range reqs {
		switch r := r.(type) {
		case tick:
			out = append(out, selTick, byte(r))
		case rawRequest:
			if m := masterOpOf(r.op); m != nil {
				out = append(out, sel(r.op), 3, byte(len(r.body)))
			} else {
				out = binary.LittleEndian.AppendUint16(append(out, selRaw), uint16(r.op))
				out = append(out, byte(len(r.body)))
			}
			out = append(out, r.body...)
		case opRequest:
			out = append(out, sel(r.op), 0)
			out = append(out, choose(tb, reflect.ValueOf(r.req).Elem())...)
		case mutated:
			out = append(out, sel(r.op), 2)
			out = append(out, choose(tb, reflect.ValueOf(r.req).Elem())...)
			out = append(out, byte(len(r.muts)-1))
			for _, m := range r.muts {
				out = append(out, m[:]...)
			}
		default:
			tb.Fatalf("seed entry %T", r)
		}
	}
	return out
}

// clock is the master's: it moves only when a tick says so, so that an
// input replays alike (leases, client expiry and write takeovers follow
// the input, not the machine's speed).
type clock struct{ ns atomic.Int64 }

func (c *clock) Now() time.Time { return time.Unix(0, c.ns.Load()) }

// fuzzMaster is a master as Start builds it, without its sockets, tick
// loop, HTTP or state directory: a fresh core (on clk, deterministic
// placement) and the RPC server with register()'s handlers and the
// metrics' observer, serving an in-memory listener. Each iteration starts
// from a state no other touched, so a failing input replays alike. The
// metrics may be shared (nil: new ones): registering them takes 0.6 ms,
// four times the core, and what they count changes no answer (their
// gauges read the core they were made with only when scraped, which
// nothing does here).
func fuzzMaster(offload bool, clk *clock, log *slog.Logger, m *metrics) (*Server, *fuzzkit.Listener) {
	core := master.New(master.Config{EnableOffload: offload, Now: clk.Now, Rand: rand.New(rand.NewPCG(1, 2))})
	s := &Server{opts: Options{EnableOffload: offload}, log: log, core: core, stop: make(chan struct{}),
		evictNow: make(chan struct{}, 1), done: make(chan struct{}), metrics: m}
	if s.metrics == nil {
		s.metrics = newMetrics(core)
	}
	s.rpc = s.newRPCServer()
	s.register()
	ln := fuzzkit.NewListener()
	go s.rpc.Serve(ln)
	return s, ln
}

// peer sends requests one at a time and reads each answer, dialing again
// after the master closed the connection.
type peer struct {
	t    *testing.T
	ln   *fuzzkit.Listener
	c    net.Conn
	id   uint64
	mu   sync.Mutex
	hung bool
}

// call sends one frame; it returns the answer, or ok false when the
// master closed the connection instead. A master that does neither within
// 10 s fails the test.
func (p *peer) call(op wire.Op, body []byte) (h wire.Header, resp []byte, ok bool) {
	if p.c == nil {
		c, err := p.ln.Dial()
		if err != nil {
			p.t.Fatal(err)
		}
		p.c = c
	}
	p.id++
	c := p.c
	watchdog := time.AfterFunc(10*time.Second, func() {
		p.mu.Lock()
		p.hung = true
		p.mu.Unlock()
		c.Close()
	})
	_, werr := c.Write(wire.AppendFrame(nil, p.id, op, wire.OK, body))
	var err error
	if werr == nil {
		h, resp, err = wire.ReadFrame(c, nil)
	}
	watchdog.Stop()
	p.mu.Lock()
	hung := p.hung
	p.mu.Unlock()
	if hung {
		p.t.Fatalf("the master neither answered %v nor closed within 10s", op)
	}
	if werr != nil || err != nil {
		if werr == nil && err != io.EOF {
			p.t.Fatalf("%v: the master sent a bad frame: %v", op, err)
		}
		c.Close()
		p.c = nil
		return h, nil, false
	}
	if h.ID != p.id || h.Op != op {
		p.t.Fatalf("asked %d/%v, answered %d/%v", p.id, op, h.ID, h.Op)
	}
	return h, resp, true
}

func (p *peer) close() {
	if p.c != nil {
		p.c.Close()
	}
}

// decodes reports whether the RPC server's HandleFunc accepts body for
// m's request type: the same vetting and the same decoder.
func (m *masterOp) decodes(body []byte) bool {
	return wire.CheckBody(body) == nil && msgpack.Unmarshal(body, m.req()) == nil
}

// checkCodes fails t for a per-key code outside the contract's table (or
// INTERNAL_ERROR, which the core never gives).
func checkCodes(t *testing.T, op wire.Op, resp any) {
	var codes []wire.Code
	switch r := resp.(type) {
	case *wire.CodesResp:
		codes = r.Codes
	case *wire.PutStartResp:
		for _, x := range r.Results {
			codes = append(codes, x.Code)
		}
	case *wire.GetReplicasResp:
		for _, x := range r.Results {
			codes = append(codes, x.Code)
		}
	}
	for i, c := range codes {
		if !c.Known() || c == wire.ErrInternal {
			t.Fatalf("%v: key %d answered %v, not a contract code for a request", op, i, c)
		}
	}
}

// FuzzMasterRequests sends a sequence of requests (see parseRequests) to
// a fresh master and checks every answer: a request the RPC server can
// decode is answered, on the same id and opcode, with a code of the
// contract's table other than INTERNAL_ERROR (which only a handler panic
// or an error without a code produce), a body that decodes as the op's
// answer (OK) or as the error's message, and per-key codes from the table
// too; a request it cannot decode, or an opcode the master does not
// serve, closes that connection (the next request dials again). No
// handler may panic (rpc.Server.Panics), and after the sequence the
// master still answers Ping and Exist.
func FuzzMasterRequests(f *testing.F) {
	for _, seed := range masterSeeds(f) {
		f.Add(seed)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	shared := newMetrics(master.New(master.Config{}))
	f.Fuzz(func(t *testing.T, data []byte) { runRequests(t, data, quiet, shared) })
}

func runRequests(t *testing.T, data []byte, log *slog.Logger, shared *metrics) {
	offload, reqs := parseRequests(data)
	clk := &clock{}
	clk.ns.Store(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	s, ln := fuzzMaster(offload, clk, log, shared)
	defer s.rpc.Close()
	p := &peer{t: t, ln: ln}
	defer p.close()
	for _, r := range reqs {
		if r.tick > 0 {
			clk.ns.Add(int64(r.tick))
			s.core.Tick()
			continue
		}
		m := masterOpOf(r.op)
		h, body, answered := p.call(r.op, r.body)
		switch {
		case m == nil && answered:
			t.Fatalf("opcode %d, not served, answered %v", uint16(r.op), h.Status)
		case m == nil:
		case !m.decodes(r.body) && answered:
			t.Fatalf("%v: undecodable body % x answered %v", r.op, r.body, h.Status)
		case !m.decodes(r.body):
		case !answered:
			t.Fatalf("%v: the master closed the connection on a valid body % x", r.op, r.body)
		case !h.Status.Known() || h.Status == wire.ErrInternal:
			var msg string
			msgpack.Unmarshal(body, &msg)
			t.Fatalf("%v: answered %v (%q) to % x", r.op, h.Status, msg, r.body)
		case h.Status != wire.OK:
			var msg string
			if err := msgpack.Unmarshal(body, &msg); err != nil {
				t.Fatalf("%v: the message of %v does not decode: %v", r.op, h.Status, err)
			}
		default:
			resp := m.resp()
			if err := rpc.DecodeReply(r.op, h.Status, body, resp); err != nil {
				t.Fatalf("%v: the answer to % x does not decode: %v", r.op, r.body, err)
			}
			checkCodes(t, r.op, resp)
		}
		if n := s.rpc.Panics(); n != 0 {
			t.Fatalf("%v: a handler panicked on % x", r.op, r.body)
		}
	}
	// Still serving: a fresh client's ping, and a lookup.
	ping, _ := msgpack.Marshal(&wire.PingReq{ClientID: "after"})
	exist, _ := msgpack.Marshal(&wire.KeysReq{ClientID: "after", Keys: []string{"k1"}})
	for _, r := range []request{{op: wire.OpPing, body: ping}, {op: wire.OpExist, body: exist}} {
		h, b, ok := p.call(r.op, r.body)
		if !ok || h.Status != wire.OK {
			t.Fatalf("after the sequence, %v: answered %v (%v)", r.op, h.Status, ok)
		}
		resp := masterOpOf(r.op).resp()
		if err := rpc.DecodeReply(r.op, h.Status, b, resp); err != nil {
			t.Fatalf("after the sequence, %v: %v", r.op, err)
		}
		checkCodes(t, r.op, resp)
	}
}

// masterSeeds are valid requests of every op: one scenario that clients'
// lives would send (mount, writes, reads, tasks, the SSD tier, plans,
// eviction, unmount), each request alone after a mount, and some the
// master must refuse, mutated or raw.
func masterSeeds(tb testing.TB) [][]byte {
	seg := wire.SegmentDesc{Name: "10.0.0.1:7000", ClientID: "c1", Size: 1 << 20, HostID: "h1", Offload: true}
	seg2 := wire.SegmentDesc{Name: "10.0.0.2:7000", ClientID: "c2", Size: 1 << 20, HostID: "h1", Offload: true}
	keys := []string{"k1", "k2"}
	cfg := wire.ReplicaConfig{ReplicaNum: 2, Preferred: []string{seg.Name}}
	mount := opRequest{wire.OpMountSegment, &wire.MountReq{Seg: seg}}
	life := []any{
		opRequest{wire.OpPing, &wire.PingReq{ClientID: "c1"}},
		mount,
		opRequest{wire.OpMountSegment, &wire.MountReq{Seg: seg2}},
		opRequest{wire.OpPutStart, &wire.PutStartReq{ClientID: "c1", Keys: keys, Sizes: []uint64{4096, 100}, Config: cfg, HostID: "h1"}},
		opRequest{wire.OpPutEnd, &wire.KeysReq{ClientID: "c1", Keys: keys, Epochs: []uint64{1, 2}, HoldMS: 4096}},
		opRequest{wire.OpPutUnhold, &wire.KeysReq{ClientID: "c1", Keys: keys, Epochs: []uint64{1, 2}}},
		opRequest{wire.OpGetReplicas, &wire.KeysReq{ClientID: "c1", Keys: []string{"k1", "k3"}, ForRead: true}},
		opRequest{wire.OpReadDone, &wire.KeysReq{ClientID: "c1", Keys: []string{"k1"}, Epochs: []uint64{1}}},
		opRequest{wire.OpGetReplicas, &wire.KeysReq{Keys: []string{"k2"}, Peek: true}},
		opRequest{wire.OpExist, &wire.KeysReq{Keys: []string{"k1", "k3"}}},
		opRequest{wire.OpQuerySegments, &wire.QuerySegmentsReq{IDs: []uint64{1, 2, 3}}},
		opRequest{wire.OpCreateTask, &wire.CreateTaskReq{ClientID: "c1", Kind: wire.TaskMove, Key: "k2", Source: seg.Name, Targets: []string{seg2.Name}}},
		opRequest{wire.OpQueryTask, &wire.QueryTaskReq{ID: "1"}},
		opRequest{wire.OpTaskDone, &wire.TaskDoneReq{ClientID: "c1", ID: "1", Code: wire.OK}},
		opRequest{wire.OpUpsertStart, &wire.PutStartReq{ClientID: "c1", Keys: []string{"k1", "k/4"}, Sizes: []uint64{64, 64}, Config: cfg}},
		opRequest{wire.OpPutRevoke, &wire.KeysReq{ClientID: "c1", Keys: []string{"k/4"}, Epochs: []uint64{5}}},
		opRequest{wire.OpOffloadHeartbeat, &wire.OffloadHeartbeatReq{ClientID: "c2", Max: 16, StorageID: "disk-1"}},
		opRequest{wire.OpNotifyOffloaded, &wire.NotifyOffloadedReq{ClientID: "c2", Endpoint: "10.0.0.2:7000", Keys: keys, Sizes: []uint64{4096, 100}, StorageID: "disk-1"}},
		opRequest{wire.OpEvictDiskReplicas, &wire.KeysReq{ClientID: "c2", Keys: []string{"k2"}}},
		opRequest{wire.OpRecoverDisk, &wire.RecoverDiskReq{ClientID: "c2", Endpoint: "10.0.0.2:7000", StorageID: "disk-1", Keys: []string{"k3"}, Sizes: []uint64{100}}},
		opRequest{wire.OpReplicaClear, &wire.ReplicaClearReq{ClientID: "c1", Keys: keys, Segment: seg2.Name}},
		opRequest{wire.OpPlanJoin, &wire.PlanJoinReq{ClientID: "c1", Segment: seg.Name}},
		opRequest{wire.OpPlanMembers, &wire.PlanMembersReq{}},
		opRequest{wire.OpEvictUntil, &wire.EvictUntilReq{Ratio: 0.1}},
		tick(1),
		opRequest{wire.OpRemove, &wire.RemoveReq{Keys: []string{"k1"}, Force: true}},
		opRequest{wire.OpRemoveByRegex, &wire.RemoveByRegexReq{Pattern: "^k[0-9]$"}},
		opRequest{wire.OpUnmountLocalDisk, &wire.UnmountLocalDiskReq{ClientID: "c2"}},
		opRequest{wire.OpUnmountSegment, &wire.UnmountReq{ClientID: "c2", Name: seg2.Name, GraceMs: 100}},
		opRequest{wire.OpUnmountSegment, &wire.UnmountReq{ClientID: "c1", Name: seg.Name}},
		opRequest{wire.OpClientLeave, &wire.LeaveReq{ClientID: "c2"}},
		opRequest{wire.OpRemoveAll, &wire.RemoveAllReq{Force: true}},
		tick(11), // past client_ttl: c1 expires
	}
	seeds := [][]byte{encodeRequests(tb, true, life...), encodeRequests(tb, false, life...)}
	for _, r := range life {
		if r, ok := r.(opRequest); ok {
			seeds = append(seeds, encodeRequests(tb, true, mount, r))
		}
	}
	put := opRequest{wire.OpPutStart, &wire.PutStartReq{ClientID: "c1", Keys: keys, Sizes: []uint64{4096, 100}}}
	seeds = append(seeds,
		// Abandoned writes taken over, reclaimed; leases running out.
		encodeRequests(tb, false, mount, put, tick(31), put, tick(255), tick(255), tick(255),
			opRequest{wire.OpGetReplicas, &wire.KeysReq{Keys: keys, ForRead: true}}),
		// Opcodes nobody serves, garbage, and lengths msgpack would trust.
		encodeRequests(tb, false, rawRequest{0, nil}, rawRequest{wire.OpStageOffloaded, nil},
			rawRequest{63, nil}, rawRequest{0xffff, nil}),
		encodeRequests(tb, false, rawRequest{wire.OpPutStart, []byte{0xc1}},
			rawRequest{wire.OpExist, []byte{0x91, 0xdb, 0xff, 0xff, 0xff, 0xff}},
			rawRequest{wire.OpQuerySegments, []byte{0x91, 0xdd, 0xff, 0xff, 0xff, 0xff}}),
		// Mutated encodings: a field's type changed, a byte inserted, cut.
		encodeRequests(tb, false, mount, mutated{put, [][3]byte{{0, 1, 0xc0}, {1, 5, 0x91}, {3, 30, 0}}}),
		// Values the master must refuse with a code.
		encodeRequests(tb, true, mount, opRequest{wire.OpEvictUntil, &wire.EvictUntilReq{Ratio: math.NaN()}},
			opRequest{wire.OpPutStart, &wire.PutStartReq{ClientID: "c1", Keys: keys, Sizes: []uint64{1}}},
			opRequest{wire.OpPutStart, &wire.PutStartReq{ClientID: "c1", Keys: keys, Sizes: []uint64{0, 1 << 62},
				Config: wire.ReplicaConfig{ReplicaNum: math.MaxInt64}}},
			opRequest{wire.OpCreateTask, &wire.CreateTaskReq{ClientID: "c1", Kind: 3, Key: "k1", Targets: []string{"k1"}}},
			opRequest{wire.OpRemoveByRegex, &wire.RemoveByRegexReq{Pattern: "(("}},
			opRequest{wire.OpTaskDone, &wire.TaskDoneReq{ClientID: "c1", ID: "2", Code: -12345}},
			opRequest{wire.OpUnmountSegment, &wire.UnmountReq{ClientID: "c1", Name: seg.Name, GraceMs: math.MaxUint64}}),
	)
	return seeds
}

// The fuzz target's list of ops is register()'s: every opcode of the
// protocol, each once, and the selector constants agree with its length;
// each is served (a zero request is answered), and the seeds encode.
func TestFuzzOpsCoverTheProtocol(t *testing.T) {
	seen := map[wire.Op]bool{}
	for _, m := range masterOps {
		if !m.op.Valid() || seen[m.op] {
			t.Errorf("%v listed twice or not a master op", m.op)
		}
		seen[m.op] = true
	}
	for op := wire.Op(1); op.Valid(); op++ {
		if !seen[op] {
			t.Errorf("%v missing from masterOps", op)
		}
	}
	if selTick != len(masterOps) {
		t.Fatalf("selTick is %d, masterOps has %d", selTick, len(masterOps))
	}
	s, ln := fuzzMaster(true, &clock{}, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	defer s.rpc.Close()
	p := &peer{t: t, ln: ln}
	defer p.close()
	for _, m := range masterOps {
		b, _ := msgpack.Marshal(m.req())
		if _, _, ok := p.call(m.op, b); !ok {
			t.Errorf("%v: a zero request was not answered", m.op)
		}
	}
	// The scenario seed, parsed back, is the requests it was made of.
	_, reqs := parseRequests(masterSeeds(t)[0])
	want, _ := msgpack.Marshal(&wire.PutStartReq{ClientID: "c1", Keys: []string{"k1", "k2"}, Sizes: []uint64{4096, 100},
		Config: wire.ReplicaConfig{ReplicaNum: 2, Preferred: []string{"10.0.0.1:7000"}}, HostID: "h1"})
	if len(reqs) != 33 || reqs[3].op != wire.OpPutStart || string(reqs[3].body) != string(want) || reqs[24].tick != time.Second+time.Millisecond {
		t.Fatalf("the scenario seed parses as %d requests: %+v", len(reqs), reqs[3])
	}
}
