package master

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gostore/gostore/gostore/wire"
)

func TestParseTenantPolicy(t *testing.T) {
	for _, tc := range []struct {
		yaml string
		want TenantPolicy
		err  string
	}{
		{"version: 1\ntenants:\n  - name: tenant-a\n    quota: 200GB\n  - name: b\n    quota: 5\n  - name: c\n    quota: 3KB\n",
			TenantPolicy{"tenant-a": 200 << 30, "b": 5, "c": 3 << 10}, ""},
		{"version: 1\ntenants: []\n", TenantPolicy{}, ""},
		{"version: 1\ntenants:\n  - name: t\n    quota: 1TB\n  - name: u\n    quota: 7B\n  - name: v\n    quota: 2MB\n",
			TenantPolicy{"t": 1 << 40, "u": 7, "v": 2 << 20}, ""},
		{"tenants: []\n", nil, "version is required"},
		{"version: 2\ntenants: []\n", nil, "unsupported"},
		{"version: 1\ntenants:\n  - name: a\n    quota: 1\n  - name: a\n    quota: 2\n", nil, "duplicate"},
		{"version: 1\ntenants:\n  - name: _sys\n    quota: 1\n", nil, "invalid"},
		{"version: 1\ntenants:\n  - name: a\n    quota: 0\n", nil, "positive"},
		{"version: 1\ntenants:\n  - name: a\n    quota: 5PB\n", nil, "unit"},
		{"version: 1\ntenants:\n  - name: a\n    quota: GB\n", nil, "integer"},
		{"version: 1\ntenants:\n  - name: a\n", nil, "quota is required"},
		{"version: 1\ntenants:\n  - name: a\n    quota: 9999999TB\n", nil, "2^63"},
		{"version: 1\ntenants: [\n", nil, "invalid YAML"},
		{"version: 1\ntenants: []\nextra: 1\n", nil, "invalid YAML"},
	} {
		p, err := ParseTenantPolicy([]byte(tc.yaml))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: err %v, want %q", tc.yaml, err, tc.err)
			}
			continue
		}
		if err != nil || len(p) != len(tc.want) {
			t.Errorf("%q: %v, %v", tc.yaml, p, err)
			continue
		}
		for k, v := range tc.want {
			if p[k] != v {
				t.Errorf("%q: %s = %d, want %d", tc.yaml, k, p[k], v)
			}
		}
	}
}

func TestSharesScaleDownWhenQuotasExceedThePool(t *testing.T) {
	for _, tc := range []struct {
		p        TenantPolicy
		capacity uint64
		want     map[string]uint64
	}{
		{TenantPolicy{"a": 30, "b": 60}, 100, map[string]uint64{"a": 30, "b": 60}},
		{TenantPolicy{"a": 100, "b": 100}, 100, map[string]uint64{"a": 50, "b": 50}},
		// 100*100/300 = 33 r100 each: the byte left goes to the smaller name.
		{TenantPolicy{"a": 100, "b": 100, "c": 100}, 100, map[string]uint64{"a": 34, "b": 33, "c": 33}},
		{TenantPolicy{"a": 300, "b": 100}, 100, map[string]uint64{"a": 75, "b": 25}},
		{TenantPolicy{"a": 10}, 0, map[string]uint64{"a": 0}},
	} {
		got := shares(tc.p, tc.capacity)
		for k, v := range tc.want {
			if got[k] != v {
				t.Errorf("%v in %d: %s = %d, want %d", tc.p, tc.capacity, k, got[k], v)
			}
		}
	}
}

func newTenantCore(t *testing.T) (*Core, *fakeClock) {
	t.Helper()
	clk := &fakeClock{now: time.Unix(1000, 0)}
	c := New(Config{DefaultKVLeaseTTL: time.Second, ClientTTL: time.Hour, Now: clk.Now, MultiTenants: true,
		EvictionRatio: 0.05, Rand: rand.New(rand.NewPCG(1, 2))})
	return c, clk
}

func charged(c *Core, tenant string) int64 {
	ts, _ := c.Tenants()
	for _, s := range ts {
		if s.TenantID == tenant {
			return s.ChargedBytes
		}
	}
	return 0
}

