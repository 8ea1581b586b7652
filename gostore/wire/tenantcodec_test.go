package wire

import (
	"reflect"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// The layouts of these messages before tenants, encoded by reflection.
type (
	oldRemoveReq struct {
		_msgpack struct{} `msgpack:",as_array"`
		Keys     []string
		Force    bool
	}
	oldCreateTaskReq struct {
		_msgpack struct{} `msgpack:",as_array"`
		ClientID string
		Kind     TaskKind
		Key      string
		Source   string
		Targets  []string
	}
	oldPingResp struct {
		_msgpack                           struct{} `msgpack:",as_array"`
		Known, OffloadWork, OffloadEnabled bool
	}
)

// A message of the default tenant (a master without tenants' answer) is
// the old layout both ways; one naming a tenant round-trips it.
func TestTenantFieldKeepsOldLayout(t *testing.T) {
	cases := []struct {
		now, old, freshNow, freshOld any
	}{
		{&RemoveReq{Keys: []string{"a", "b"}, Force: true}, &oldRemoveReq{Keys: []string{"a", "b"}, Force: true}, new(RemoveReq), new(oldRemoveReq)},
		{&CreateTaskReq{ClientID: "c", Kind: TaskMove, Key: "k", Source: "s", Targets: []string{"t"}},
			&oldCreateTaskReq{ClientID: "c", Kind: TaskMove, Key: "k", Source: "s", Targets: []string{"t"}}, new(CreateTaskReq), new(oldCreateTaskReq)},
		{&PingResp{Known: true, OffloadEnabled: true}, &oldPingResp{Known: true, OffloadEnabled: true}, new(PingResp), new(oldPingResp)},
	}
	for _, tc := range cases {
		b, err := msgpack.Marshal(tc.now)
		if err != nil {
			t.Fatal(err)
		}
		if err := msgpack.Unmarshal(b, tc.freshOld); err != nil || !reflect.DeepEqual(tc.freshOld, tc.old) {
			t.Errorf("%T read by an older peer: %+v, %v", tc.now, tc.freshOld, err)
		}
		o, _ := msgpack.Marshal(tc.old)
		if err := msgpack.Unmarshal(o, tc.freshNow); err != nil || !reflect.DeepEqual(tc.freshNow, tc.now) {
			t.Errorf("%T from an older peer: %+v, %v", tc.now, tc.freshNow, err)
		}
	}
	for _, m := range []interface {
		Tenanted
	}{&RemoveReq{Keys: []string{"k"}}, &RemoveByRegexReq{Pattern: "^a"}, &RemoveAllReq{Force: true},
		&ReplicaClearReq{ClientID: "c", Keys: []string{"k"}, Segment: "s"}, &CreateTaskReq{Key: "k"},
		&KeysReq{Keys: []string{"k"}}, &PutStartReq{Keys: []string{"k"}}} {
		m.SetTenant("team-a")
		b, err := msgpack.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		back := reflect.New(reflect.TypeOf(m).Elem()).Interface()
		if err := msgpack.Unmarshal(b, back); err != nil || !reflect.DeepEqual(back, m) {
			t.Errorf("%T with a tenant: %+v, %v", m, back, err)
		}
	}
	b, _ := msgpack.Marshal(&PingResp{Known: true, MultiTenants: true})
	var p PingResp
	if err := msgpack.Unmarshal(b, &p); err != nil || !p.MultiTenants || !p.Known {
		t.Errorf("PingResp with tenants: %+v, %v", p, err)
	}
}

func TestScopeKey(t *testing.T) {
	for _, tc := range []struct{ tenant, key, stored string }{
		{"default", "k", "k"},
		{"default", "a\x00b", "default\x00a\x00b"}, // never another tenant's
		{"team-a", "k", "team-a\x00k"},
		{"team-a", "x\x00y", "team-a\x00x\x00y"},
	} {
		s := ScopeKey(tc.tenant, tc.key)
		if s != tc.stored {
			t.Errorf("ScopeKey(%q, %q) = %q, want %q", tc.tenant, tc.key, s, tc.stored)
		}
		if tn, k := SplitScoped(s); tn != tc.tenant || k != tc.key {
			t.Errorf("SplitScoped(%q) = %q, %q", s, tn, k)
		}
	}
	for name, ok := range map[string]bool{"default": true, "team-a": true, "": false, "_sys": false, "a\nb": false, "a\x7f": false, "ünï": true} {
		if ValidTenant(name) != ok {
			t.Errorf("ValidTenant(%q) = %v", name, !ok)
		}
	}
}

// Every request that names keys carries the tenant, but the SSD tier's,
// whose keys are stored keys already (the master does not scope them).
func TestEveryKeyedRequestIsTenanted(t *testing.T) {
	stored := map[string]bool{"*wire.NotifyOffloadedReq": true, "*wire.RecoverDiskReq": true}
	for _, r := range []Keyed{&PutStartReq{}, &KeysReq{}, &ReplicaClearReq{}, &RemoveReq{}, &NotifyOffloadedReq{},
		&RecoverDiskReq{}, &CreateTaskReq{}} {
		name := reflect.TypeOf(r).String()
		if _, ok := r.(Tenanted); ok == stored[name] {
			t.Errorf("%s: Tenanted %v", name, ok)
		}
	}
}

// A ping's answer carries the master's tasks after the tenant flag, and
// keeps the old three-field shape when it has neither to say.
func TestPingRespTasksAndOldShape(t *testing.T) {
	in := PingResp{Known: true, Tasks: []AssignedTask{{Key: "k", Plan: TaskPlan{ID: "t7"}}}}
	b, err := msgpack.Marshal(&in)
	if err != nil {
		t.Fatal(err)
	}
	var out PingResp
	if err := msgpack.Unmarshal(b, &out); err != nil || !out.Known || out.MultiTenants || len(out.Tasks) != 1 || out.Tasks[0].Key != "k" || out.Tasks[0].Plan.ID != "t7" {
		t.Fatalf("round trip: %+v, %v", out, err)
	}
	old, err := msgpack.Marshal(&PingResp{Known: true, OffloadEnabled: true})
	if err != nil {
		t.Fatal(err)
	}
	if old[0] != 0x93 {
		t.Fatalf("a ping answer with no tenant flag and no tasks has %#x for its header, want a 3-field array", old[0])
	}
	if b[0] != 0x95 {
		t.Fatalf("a ping answer with tasks has %#x for its header, want a 5-field array", b[0])
	}
	// A newer master's answer with a sixth field still decodes.
	newer := append([]byte{0x96}, b[1:]...)
	newer = append(newer, 0xc0)
	if err := msgpack.Unmarshal(newer, &out); err != nil || len(out.Tasks) != 1 {
		t.Fatalf("a newer answer: %+v, %v", out, err)
	}
}
