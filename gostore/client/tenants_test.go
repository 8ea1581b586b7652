package client

import (
	"bytes"
	"io"
	"net"
	"os"
	"sync"
	"testing"

	"github.com/gostore/gostore/gostore/internal/testkit"
	"github.com/gostore/gostore/gostore/wire"
)

// tap is a TCP relay in front of a master that keeps a copy of every
// request frame's body a client sends through it.
type tap struct {
	ln     net.Listener
	mu     sync.Mutex
	bodies map[wire.Op][][]byte
}

func newTap(t *testing.T, master string) *tap {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tp := &tap{ln: ln, bodies: map[wire.Op][][]byte{}}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			m, err := net.Dial("tcp", master)
			if err != nil {
				c.Close()
				continue
			}
			go func() { io.Copy(c, m); c.Close() }()
			go func() {
				defer m.Close()
				for {
					h, body, err := wire.ReadFrame(c, nil)
					if err != nil {
						return
					}
					tp.mu.Lock()
					tp.bodies[h.Op] = append(tp.bodies[h.Op], bytes.Clone(body))
					tp.mu.Unlock()
					if _, err := m.Write(wire.AppendFrame(nil, h.ID, h.Op, h.Status, body)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return tp
}

// carrying is the ops of the requests whose bytes hold s.
func (tp *tap) carrying(s string) []wire.Op {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	var ops []wire.Op
	for op, bs := range tp.bodies {
		for _, b := range bs {
			if bytes.Contains(b, []byte(s)) {
				ops = append(ops, op)
				break
			}
		}
	}
	return ops
}

// A client with a tenant_id sends it only to a master that separates
// tenants (its ping said so): to one without --enable_multi_tenants
// (an older master decodes RemoveReq and its kind strictly) every request
// keeps the shape it had before tenants, and every call works.
func TestTenantIsSentOnlyToAMasterWithTenants(t *testing.T) {
	for _, multi := range []bool{false, true} {
		var extra []string
		if multi {
			extra = []string{"--enable_multi_tenants"}
		}
		m := testkit.StartMaster(t, extra...)
		tp := newTap(t, m.Addr())
		holder := newClient(t, m.Addr(), 8<<20)
		other := newClient(t, m.Addr(), 8<<20)
		c := newTenantClient(t, tp.ln.Addr().String(), "team-a")
		v := testkit.Pattern(9, 100_000)
		put := func(key string) {
			t.Helper()
			if r := c.Writes().PutBatch([]PutItem{{Key: key, Parts: [][]byte{v}}}, wire.ReplicaConfig{Preferred: []string{holder.Hostname()}}); r[0] != wire.OK {
				t.Fatalf("multi=%v: put %s: %v", multi, key, r[0])
			}
		}
		for _, k := range []string{"k", "r1", "r2", "x"} {
			put(k)
		}
		dst := make([]byte, len(v))
		if got := c.Reads().GetInto([]string{"k"}, [][][]byte{{dst}}); got[0] != int64(len(v)) || !bytes.Equal(dst, v) {
			t.Fatalf("multi=%v: get: %d", multi, got[0])
		}
		if codes := c.Keys().Exist([]string{"k", "missing"}); codes[0] != 1 || codes[1] != 0 {
			t.Fatalf("multi=%v: exist: %v", multi, codes)
		}
		id, err := c.Tasks().CreateCopyTask("k", []string{other.Hostname()})
		if err != nil {
			t.Fatalf("multi=%v: copy task: %v", multi, err)
		}
		testkit.WaitFor(t, "the copy task's end", func() bool {
			info, err := c.Tasks().QueryTask(id)
			return err == nil && info.Status == "SUCCESS"
		})
		if n, err := c.Keys().RemoveByRegex("^r", true); err != nil || n != 2 {
			t.Fatalf("multi=%v: remove by regex: %d, %v", multi, n, err)
		}
		if _, err := c.Keys().ReplicaClear([]string{"x"}, ""); err != nil {
			t.Fatalf("multi=%v: replica clear: %v", multi, err)
		}
		if codes := c.Keys().Remove([]string{"k"}, true); codes[0] != wire.OK {
			t.Fatalf("multi=%v: remove: %v", multi, codes)
		}
		if _, err := c.Keys().RemoveAll(true); err != nil {
			t.Fatalf("multi=%v: remove all: %v", multi, err)
		}
		ops := tp.carrying("team-a")
		if !multi && len(ops) != 0 {
			t.Errorf("a master without tenants was sent the tenant in ops %v", ops)
		}
		if multi && len(ops) == 0 {
			t.Errorf("a master with tenants was never sent the tenant")
		}
	}
}

// A task is its tenant's: another tenant asking for it by its ID is told
// there is no such task, as for an ID never given.
func TestQueryTaskIsScopedByTenant(t *testing.T) {
	m := testkit.StartMaster(t, "--enable_multi_tenants")
	holder := newClient(t, m.Addr(), 8<<20)
	other := newClient(t, m.Addr(), 8<<20)
	a, b := newTenantClient(t, m.Addr(), "team-a"), newTenantClient(t, m.Addr(), "team-b")
	v := testkit.Pattern(3, 1000)
	if r := a.Writes().PutBatch([]PutItem{{Key: "k", Parts: [][]byte{v}}}, wire.ReplicaConfig{Preferred: []string{holder.Hostname()}}); r[0] != wire.OK {
		t.Fatal(r[0])
	}
	id, err := a.Tasks().CreateCopyTask("k", []string{other.Hostname()})
	if err != nil {
		t.Fatal(err)
	}
	if info, err := a.Tasks().QueryTask(id); err != nil || info.Key != "k" {
		t.Fatalf("its own tenant: %+v, %v", info, err)
	}
	if info, err := b.Tasks().QueryTask(id); wire.CodeOf(err) != wire.ErrObjectNoReplicationTask {
		t.Fatalf("another tenant read task %q: %+v, %v", id, info, err)
	}
}

// A peek (the plan API's look at a key) names the caller's key and is
// scoped like every other request: tenant a peeking at "team-b\x00k"
// finds nothing of team-b's, and its own "k" is found. The SSD tier's
// peeks name stored keys, any tenant's (TestTenant disk tests in Python).
func TestPeekIsScopedByTenant(t *testing.T) {
	m := testkit.StartMaster(t, "--enable_multi_tenants")
	holder := newClient(t, m.Addr(), 8<<20)
	a, b := newTenantClient(t, m.Addr(), "team-a"), newTenantClient(t, m.Addr(), "team-b")
	for _, c := range []*Client{a, b} {
		if r := c.Writes().PutBatch([]PutItem{{Key: "k", Parts: [][]byte{testkit.Pattern(1, 100)}}}, wire.ReplicaConfig{Preferred: []string{holder.Hostname()}}); r[0] != wire.OK {
			t.Fatal(r[0])
		}
	}
	if b.Writes().PutBatch([]PutItem{{Key: "only-b", Parts: [][]byte{testkit.Pattern(1, 100)}}}, wire.ReplicaConfig{})[0] != wire.OK {
		t.Fatal("put only-b")
	}
	res, err := clientHost{a}.Peek([]string{"team-b\x00only-b", "k"})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Code != wire.ErrObjectNotFound {
		t.Errorf("team-a peeked at team-b's object: %v, %d replicas", res[0].Code, len(res[0].Replicas))
	}
	if res[1].Code != wire.OK {
		t.Errorf("team-a's own k: %v", res[1].Code)
	}
}

// Under a quota policy, the plan API's evict_until (which evicts from the
// whole pool) is refused: one tenant's call would take every tenant's
// objects, past their shares.
func TestEvictUntilIsRefusedUnderAPolicy(t *testing.T) {
	policy := t.TempDir() + "/policy.yaml"
	if err := os.WriteFile(policy, []byte("version: 1\ntenants:\n  - name: team-a\n    quota: 1MB\n  - name: team-b\n    quota: 1MB\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	m := testkit.StartMaster(t, "--enable_multi_tenants", "--tenant_quota_connector_type=file", "--tenant_quota_connector_uri="+policy)
	holder := newClient(t, m.Addr(), 8<<20)
	a, b := newTenantClient(t, m.Addr(), "team-a"), newTenantClient(t, m.Addr(), "team-b")
	if r := b.Writes().PutBatch([]PutItem{{Key: "k", Parts: [][]byte{testkit.Pattern(1, 1000)}}}, wire.ReplicaConfig{Preferred: []string{holder.Hostname()}}); r[0] != wire.OK {
		t.Fatal(r[0])
	}
	if n, _, err := a.plans.EvictUntil(0); wire.CodeOf(err) != wire.ErrInvalidParams {
		t.Errorf("evict_until under a policy: %d evicted, %v", n, err)
	}
	if got := b.Keys().Exist([]string{"k"}); got[0] != 1 {
		t.Errorf("team-b's object after team-a's evict_until: %d", got[0])
	}
}

// newTenantClient is a client of tenant with a small buffer and no
// segment, closed when the test ends.
func newTenantClient(t *testing.T, master, tenant string) *Client {
	t.Helper()
	c, err := New(edge(Config{LocalHostname: "127.0.0.1", MasterServerAddr: master,
		LocalBufferSize: 1 << 20, TenantID: tenant}), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