func TestTenantChargeFollowsReplicas(t *testing.T) {
	c, _ := newTenantCore(t)
	mount(t, c, "x", "s1", 1<<20)
	mount(t, c, "y", "s2", 1<<20)
	a := func(k string) string { return wire.ScopeKey("a", k) }
	// In flight counts, as Mooncake charges: size times memory replicas.
	if r, _ := c.PutStart("w", "", []string{a("k1")}, []uint64{1000}, wire.ReplicaConfig{ReplicaNum: 2}); r[0].Code != wire.OK {
		t.Fatal(r[0].Code)
	}
	if got := charged(c, "a"); got != 2000 {
		t.Fatalf("in flight: %d", got)
	}
	c.PutEnd("w", []string{a("k1")}, nil)
	put(t, c, a("k2"), 500, wire.ReplicaConfig{Preferred: []string{"s1"}}) // stays when s2 goes
	put(t, c, "plain", 300, wire.ReplicaConfig{})
	if charged(c, "a") != 2500 || charged(c, wire.DefaultTenant) != 300 {
		t.Fatalf("a %d default %d", charged(c, "a"), charged(c, wire.DefaultTenant))
	}
	// A segment's end takes its replicas from the charge.
	if err := c.UnmountSegment("y", "s2"); err != nil {
		t.Fatal(err)
	}
	if got := charged(c, "a"); got != 1500 { // k1's one replica left and k2's
		t.Fatalf("after unmount: %d", got)
	}
	c.Remove([]string{a("k1"), a("k2")}, true)
	if charged(c, "a") != 0 || charged(c, wire.DefaultTenant) != 300 {
		t.Fatalf("after remove: a %d default %d", charged(c, "a"), charged(c, wire.DefaultTenant))
	}
	// A revoked write refunds.
	r, _ := c.PutStart("w", "", []string{a("k3")}, []uint64{700}, wire.ReplicaConfig{})
	c.PutRevoke("w", []string{a("k3")}, []uint64{r[0].Epoch})
	if charged(c, "a") != 0 {
		t.Fatalf("after revoke: %d", charged(c, "a"))
	}
}

func TestTenantAdmission(t *testing.T) {
	c, clk := newTenantCore(t)
	mount(t, c, "x", "s1", 1<<20)
	c.SetTenantPolicy(TenantPolicy{"a": 10_000, "b": 10_000})
	a := func(k string) string { return wire.ScopeKey("a", k) }
	if r := put(t, c, a("old"), 6000, wire.ReplicaConfig{}); r.Code != wire.OK {
		t.Fatal(r.Code)
	}
	clk.Advance(time.Millisecond)
	if r := put(t, c, a("older-pinned"), 3000, wire.ReplicaConfig{HardPin: true}); r.Code != wire.OK {
		t.Fatal(r.Code)
	}
	for _, tc := range []struct {
		name, key string
		size      uint64
		want      wire.Code
		gone      []string // the tenant's own objects evicted to admit it
		read      []string // read first (a read leases: not evictable)
	}{
		{"unregistered tenant", wire.ScopeKey("c", "k"), 10, wire.ErrTenantNotRegistered, nil, nil},
		{"the default tenant is not special", "k", 10, wire.ErrTenantNotRegistered, nil, nil},
		{"larger than the share", a("huge"), 10_001, wire.ErrTenantQuotaExceeded, nil, nil},
		{"fits beside", a("small"), 1000, wire.OK, nil, nil},
		// 10000 in use: the oldest evictable object of a's goes; the
		// hard-pinned one stays.
		{"evicts its own first", a("new"), 5000, wire.OK, []string{a("old")}, nil},
		// 9000 in use (pinned 3000, small 1000, new 5000) and new is
		// being read: nothing of a's can go but small, not enough.
		{"nothing to evict", a("more"), 5000, wire.ErrTenantQuotaExceeded, []string{a("small")}, []string{a("new")}},
		{"another tenant is unaffected", wire.ScopeKey("b", "k"), 9000, wire.OK, nil, nil},
	} {
		before := present(c, []string{a("old"), a("small"), a("older-pinned")})
		c.GetReplicas(tc.read, false)
		r, _ := c.PutStart("w", "", []string{tc.key}, []uint64{tc.size}, wire.ReplicaConfig{})
		if r[0].Code != tc.want {
			t.Fatalf("%s: %v, want %v", tc.name, r[0].Code, tc.want)
		}
		if r[0].Code == wire.OK {
			c.PutEnd("w", []string{tc.key}, nil)
		}
		for _, k := range tc.gone {
			if _, ok := c.QueryKey(k); ok {
				t.Fatalf("%s: %q not evicted (present before: %v)", tc.name, k, before)
			}
		}
		if _, ok := c.QueryKey(a("older-pinned")); !ok {
			t.Fatalf("%s: the hard-pinned object went", tc.name)
		}
	}
	ts, _ := c.Tenants()
	for _, s := range ts {
		switch s.TenantID {
		case "a":
			if s.RejectQuotaExceeded != 2 || s.EvictedBytes != 7000 || s.ChargedBytes > 10_000 {
				t.Errorf("a: %+v", s)
			}
		case "c", wire.DefaultTenant:
			if s.RejectNotRegistered != 1 || !s.AdmissionClosed {
				t.Errorf("%s: %+v", s.TenantID, s)
			}
		}
	}
	// Without a policy nothing is refused.
	c.SetTenantPolicy(nil)
	if r := put(t, c, wire.ScopeKey("c", "k"), 10, wire.ReplicaConfig{}); r.Code != wire.OK {
		t.Fatal(r.Code)
	}
}

