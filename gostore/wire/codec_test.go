package wire

import (
	"encoding/base64"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/gostore/gostore/gostore/wire/wiretest"
)

// The plain types share the messages' fields and tags but not their
// methods: msgpack encodes them by reflection, the reference layout.
type (
	plainKeysReq         KeysReq
	plainPutStartReq     PutStartReq
	plainPutStartResp    PutStartResp
	plainGetReplicasResp GetReplicasResp
	plainCodesResp       CodesResp
)

func TestHandWrittenCodecsMatchReflection(t *testing.T) {
	cfg := ReplicaConfig{ReplicaNum: 2, SoftPin: true, Preferred: []string{"a:1", "b:2"}, SameNode: true}
	reps := []Replica{{SegID: 1, Offset: 1 << 40, Grant: []byte("token")}, {SegID: 7, Offset: 64}}
	// Both layouts must decode into each other: the hand-written encoder
	// writes compact integers where reflection writes fixed-width ones,
	// which msgpack readers accept either way.
	cases := []struct {
		fast, plain      any
		fresh, freshPlan func() any
	}{
		{&KeysReq{ClientID: "c", Keys: []string{"k1", "ключ"}, Epochs: []uint64{1, 1 << 63}, ForRead: true, HoldMS: 5000, Tenant: "team-a"},
			&plainKeysReq{ClientID: "c", Keys: []string{"k1", "ключ"}, Epochs: []uint64{1, 1 << 63}, ForRead: true, HoldMS: 5000, Tenant: "team-a"},
			func() any { return new(KeysReq) }, func() any { return new(plainKeysReq) }},
		{&PutStartReq{ClientID: "c", Keys: []string{"x"}, Sizes: []uint64{4096}, Config: cfg, HostID: "h", Tenant: "team-a"},
			&plainPutStartReq{ClientID: "c", Keys: []string{"x"}, Sizes: []uint64{4096}, Config: cfg, HostID: "h", Tenant: "team-a"},
			func() any { return new(PutStartReq) }, func() any { return new(plainPutStartReq) }},
		{&PutStartResp{Results: []PutStartResult{{Code: OK, Replicas: reps, Epoch: 9}, {Code: ErrNoAvailableHandle, Replicas: reps[:1]}, {Code: ErrNoAvailableHandle, Replicas: reps[1:], NoSpace: &NoSpace{Why: "pool full", Space: SpaceComing, Passes: 12}}}},
			&plainPutStartResp{Results: []PutStartResult{{Code: OK, Replicas: reps, Epoch: 9}, {Code: ErrNoAvailableHandle, Replicas: reps[:1]}, {Code: ErrNoAvailableHandle, Replicas: reps[1:], NoSpace: &NoSpace{Why: "pool full", Space: SpaceComing, Passes: 12}}}},
			func() any { return new(PutStartResp) }, func() any { return new(plainPutStartResp) }},
		{&GetReplicasResp{Results: []GetResult{{Code: OK, Size: 5, Replicas: reps, LeaseMS: 10000, Epoch: 77, Disk: "10.0.0.1:12345", Placed: 78}, {Code: ErrObjectNotFound, Replicas: reps[1:]}}},
			&plainGetReplicasResp{Results: []GetResult{{Code: OK, Size: 5, Replicas: reps, LeaseMS: 10000, Epoch: 77, Disk: "10.0.0.1:12345", Placed: 78}, {Code: ErrObjectNotFound, Replicas: reps[1:]}}},
			func() any { return new(GetReplicasResp) }, func() any { return new(plainGetReplicasResp) }},
		{&CodesResp{Codes: []Code{OK, ErrObjectHasLease, -1300}}, &plainCodesResp{Codes: []Code{OK, ErrObjectHasLease, -1300}},
			func() any { return new(CodesResp) }, func() any { return new(plainCodesResp) }},
	}
	for _, tc := range cases {
		fast, err := msgpack.Marshal(tc.fast)
		if err != nil {
			t.Fatal(err)
		}
		ref, err := msgpack.Marshal(tc.plain)
		if err != nil {
			t.Fatal(err)
		}
		plainBack := tc.freshPlan()
		if err := msgpack.Unmarshal(fast, plainBack); err != nil {
			t.Fatalf("%T: reflection cannot read the hand-written bytes: %v", tc.fast, err)
		}
		if !reflect.DeepEqual(plainBack, tc.plain) {
			t.Errorf("%T: hand-written bytes read back by reflection\n%+v\n%+v", tc.fast, plainBack, tc.plain)
		}
		back := tc.fresh()
		if err := msgpack.Unmarshal(ref, back); err != nil {
			t.Fatalf("%T: %v", back, err)
		}
		if !reflect.DeepEqual(back, tc.fast) {
			t.Errorf("%T: round trip\n%+v\n%+v", back, back, tc.fast)
		}
	}
}

