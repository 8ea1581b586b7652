package wire

import (
	"reflect"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// The shapes of PingResp and OffloadHeartbeatResp before promotion on hit
// and hot-object replicas, decoded by msgpack's reflection codec as an
// older peer decodes them.
type (
	pingRespBeforeTasks struct {
		_msgpack       struct{} `msgpack:",as_array"`
		Known          bool
		OffloadWork    bool
		OffloadEnabled bool
	}
	offloadHeartbeatRespBeforePromote struct {
		_msgpack struct{} `msgpack:",as_array"`
		Keys     []string
		Sizes    []uint64
		Drop     []string
	}
	// A newer peer's: one more field than today's.
	pingRespNewer struct {
		_msgpack       struct{} `msgpack:",as_array"`
		Known          bool
		OffloadWork    bool
		OffloadEnabled bool
		MultiTenants   bool
		Tasks          []AssignedTask
		Later          string
	}
	offloadHeartbeatRespNewer struct {
		_msgpack struct{} `msgpack:",as_array"`
		Keys     []string
		Sizes    []uint64
		Drop     []string
		Promote  []PromotionTask
		Later    string
	}
)

// An older client's pings to a newer master (and a newer client's to an
// older master) keep working: the older shape decodes into today's, and
// today's with no tasks decodes in the older shape.
func TestPingRespAcrossVersions(t *testing.T) {
	b, err := msgpack.Marshal(&pingRespBeforeTasks{Known: true, OffloadEnabled: true})
	if err != nil {
		t.Fatal(err)
	}
	var got PingResp
	if err := msgpack.Unmarshal(b, &got); err != nil || !got.Known || got.OffloadWork || !got.OffloadEnabled || got.Tasks != nil {
		t.Fatalf("older master's ping reply: %+v %v", got, err)
	}
	b, err = msgpack.Marshal(&PingResp{Known: true, OffloadWork: true})
	if err != nil {
		t.Fatal(err)
	}
	var old pingRespBeforeTasks
	if err := msgpack.Unmarshal(b, &old); err != nil || !old.Known || !old.OffloadWork || old.OffloadEnabled {
		t.Fatalf("older client reading a ping reply without tasks: %+v %v", old, err)
	}
	task := AssignedTask{Key: "k", Plan: TaskPlan{ID: "t1", Size: 5, Sources: []Replica{{SegID: 1, Offset: 64}},
		Targets: []Replica{{SegID: 2, Offset: 128, Grant: []byte("g")}}}}
	want := PingResp{Known: true, Tasks: []AssignedTask{task}}
	b, err = msgpack.Marshal(&want)
	if err != nil {
		t.Fatal(err)
	}
	if err := msgpack.Unmarshal(b, &got); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	b, err = msgpack.Marshal(&pingRespNewer{Known: true, Tasks: []AssignedTask{task}, Later: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if err := msgpack.Unmarshal(b, &got); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("newer master's ping reply: %+v %v", got, err)
	}
}

func TestOffloadHeartbeatRespAcrossVersions(t *testing.T) {
	b, err := msgpack.Marshal(&offloadHeartbeatRespBeforePromote{Keys: []string{"a"}, Sizes: []uint64{3}, Drop: []string{"b"}})
	if err != nil {
		t.Fatal(err)
	}
	var got OffloadHeartbeatResp
	if err := msgpack.Unmarshal(b, &got); err != nil || !reflect.DeepEqual(got, OffloadHeartbeatResp{Keys: []string{"a"}, Sizes: []uint64{3}, Drop: []string{"b"}}) {
		t.Fatalf("older master's heartbeat reply: %+v %v", got, err)
	}
	b, err = msgpack.Marshal(&OffloadHeartbeatResp{Keys: []string{"a"}, Sizes: []uint64{3}})
	if err != nil {
		t.Fatal(err)
	}
	var old offloadHeartbeatRespBeforePromote
	if err := msgpack.Unmarshal(b, &old); err != nil || len(old.Keys) != 1 || old.Keys[0] != "a" || old.Sizes[0] != 3 {
		t.Fatalf("older client reading a heartbeat reply without promotions: %+v %v", old, err)
	}
	want := OffloadHeartbeatResp{Drop: []string{"d"}, Promote: []PromotionTask{{ID: "p", Key: "k", Size: 9, Target: Replica{SegID: 4, Offset: 64, Grant: []byte("g")}}}}
	b, err = msgpack.Marshal(&want)
	if err != nil {
		t.Fatal(err)
	}
	if err := msgpack.Unmarshal(b, &got); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	b, err = msgpack.Marshal(&offloadHeartbeatRespNewer{Drop: want.Drop, Promote: want.Promote, Later: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if err := msgpack.Unmarshal(b, &got); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("newer master's heartbeat reply: %+v %v", got, err)
	}
}