func TestEvictionTakesFirstFromTenantsOverTheirShare(t *testing.T) {
	c, clk := newTenantCore(t)
	c.cfg.HighWatermark = 0.9
	mount(t, c, "x", "s1", 100_000)
	c.SetTenantPolicy(TenantPolicy{"a": 60_000, "b": 60_000}) // shares 50000 each
	var as, bs []string
	for i := 0; i < 4; i++ {
		as = append(as, wire.ScopeKey("a", string(rune('0'+i))))
		bs = append(bs, wire.ScopeKey("b", string(rune('0'+i))))
		if r := put(t, c, as[i], 10_000, wire.ReplicaConfig{}); r.Code != wire.OK {
			t.Fatal(r.Code)
		}
	}
	// b's objects are the oldest: a plain LRU pass would take them first.
	clk.Advance(2 * time.Second)
	for i := 0; i < 4; i++ {
		if r := put(t, c, bs[i], 10_000, wire.ReplicaConfig{}); r.Code != wire.OK {
			t.Fatal(r.Code)
		}
	}
	clk.Advance(2 * time.Second)
	for _, k := range as {
		c.GetReplicas([]string{k}, false) // a's are read: the most recent
	}
	clk.Advance(2 * time.Second)
	// The policy now gives a 20000: it holds 40000, 20000 beyond.
	c.SetTenantPolicy(TenantPolicy{"a": 20_000, "b": 60_000})
	c.Evict()
	if got := present(c, bs); len(got) != 4 {
		t.Fatalf("b lost objects though a was over its share: left %v", got)
	}
	if got := present(c, as); len(got) != 2 {
		t.Fatalf("a keeps %d objects, want 2 (its share)", len(got))
	}
	if charged(c, "a") != 20_000 {
		t.Fatalf("a charged %d", charged(c, "a"))
	}
}