// A request of the default tenant leaves the tenant out: its bytes are
// those of a message from before tenants, one field shorter.
func TestDefaultTenantIsLeftOut(t *testing.T) {
	for _, tc := range []struct {
		with, without any
		fields        byte
	}{
		{&KeysReq{ClientID: "c", Keys: []string{"k"}, Tenant: "a"}, &KeysReq{ClientID: "c", Keys: []string{"k"}}, 6},
		{&PutStartReq{ClientID: "c", Keys: []string{"k"}, Tenant: "a"}, &PutStartReq{ClientID: "c", Keys: []string{"k"}}, 5},
	} {
		b, err := msgpack.Marshal(tc.without)
		if err != nil {
			t.Fatal(err)
		}
		if b[0] != 0x90|tc.fields {
			t.Errorf("%T without a tenant: header % x, want %d fields", tc.without, b[0], tc.fields)
		}
		w, _ := msgpack.Marshal(tc.with)
		if w[0] != 0x90|(tc.fields+1) {
			t.Errorf("%T with a tenant: header % x, want %d fields", tc.with, w[0], tc.fields+1)
		}
	}
}

func TestHandWrittenDecodersRejectGarbage(t *testing.T) {
	for _, b := range [][]byte{{}, {0x91}, {0x94, 0xa1, 'c', 0x91, 0x05}, {0xc1}, {0x95, 0xc0, 0xc0, 0xc0, 0xc0}} {
		var k KeysReq
		if err := msgpack.Unmarshal(b, &k); err == nil {
			t.Errorf("KeysReq accepted % x", b)
		}
		var p PutStartReq
		if err := msgpack.Unmarshal(b, &p); err == nil {
			t.Errorf("PutStartReq accepted % x", b)
		}
	}
}

func TestHandWrittenCodecsEmptyLists(t *testing.T) {
	b, _ := msgpack.Marshal(&KeysReq{ClientID: "c"})
	var k KeysReq
	if err := msgpack.Unmarshal(b, &k); err != nil || len(k.Keys) != 0 || k.ClientID != "c" {
		t.Fatalf("%+v %v", k, err)
	}
	ref, _ := msgpack.Marshal(&plainCodesResp{}) // nil list: msgpack nil
	var c CodesResp
	if err := msgpack.Unmarshal(ref, &c); err != nil || len(c.Codes) != 0 {
		t.Fatalf("%+v %v", c, err)
	}
}

// A length prefix is the peer's word: a frame claiming four billion keys
// must fail on the missing bytes, not allocate for them.
func TestHandWrittenDecodersDoNotTrustLengths(t *testing.T) {
	huge := []byte{0xdd, 0xff, 0xff, 0xff, 0xff}
	cases := map[string][]byte{
		"KeysReq.Keys":      append([]byte{0x94, 0xa1, 'c'}, huge...),
		"PutStartReq.Sizes": append([]byte{0x95, 0xa1, 'c', 0x90}, huge...),
		"CodesResp":         append([]byte{0x91}, huge...),
		"GetReplicasResp":   append([]byte{0x91}, huge...),
	}
	for name, b := range cases {
		var err error
		switch {
		case strings.HasPrefix(name, "KeysReq"):
			err = msgpack.Unmarshal(b, new(KeysReq))
		case strings.HasPrefix(name, "PutStartReq"):
			err = msgpack.Unmarshal(b, new(PutStartReq))
		case name == "CodesResp":
			err = msgpack.Unmarshal(b, new(CodesResp))
		default:
			err = msgpack.Unmarshal(b, new(GetReplicasResp))
		}
		if err == nil {
			t.Errorf("%s: a truncated huge list decoded", name)
		}
	}
}

// Older peers send replicas without a grant and MountReqs without a key:
// they still decode, with none.
func TestOlderLayoutsDecode(t *testing.T) {
	type oldReplica struct {
		_msgpack struct{} `msgpack:",as_array"`
		SegID    uint64
		Offset   uint64
	}
	type oldMount struct {
		_msgpack struct{} `msgpack:",as_array"`
		Seg      SegmentDesc
	}
	b, _ := msgpack.Marshal([]oldReplica{{SegID: 3, Offset: 64}})
	var reps []Replica
	if err := msgpack.Unmarshal(b, &reps); err != nil || len(reps) != 1 || reps[0].SegID != 3 || reps[0].Offset != 64 || reps[0].Grant != nil {
		t.Fatalf("%+v %v", reps, err)
	}
	b, _ = msgpack.Marshal(&oldMount{Seg: SegmentDesc{Name: "n", Size: 4096}})
	var m MountReq
	if err := msgpack.Unmarshal(b, &m); err != nil || m.Seg.Name != "n" || m.GrantKey != nil {
		t.Fatalf("%+v %v", m, err)
	}
	b, _ = msgpack.Marshal(&MountReq{Seg: SegmentDesc{Name: "n"}, GrantKey: []byte("k")})
	if err := msgpack.Unmarshal(b, &m); err != nil || string(m.GrantKey) != "k" {
		t.Fatalf("%+v %v", m, err)
	}
}

