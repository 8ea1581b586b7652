package wire

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"reflect"
	"strings"
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

// Every request that names keys (every type of the package whose name
// ends in Req with a Key or Keys field, found in the source) carries the
// tenant, but those whose keys are stored keys already (the SSD tier's:
// the master does not scope them).
func TestEveryKeyedRequestIsTenanted(t *testing.T) {
	stored := map[string]bool{"NotifyOffloadedReq": true, "RecoverDiskReq": true, "StageReq": true}
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi fs.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatal(err)
	}
	keyed, tenanted := map[string]bool{}, map[string]bool{}
	for _, f := range pkgs["wire"].Files {
		ast.Inspect(f, func(n ast.Node) bool {
			switch d := n.(type) {
			case *ast.TypeSpec:
				st, ok := d.Type.(*ast.StructType)
				if !ok || !strings.HasSuffix(d.Name.Name, "Req") {
					return true
				}
				for _, fld := range st.Fields.List {
					for _, name := range fld.Names {
						if name.Name == "Key" || name.Name == "Keys" {
							keyed[d.Name.Name] = true
						}
					}
				}
			case *ast.FuncDecl:
				if d.Recv != nil && d.Name.Name == "SetTenant" {
					if star, ok := d.Recv.List[0].Type.(*ast.StarExpr); ok {
						tenanted[star.X.(*ast.Ident).Name] = true
					}
				}
			}
			return true
		})
	}
	if len(keyed) < 5 {
		t.Fatalf("found only %v", keyed)
	}
	for name := range keyed {
		if tenanted[name] == stored[name] {
			t.Errorf("%s: names keys, Tenanted %v", name, tenanted[name])
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