// BenchmarkTenantsPutGetRemove32 is a batch of 32 objects of 4 KiB put,
// ended, read and removed: without tenants (the default tenant's path,
// which tenants must not slow), with --enable_multi_tenants, and with a
// quota policy as well.
func BenchmarkTenantsPutGetRemove32(b *testing.B) {
	for _, bc := range []struct {
		name   string
		multi  bool
		policy TenantPolicy
	}{{"off", false, nil}, {"multi_tenants", true, nil}, {"quota", true, TenantPolicy{"t": 1 << 30}}} {
		b.Run(bc.name, func(b *testing.B) {
			clk := time.Unix(1000, 0)
			c := New(Config{DefaultKVLeaseTTL: time.Second, ClientTTL: time.Hour, Now: func() time.Time { return clk },
				MultiTenants: bc.multi, Rand: rand.New(rand.NewPCG(1, 2))})
			if _, err := c.MountSegment(wire.SegmentDesc{Name: "s", ClientID: "x", Size: 1 << 30, ShmPath: "/x/s"}, nil); err != nil {
				b.Fatal(err)
			}
			c.SetTenantPolicy(bc.policy)
			keys, sizes := make([]string, 32), make([]uint64, 32)
			for i := range keys {
				keys[i], sizes[i] = "key-"+strings.Repeat("x", i), 4096
				if bc.multi {
					keys[i] = wire.ScopeKey("t", keys[i])
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				c.PutStart("w", "", keys, sizes, wire.ReplicaConfig{ReplicaNum: 1})
				c.PutEnd("w", keys, nil)
				c.GetReplicas(keys, false)
				c.Remove(keys, true)
			}
		})
	}
}

// Writes admitted at once never take a tenant beyond its share: each
// reserves its bytes before it starts. Here every admitted write waits
// until eight are admitted (or 300 ms), so that none is charged before
// the others are decided.
func TestConcurrentWritesStayWithinTheShare(t *testing.T) {
	c, _ := newTenantCore(t)
	mount(t, c, "x", "s1", 1<<20)
	c.SetTenantPolicy(TenantPolicy{"a": 10_000})
	var passed atomic.Int64
	testHookAdmitted = func() {
		passed.Add(1)
		for end := time.Now().Add(300 * time.Millisecond); passed.Load() < 8 && time.Now().Before(end); {
			time.Sleep(time.Millisecond)
		}
	}
	defer func() { testHookAdmitted = nil }()
	var wg sync.WaitGroup
	var admitted atomic.Int64
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := wire.ScopeKey("a", fmt.Sprint(g))
			// Hard-pinned: nothing can be evicted to make room.
			r, _ := c.PutStart("w", "", []string{key}, []uint64{2000}, wire.ReplicaConfig{HardPin: true})
			if r[0].Code == wire.OK {
				admitted.Add(1)
			} else if r[0].Code != wire.ErrTenantQuotaExceeded {
				t.Errorf("%s: %v", key, r[0].Code)
			}
		}()
	}
	wg.Wait()
	if admitted.Load() != 5 || charged(c, "a") != 10_000 {
		t.Fatalf("admitted %d, charged %d: want 5 and 10000", admitted.Load(), charged(c, "a"))
	}
}

// The shares follow a mount at once, not at the next tick: a policy put
// in force before any segment (a master's start) admits the first writes.
func TestSharesFollowAMountAtOnce(t *testing.T) {
	c, _ := newTenantCore(t)
	c.SetTenantPolicy(TenantPolicy{"a": 1 << 30, "b": 1 << 30}) // no segment yet: shares of 0
	mount(t, c, "x", "s1", 1<<20)
	if r := put(t, c, wire.ScopeKey("a", "k"), 1000, wire.ReplicaConfig{}); r.Code != wire.OK {
		t.Fatalf("first put after the mount: %v", r.Code)
	}
	if err := c.DrainSegment("x", "s1", time.Hour); err != nil {
		t.Fatal(err)
	}
	if ts, capacity := c.Tenants(); capacity != 0 || ts[0].EffectiveQuotaBytes != 0 {
		t.Fatalf("after the drain: capacity %d, %+v", capacity, ts)
	}
}

// A replica_num that would overflow the charge (size times replicas) is
// charged what the placer can place, never wrapped to a small number.
func TestHugeReplicaNumIsChargedNotWrapped(t *testing.T) {
	c, _ := newTenantCore(t)
	mount(t, c, "x", "s1", 1<<20)
	c.SetTenantPolicy(TenantPolicy{"a": 10_000})
	admitted := 0
	for i := 0; i < 20; i++ {
		for _, n := range []int{1 << 57, math.MaxInt} {
			key := wire.ScopeKey("a", fmt.Sprintf("k%d-%d", i, n))
			r, _ := c.PutStart("w", "", []string{key}, []uint64{8000}, wire.ReplicaConfig{ReplicaNum: n})
			if r[0].Code == wire.OK {
				admitted++
				c.PutEnd("w", []string{key}, nil)
			}
		}
	}
	// One segment: one replica of 8000 fits the share of 10000 at a time
	// (the next write evicts the last one).
	if got := charged(c, "a"); got > 10_000 {
		t.Fatalf("charged %d over a share of 10000 (%d writes admitted)", got, admitted)
	}
	// The charge is size times the replicas placeable: with two segments,
	// two replicas of 6000 are 12000, over the share.
	mount(t, c, "y", "s2", 1<<20)
	r, _ := c.PutStart("w", "", []string{wire.ScopeKey("a", "two")}, []uint64{6000}, wire.ReplicaConfig{ReplicaNum: 1 << 57})
	if r[0].Code != wire.ErrTenantQuotaExceeded {
		t.Fatalf("6000 x 2 segments against 10000: %v", r[0].Code)
	}
}

