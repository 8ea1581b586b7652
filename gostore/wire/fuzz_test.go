// fuzz_test.go fuzzes what this package decodes from a peer: frames
// (ReadFrame, ParseHeader) and message bodies (CheckBody, every
// hand-written DecodeMsgpack, and the requests the master decodes by
// reflection). `go test` replays the seeds below and testdata/fuzz/ as
// plain tests; to explore beyond them (FuzzReadFrame, FuzzMessages):
//
//	go test -ldflags=-checklinkname=0 -run='^$' -fuzz='^FuzzMessages$' -fuzztime=60s -parallel=1 ./gostore/wire

package wire

import (
	"bytes"
	"io"
	"reflect"
	"runtime/metrics"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// allocSlack is what a call may seem to allocate besides what it should.
// The runtime counts a large allocation (any body worth worrying about) at
// once, but small ones a span at a time, when the span is replaced or a GC
// flushes every cache: the fuzzing engine's own small allocations since
// the last flush can land in one measurement (400 KB was seen). 16 MiB is
// far above that and far below MaxBody, or the gigabytes of a trusted
// length.
const allocSlack = 16 << 20

// heapAllocs reads the bytes allocated so far (see allocSlack).
func heapAllocs(s []metrics.Sample) uint64 {
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// FuzzReadFrame reads a stream of frames as a server connection does
// (reusing its body buffer) and checks that arbitrary bytes never panic,
// that a body is never larger than MaxBody, that a header announcing more
// is refused before a byte of body is read or allocated, and that no call
// allocates more than the body it returns: the peer's length is trusted
// only up to MaxBody (the limit itself is wire's policy, checked here as
// it stands).
func FuzzReadFrame(f *testing.F) {
	f.Add(AppendFrame(nil, 1, OpPing, OK, []byte{0x91, 0xa1, 'c'}))
	f.Add(append(AppendFrame(nil, 42, OpGetReplicas, ErrObjectNotFound, []byte("body")),
		AppendFrame(nil, 43, OpPing, OK, nil)...))
	huge := make([]byte, HeaderSize)
	PutHeader(huge, Header{Len: MaxBody + 1, ID: 7, Op: OpPutStart})
	f.Add(huge)
	atLimit := make([]byte, HeaderSize)
	PutHeader(atLimit, Header{Len: MaxBody, ID: 8, Op: OpPutStart})
	f.Add(atLimit) // the limit itself: accepted, then truncated
	f.Add(AppendFrame(nil, 1, OpPing, OK, []byte("0123456789"))[:HeaderSize+3])
	f.Add([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	f.Add([]byte{})

	samples := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	f.Fuzz(func(t *testing.T, data []byte) {
		// ParseHeader reads exactly HeaderSize bytes; it must agree with
		// PutHeader field for field and only refuse what exceeds MaxBody.
		if len(data) >= HeaderSize {
			h, err := ParseHeader(data)
			if (err != nil) != (h.Len > MaxBody) {
				t.Fatalf("ParseHeader(% x): len %d, err %v", data[:HeaderSize], h.Len, err)
			}
			var back [HeaderSize]byte
			PutHeader(back[:], h)
			if !bytes.Equal(back[:], data[:HeaderSize]) {
				t.Fatalf("header % x parsed as %+v, re-encoded as % x", data[:HeaderSize], h, back)
			}
		}

		r := bytes.NewReader(data)
		var buf []byte
		for {
			before := r.Len()
			a0 := heapAllocs(samples)
			h, body, err := ReadFrame(r, buf)
			allocated := heapAllocs(samples) - a0
			consumed := before - r.Len()
			if err != nil {
				if h.Len > MaxBody {
					if consumed != HeaderSize {
						t.Fatalf("oversize frame (%d bytes): %d bytes read, want the header only", h.Len, consumed)
					}
					if allocated > allocSlack {
						t.Fatalf("oversize frame (%d bytes) refused after allocating %d bytes", h.Len, allocated)
					}
				}
				if consumed == 0 && err != io.EOF {
					t.Fatalf("no byte left, error %v, want io.EOF", err)
				}
				if consumed > 0 && err == io.EOF { // the server's test for a clean end
					t.Fatalf("a frame cut short reads as a clean end: %v", err)
				}
				if uint64(allocated) > uint64(h.Len)+allocSlack {
					t.Fatalf("a failed read of a %d-byte frame allocated %d bytes", h.Len, allocated)
				}
				return
			}
			if h.Len > MaxBody || len(body) != int(h.Len) || consumed != HeaderSize+len(body) {
				t.Fatalf("frame %+v: body of %d bytes, %d bytes consumed", h, len(body), consumed)
			}
			if uint64(allocated) > uint64(h.Len)+allocSlack {
				t.Fatalf("reading a %d-byte frame allocated %d bytes", h.Len, allocated)
			}
			if got := AppendFrame(nil, h.ID, h.Op, h.Status, body); !bytes.Equal(got, data[len(data)-before:len(data)-r.Len()]) {
				t.Fatalf("frame %+v re-encodes differently", h)
			}
			if cap(body) <= 1<<20 {
				buf = body // as the server keeps a grown buffer
			}
		}
	})
}

// message is a type decoded from a peer's bytes: new gives a fresh value
// to decode into; floats marks one whose NaNs defeat reflect.DeepEqual.
type message struct {
	new    func() any
	floats bool
}

// maxDecodeAlloc bounds what decoding a body of n bytes that passed
// CheckBody may allocate: no list there claims more elements than bytes
// remain, and no element of a message takes more than 128 bytes of
// memory. More means a length the peer wrote was trusted.
func maxDecodeAlloc(n int) uint64 { return allocSlack + 128*uint64(n) }

// messages are the types with a hand-written DecodeMsgpack on the put and
// get paths (codec.go), then every other request the master decodes (by
// reflection, or by hand where reflection trusted a list's length), then
// StageReq. The fuzzer's first byte picks one (modulo the list's length);
// seeds name it by index, so the list only grows at its end.
var messages = []message{
	{new: func() any { return new(KeysReq) }},
	{new: func() any { return new(ReplicaConfig) }},
	{new: func() any { return new(PutStartReq) }},
	{new: func() any { return new(PutStartResp) }},
	{new: func() any { return new(GetReplicasResp) }},
	{new: func() any { return new(CodesResp) }},
	{new: func() any { return new(PingReq) }},
	{new: func() any { return new(LeaveReq) }},
	{new: func() any { return new(MountReq) }},
	{new: func() any { return new(UnmountReq) }},
	{new: func() any { return new(UnmountLocalDiskReq) }},
	{new: func() any { return new(QuerySegmentsReq) }},
	{new: func() any { return new(RemoveReq) }},
	{new: func() any { return new(ReplicaClearReq) }},
	{new: func() any { return new(RemoveByRegexReq) }},
	{new: func() any { return new(RemoveAllReq) }},
	{new: func() any { return new(CreateTaskReq) }},
	{new: func() any { return new(TaskDoneReq) }},
	{new: func() any { return new(QueryTaskReq) }},
	{new: func() any { return new(OffloadHeartbeatReq) }},
	{new: func() any { return new(NotifyOffloadedReq) }},
	{new: func() any { return new(RecoverDiskReq) }},
	{new: func() any { return new(PlanJoinReq) }},
	{new: func() any { return new(PlanMembersReq) }},
	{new: func() any { return new(EvictUntilReq) }, floats: true},
	{new: func() any { return new(StageReq) }}, // a client's SSD tier serves it to peers
}

// messageSeeds are representative values of messages (same order), encoded
// with the package's own encoders as the fuzzer's starting points.
func messageSeeds() []any {
	cfg := ReplicaConfig{ReplicaNum: 2, SoftPin: true, Preferred: []string{"a:1", "b:2"}, SameNode: true}
	reps := []Replica{{SegID: 1, Offset: 1 << 40, Grant: bytes.Repeat([]byte{7}, 56)}, {SegID: 7, Offset: 64}}
	seg := SegmentDesc{ID: 3, Name: "10.0.0.1:12345", ClientID: "c1", Size: 1 << 30, HostID: "h",
		ShmPath: "/proc/1/fd/3", TransferAddr: "10.0.0.1:7000", Offload: true, Location: "cuda:0",
		IPC: []byte{1, 2, 3}, GPUPCI: "0000:3b:00.0", Base: 1 << 44, UCX: bytes.Repeat([]byte{0xa5}, 300)}
	return []any{
		&KeysReq{ClientID: "c", Keys: []string{"k1", "ключ"}, Epochs: []uint64{1, 1 << 63}, ForRead: true, Peek: true},
		&cfg,
		&PutStartReq{ClientID: "c", Keys: []string{"x", "y"}, Sizes: []uint64{4096, 1}, Config: cfg, HostID: "h"},
		&PutStartResp{Results: []PutStartResult{{Code: OK, Replicas: reps, Epoch: 9},
			{Code: ErrNoAvailableHandle, NoSpace: &NoSpace{Why: "pool full", Space: SpaceComing, Passes: 12, Progress: 3}}}},
		&GetReplicasResp{Results: []GetResult{{Code: OK, Size: 5, Replicas: reps, LeaseMS: 10000, Epoch: 77, Disk: "10.0.0.1:1", Placed: 1 << 60},
			{Code: ErrObjectNotFound}}},
		&CodesResp{Codes: []Code{OK, ErrObjectHasLease, ErrUnableOffload}},
		&PingReq{ClientID: "c1"},
		&LeaveReq{ClientID: "c1"},
		&MountReq{Seg: seg, GrantKey: bytes.Repeat([]byte{9}, 32)},
		&UnmountReq{ClientID: "c1", Name: seg.Name, GraceMs: 1000},
		&UnmountLocalDiskReq{ClientID: "c1"},
		&QuerySegmentsReq{IDs: []uint64{1, 2, 1 << 60}},
		&RemoveReq{Keys: []string{"k1", "k2"}, Force: true},
		&ReplicaClearReq{ClientID: "c1", Keys: []string{"k1"}, Segment: seg.Name},
		&RemoveByRegexReq{Pattern: "^k[0-9]+$", Force: true},
		&RemoveAllReq{Force: true},
		&CreateTaskReq{ClientID: "c1", Kind: TaskMove, Key: "k1", Source: "a:1", Targets: []string{"b:2"}},
		&TaskDoneReq{ClientID: "c1", ID: "t-1", Code: ErrTransferFail},
		&QueryTaskReq{ID: "t-1"},
		&OffloadHeartbeatReq{ClientID: "c1", Max: 64, StorageID: "disk-1"},
		&NotifyOffloadedReq{ClientID: "c1", Endpoint: "10.0.0.1:9", Keys: []string{"k1"}, Sizes: []uint64{4096}, StorageID: "disk-1", Epochs: []uint64{9}},
		&RecoverDiskReq{ClientID: "c1", Endpoint: "10.0.0.1:9", StorageID: "disk-1", Keys: []string{"k1"}, Sizes: []uint64{4096}},
		&PlanJoinReq{ClientID: "c1", Segment: seg.Name},
		&PlanMembersReq{},
		&EvictUntilReq{Ratio: 0.5},
		&StageReq{Keys: []string{"k1", "k2"}, Sizes: []uint64{4096, 1 << 20}},
	}
}

// FuzzMessages decodes arbitrary bytes as one of messages (picked by the
// first byte), as the RPC server does: CheckBody, then msgpack.Unmarshal.
// Decoding must never panic nor allocate beyond maxDecodeAlloc (a length
// claimed and not delivered would kill the process: no recover() catches
// that). When it succeeds, the value must survive a round trip through
// the package's encoder: re-encoded and decoded again it is equal
// (reflect.DeepEqual; for types with floats, the two encodings are equal
// instead, NaN being unequal to itself), a second round trip gives the
// same bytes, and CheckBody passes the encoding. A hand-written decoder
// that accepted something its encoder cannot reproduce fails here.
// (Without CheckBody, msgpack's own string decoding would fail the
// allocation bound: see CheckBody; TestDecodersBoundListsAlone covers the
// hand-written decoders alone.)
func FuzzMessages(f *testing.F) {
	seeds := messageSeeds()
	if len(seeds) != len(messages) {
		f.Fatalf("%d seeds for %d messages", len(seeds), len(messages))
	}
	for i, v := range seeds {
		if reflect.TypeOf(v) != reflect.TypeOf(messages[i].new()) {
			f.Fatalf("seed %d is a %T, message %d a %T", i, v, i, messages[i].new())
		}
		b, err := msgpack.Marshal(v)
		if err != nil {
			f.Fatal(err)
		}
		// The seeds double as a check that each decoder reads its
		// encoder's bytes back (for the requests decoded by hand and
		// encoded by reflection, the two halves are different code).
		back := messages[i].new()
		if err := msgpack.Unmarshal(b, back); err != nil || !reflect.DeepEqual(back, v) {
			f.Fatalf("%T: seed read back as %+v, %v", v, back, err)
		}
		f.Add(byte(i), b)
		f.Add(byte(i), []byte{0x90})                                       // an empty array: too few fields
		f.Add(byte(i), append([]byte{0x91}, 0xdd, 0xff, 0xff, 0xff, 0xff)) // a 4G-element list, cut short
	}
	samples := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	f.Fuzz(func(t *testing.T, kind byte, data []byte) {
		m := messages[int(kind)%len(messages)]
		v := m.new()
		a0 := heapAllocs(samples)
		err := Unmarshal(data, v)
		if allocated := heapAllocs(samples) - a0; allocated > maxDecodeAlloc(len(data)) {
			t.Fatalf("%T: decoding %d bytes allocated %d (err %v)", v, len(data), allocated, err)
		}
		if err != nil {
			return // refused: fine, as long as it did not panic
		}
		b1, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatalf("%T decoded from % x does not encode: %v", v, data, err)
		}
		// CheckBody must never refuse what an encoder writes.
		if err := CheckBody(b1); err != nil {
			t.Fatalf("%T: CheckBody refuses its encoding % x: %v", v, b1, err)
		}
		v2 := m.new()
		if err := msgpack.Unmarshal(b1, v2); err != nil {
			t.Fatalf("%T: its own encoding % x does not decode: %v (value %+v)", v, b1, err, v)
		}
		b2, err := msgpack.Marshal(v2)
		if err != nil {
			t.Fatalf("%T: %v", v2, err)
		}
		if !bytes.Equal(b1, b2) {
			t.Fatalf("%T: encodings differ after a round trip\n% x\n% x", v, b1, b2)
		}
		if !m.floats && !reflect.DeepEqual(v, v2) {
			t.Fatalf("%T: round trip changed the value\n%+v\n%+v", v, v, v2)
		}
	})
}