// A master from before GetResult.Placed sends six fields: they decode, and
// Placed stays 0 (which no spot a put took ever matches).
func TestGetResultOfAnOlderMaster(t *testing.T) {
	type older struct {
		_msgpack struct{} `msgpack:",as_array"`
		Code     Code
		Size     uint64
		Replicas []Replica
		LeaseMS  int64
		Epoch    uint64
		Disk     string
	}
	type olderResp struct {
		_msgpack struct{} `msgpack:",as_array"`
		Results  []older
	}
	b, err := msgpack.Marshal(olderResp{Results: []older{{Code: OK, Size: 5, Replicas: []Replica{{SegID: 2, Offset: 64}}, LeaseMS: 10, Epoch: 77, Disk: "d"}}})
	if err != nil {
		t.Fatal(err)
	}
	var got GetReplicasResp
	if err := msgpack.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	want := GetResult{Code: OK, Size: 5, Replicas: []Replica{{SegID: 2, Offset: 64}}, LeaseMS: 10, Epoch: 77, Disk: "d"}
	if len(got.Results) != 1 || !reflect.DeepEqual(got.Results[0], want) {
		t.Fatalf("decoded %+v, want %+v", got.Results, want)
	}
}

// A descriptor from before SegmentDesc.UCX decodes with every field and
// no UCX, and one without UCX encodes as before; one with it keeps it byte
// for byte; JSON never shows it.
func TestSegmentDescUCX(t *testing.T) {
	old := wiretest.SegmentDescBeforeUCX{ID: 7, Name: "h:1", ClientID: "c", Size: 1 << 20, HostID: "hid", ShmPath: "/proc/1/fd/3",
		TransferAddr: "127.0.0.1:9", Offload: true, Location: "cuda:0", IPC: []byte{1, 2}, GPUPCI: "0000:01:00.0", Base: 4096}
	b, err := msgpack.Marshal(&old)
	if err != nil {
		t.Fatal(err)
	}
	var d SegmentDesc
	if err := msgpack.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	want := SegmentDesc{ID: 7, Name: "h:1", ClientID: "c", Size: 1 << 20, HostID: "hid", ShmPath: "/proc/1/fd/3",
		TransferAddr: "127.0.0.1:9", Offload: true, Location: "cuda:0", IPC: []byte{1, 2}, GPUPCI: "0000:01:00.0", Base: 4096}
	if !reflect.DeepEqual(d, want) {
		t.Fatalf("old desc decoded as %+v, want %+v", d, want)
	}
	// Without a UCX desc the bytes are the old layout's: older masters and
	// journals read them.
	if nb, _ := msgpack.Marshal(&want); !reflect.DeepEqual(nb, b) {
		t.Fatalf("a desc without UCX encodes as %x, the old layout as %x", nb, b)
	}
	want.UCX = []byte{0, 0xff, 3, 'u', 'c', 'x'}
	if b, err = msgpack.Marshal(&want); err != nil {
		t.Fatal(err)
	}
	var got SegmentDesc
	if err := msgpack.Unmarshal(b, &got); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded %+v %v, want %+v", got, err, want)
	}
	// A newer peer's desc, a field past UCX, decodes; the field is skipped.
	b, _ = msgpack.Marshal([]any{uint64(3), "n", "c", uint64(1 << 20), "", "", "", false, "", nil, "", uint64(0),
		[]byte{1, 2, 3}, "a field from a newer peer"})
	if err := msgpack.Unmarshal(b, &got); err != nil || got.Name != "n" || string(got.UCX) != "\x01\x02\x03" {
		t.Fatalf("a newer desc decoded as %+v, %v", got, err)
	}
	j, _ := json.Marshal(want)
	if strings.Contains(strings.ToLower(string(j)), "ucx") || strings.Contains(string(j), base64.StdEncoding.EncodeToString(want.UCX)) {
		t.Fatalf("JSON shows the UCX desc: %s", j)
	}
}