// Admission reads the reservations before the charge: a write that
// starts (charged, then unreserved) between the two readings is seen in
// one of them, never in neither.
func TestAdmissionSeesAWriteStartingBetweenItsReadings(t *testing.T) {
	c, _ := newTenantCore(t)
	mount(t, c, "x", "s1", 1<<20)
	c.SetTenantPolicy(TenantPolicy{"a": 10_000})
	done := false // the hook runs on this goroutine only
	testHookAdmitting = func() {
		if !done {
			done = true
			c.PutStart("w", "", []string{wire.ScopeKey("a", "w1")}, []uint64{6000}, wire.ReplicaConfig{})
		}
	}
	t.Cleanup(func() { testHookAdmitting = nil })
	c.PutStart("w", "", []string{wire.ScopeKey("a", "w2")}, []uint64{6000}, wire.ReplicaConfig{})
	if got := charged(c, "a"); got > 10_000 {
		t.Fatalf("charged %d over a share of 10000: both writes were admitted", got)
	}
}

// The ledger holds accounts for the tenants the policy names, those
// holding objects and at most maxRefusedAccounts refused ones: refused
// writes under more made-up names leave one shared counter behind, and an
// unnamed tenant's account goes once it holds nothing.
func TestTenantAccountsAreBounded(t *testing.T) {
	c, clk := newTenantCore(t)
	mount(t, c, "x", "s1", 1<<20)
	put(t, c, wire.ScopeKey("gone", "k"), 100, wire.ReplicaConfig{}) // no policy yet: admitted
	c.SetTenantPolicy(TenantPolicy{"a": 10_000})
	for i := 0; i < 1000; i++ {
		r, _ := c.PutStart("w", "", []string{wire.ScopeKey(fmt.Sprint("t", i), "k")}, []uint64{10}, wire.ReplicaConfig{})
		if r[0].Code != wire.ErrTenantNotRegistered {
			t.Fatal(r[0].Code)
		}
	}
	c.Remove([]string{wire.ScopeKey("gone", "k")}, true)
	clk.Advance(time.Second)
	c.Tick()
	ts, _ := c.Tenants()
	var names []string
	for _, s := range ts {
		names = append(names, s.TenantID)
	}
	if len(ts) != maxRefusedAccounts+2 || ts[0].TenantID != unregisteredTenants || ts[0].RejectNotRegistered != 1000-maxRefusedAccounts || slices.Contains(names, "gone") {
		t.Fatalf("%d accounts: %v", len(ts), names[:min(len(names), 5)])
	}
	if wire.ValidTenant(strings.Repeat("x", wire.MaxTenantLen+1)) || !wire.ValidTenant(strings.Repeat("x", wire.MaxTenantLen)) {
		t.Fatal("tenant name length bound")
	}
}

// A tenant edited out of the policy while it owns objects keeps its last
// share (its writes refused) rather than losing every object at the next
// pass, as Mooncake refuses to delete a tenant that is not empty.
func TestATenantEditedOutKeepsItsLastShare(t *testing.T) {
	c, clk := newTenantCore(t)
	c.cfg.HighWatermark = 0.9
	mount(t, c, "x", "s1", 100_000)
	c.SetTenantPolicy(TenantPolicy{"a": 30_000, "b": 60_000})
	// b's object is the oldest: a plain pass (Evict forces one) takes it.
	if r := put(t, c, wire.ScopeKey("b", "old"), 10_000, wire.ReplicaConfig{}); r.Code != wire.OK {
		t.Fatal(r.Code)
	}
	clk.Advance(2 * time.Second)
	var as []string
	for i := 0; i < 2; i++ {
		as = append(as, wire.ScopeKey("a", fmt.Sprint(i)))
		if r := put(t, c, as[i], 10_000, wire.ReplicaConfig{}); r.Code != wire.OK {
			t.Fatal(r.Code)
		}
	}
	if kept := c.SetTenantPolicy(TenantPolicy{"b": 60_000}); !slices.Equal(kept, []string{"a"}) {
		t.Errorf("kept %v, want [a]", kept)
	}
	c.Evict()
	if got := present(c, as); len(got) != 2 {
		t.Fatalf("a keeps %v of its objects after it left the policy", got)
	}
	if r, _ := c.PutStart("w", "", []string{wire.ScopeKey("a", "new")}, []uint64{10}, wire.ReplicaConfig{}); r[0].Code != wire.ErrTenantNotRegistered {
		t.Fatalf("a's write after it left the policy: %v", r[0].Code)
	}
	// Once empty it is gone for good.
	c.Remove(as, true)
	c.Tick()
	if kept := c.SetTenantPolicy(TenantPolicy{"b": 60_000}); len(kept) != 0 {
		t.Fatalf("kept %v after a emptied", kept)
	}
}

// --max_key_bytes bounds the user's key, not the stored one: a tenant's
// key at the limit is written and read like the default tenant's (the
// server checks reads on the user's key), and messages name the user's
// key.
func TestKeyLimitAndMessagesAreTheUsersKey(t *testing.T) {
	c, _ := newTenantCore(t)
	c.cfg.MaxKeyBytes = 16
	mount(t, c, "x", "s1", 1<<20)
	atLimit := strings.Repeat("k", 16)
	if r := put(t, c, wire.ScopeKey("team-a", atLimit), 10, wire.ReplicaConfig{}); r.Code != wire.OK {
		t.Fatalf("a tenant's key of %d bytes at --max_key_bytes=16: %v", len(atLimit), r.Code)
	}
	if err := c.CheckRequest([]string{wire.ScopeKey("team-a", atLimit+"k")}, nil); wire.CodeOf(err) != wire.ErrInvalidKey {
		t.Fatalf("17 bytes: %v", err)
	}
	_, err := c.CreateTask(wire.CreateTaskReq{ClientID: "w", Kind: wire.TaskCopy, Key: wire.ScopeKey("team-a", "missing"), Targets: []string{"s1"}})
	if wire.CodeOf(err) != wire.ErrObjectNotFound || strings.Contains(err.Error(), "team-a") {
		t.Fatalf("a missing key's message: %v", err)
	}
}

// A tenant over its share gives up the hot extras the master made of its
// objects before it loses any object: they are charged to it, but cost it
// nothing to drop.
func TestATenantsHotExtrasGoBeforeItsObjects(t *testing.T) {
	c, clk := newTenantCore(t)
	c.cfg.DynamicReplicationMode, c.cfg.DynamicReplicationQPSThreshold = DynamicReplicationEnforce, 0.5
	c.cfg.DynamicReplicationMaxMemoryReplicas = 2
	c.hot.init(&c.cfg)
	mount(t, c, "a", "seg-a", 1<<20)
	mount(t, c, "b", "seg-b", 1<<20)
	c.SetTenantPolicy(TenantPolicy{"a": 10_000})
	a := func(k string) string { return wire.ScopeKey("a", k) }
	putOn(t, c, a("cold"), 4000, "seg-a")
	clk.Advance(time.Millisecond)
	putOn(t, c, a("hot"), 4000, "seg-a")
	readN(c, 5, a("hot"))
	c.Tick()
	doneHotTasks(t, c, "b")
	if n := c.HotReplicasLive(); n != 1 || charged(c, "a") != 12_000 {
		t.Fatalf("%d extras, charged %d; want 1 and 12000", n, charged(c, "a"))
	}
	clk.Advance(2 * time.Second) // past the reads' lease
	if r := put(t, c, a("new"), 1500, wire.ReplicaConfig{}); r.Code != wire.OK {
		t.Fatalf("put beside: %v", r.Code)
	}
	if got := present(c, []string{a("cold"), a("hot"), a("new")}); len(got) != 3 {
		t.Fatalf("present %q: an object went while the extra could", got)
	}
	if n := c.HotReplicasLive(); n != 0 {
		t.Fatalf("%d extras left", n)
	}
}
