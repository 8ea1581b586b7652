package client

import (
	"bytes"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/gostore/gostore/gostore/internal/testkit"
	"github.com/gostore/gostore/gostore/wire"
)

// testConfig holds what the bindings would read from the environment,
// for every client a test makes with newClient.
var testConfig Config

// withConfig sets testConfig's edge settings for the rest of t.
func withConfig(t *testing.T, set func(*Config)) {
	saved := testConfig
	set(&testConfig)
	t.Cleanup(func() { testConfig = saved })
}

// forceTCP makes the test's clients reach each other over TCP only.
func forceTCP(t *testing.T) { withConfig(t, func(c *Config) { c.ForceTCP = true }) }

// eachTransport runs body as subtest "shm" (same-host peers map each
// other's memory) and "tcp" (forceTCP).
func eachTransport(t *testing.T, body func(t *testing.T)) {
	for _, tcp := range []bool{false, true} {
		name := "shm"
		if tcp {
			name = "tcp"
		}
		t.Run(name, func(t *testing.T) {
			if tcp {
				forceTCP(t)
			}
			body(t)
		})
	}
}

// edge fills cfg's edge settings from testConfig.
func edge(cfg Config) Config {
	cfg.ForceTCP = cfg.ForceTCP || testConfig.ForceTCP
	cfg.PingInterval, cfg.GPUBounceBytes = testConfig.PingInterval, testConfig.GPUBounceBytes
	cfg.ReadDoneWait = testConfig.ReadDoneWait
	return cfg
}

func newClient(t *testing.T, master string, segment uint64) *Client {
	t.Helper()
	c, err := New(edge(Config{LocalHostname: "127.0.0.1", MasterServerAddr: master,
		GlobalSegmentSize: segment, LocalBufferSize: 1 << 20}), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestPutGetAcrossClients(t *testing.T) {
	for _, tcp := range []bool{false, true} {
		t.Run(fmt.Sprintf("forceTCP=%v", tcp), func(t *testing.T) {
			if tcp {
				forceTCP(t)
			}
			m := testkit.StartMaster(t)
			owner := newClient(t, m.Addr(), 8<<20)
			reader := newClient(t, m.Addr(), 0) // pure consumer: everything lands on owner
			sizes := []int{1, 4096, 1<<20 + 3}
			var items []PutItem
			for i, n := range sizes {
				v := testkit.Pattern(uint64(i), n)
				// Split the value into three parts to exercise put_parts.
				items = append(items, PutItem{Key: fmt.Sprint("k", i), Parts: [][]byte{v[:n/3], v[n/3 : n/2], v[n/2:]}})
			}
			for i, code := range reader.Writes().PutBatch(items, wire.ReplicaConfig{ReplicaNum: 1}) {
				if code != wire.OK {
					t.Fatalf("put %d: %v", i, code)
				}
			}
			for _, who := range []*Client{owner, reader} {
				keys := []string{"k0", "k1", "k2", "missing"}
				dests := make([][][]byte, len(keys))
				for i, n := range sizes {
					dests[i] = [][]byte{make([]byte, n/2), make([]byte, n-n/2+5)}
				}
				dests[3] = [][]byte{make([]byte, 8)}
				got := who.Reads().GetInto(keys, dests)
				for i, n := range sizes {
					if got[i] != int64(n) {
						t.Fatalf("get %d = %d, want %d", i, got[i], n)
					}
					joined := append(append([]byte{}, dests[i][0]...), dests[i][1][:n-n/2]...)
					if !bytes.Equal(joined, testkit.Pattern(uint64(i), n)) {
						t.Fatalf("get %d: bytes differ", i)
					}
				}
				if got[3] != int64(wire.ErrObjectNotFound) {
					t.Fatalf("miss = %d", got[3])
				}
			}
			// Too small a destination is -600 and touches nothing.
			small := make([]byte, 10)
			if got := reader.Reads().GetInto([]string{"k1"}, [][][]byte{{small}}); got[0] != int64(wire.ErrInvalidParams) {
				t.Fatalf("small buffer: %d", got[0])
			}
			if !bytes.Equal(small, make([]byte, 10)) {
				t.Fatal("a rejected get wrote into the buffer")
			}
		})
	}
}

func TestPutDoesNotOverwrite(t *testing.T) {
	m := testkit.StartMaster(t)
	c := newClient(t, m.Addr(), 1<<20)
	if r := c.Writes().PutBatch([]PutItem{{Key: "k", Parts: [][]byte{[]byte("first")}}}, wire.ReplicaConfig{}); r[0] != wire.OK {
		t.Fatal(r[0])
	}
	if r := c.Writes().PutBatch([]PutItem{{Key: "k", Parts: [][]byte{[]byte("second!")}}, {Key: "", Parts: [][]byte{[]byte("x")}}, {Key: "e"}}, wire.ReplicaConfig{}); r[0] != wire.OK || r[1] != wire.ErrInvalidParams || r[2] != wire.ErrInvalidParams {
		t.Fatalf("re-put/invalid: %v", r)
	}
	bufs, codes := c.Reads().GetBuffers([]string{"k"})
	if codes[0] != 5 || string(bufs[0]) != "first" {
		t.Fatalf("got %q (%d)", bufs[0], codes[0])
	}
	if err := c.Reads().FreeBuffer(addrOf(bufs[0])); err != nil {
		t.Fatal(err)
	}
	if err := c.Reads().FreeBuffer(addrOf(bufs[0])); err == nil {
		t.Fatal("double free accepted")
	}
}

func TestReplicaSurvivesWriterClose(t *testing.T) {
	m := testkit.StartMaster(t)
	a := newClient(t, m.Addr(), 1<<20)
	b := newClient(t, m.Addr(), 1<<20)
	v := testkit.Pattern(7, 5000)
	if r := a.Writes().PutBatch([]PutItem{{Key: "two", Parts: [][]byte{v}}}, wire.ReplicaConfig{ReplicaNum: 2}); r[0] != wire.OK {
		t.Fatal(r[0])
	}
	if r := a.Writes().PutBatch([]PutItem{{Key: "one", Parts: [][]byte{v}}}, wire.ReplicaConfig{Preferred: []string{a.Hostname()}}); r[0] != wire.OK {
		t.Fatal(r[0])
	}
	a.Close()
	dst := make([]byte, 5000)
	got := b.Reads().GetInto([]string{"two", "one"}, [][][]byte{{dst}, {make([]byte, 5000)}})
	if got[0] != 5000 || !bytes.Equal(dst, v) {
		t.Fatalf("replicated object after writer close: %d", got[0])
	}
	if got[1] != int64(wire.ErrObjectNotFound) {
		t.Fatalf("object only on the closed client: %d", got[1])
	}
	if a.Health() != 1 {
		t.Fatal("closed client reports healthy")
	}
}

func TestRegistry(t *testing.T) {
	var g registry
	if err := g.register(0, 10); err == nil {
		t.Fatal("null accepted")
	}
	if err := g.register(1000, 100); err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][2]uint64{{950, 100}, {1099, 10}, {900, 300}} {
		if err := g.register(bad[0], bad[1]); err == nil {
			t.Fatalf("overlap %v accepted", bad)
		}
	}
	if err := g.register(1100, 10); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		ptr, size uint64
		ok        bool
	}{{1000, 100, true}, {1050, 50, true}, {1050, 51, false}, {1099, 2, false}, {999, 1, false}, {1100, 10, true}, {^uint64(0), 2, false}} {
		if got := registered(&g, tc.ptr, tc.size); got != tc.ok {
			t.Errorf("contains(%d,%d) = %v", tc.ptr, tc.size, got)
		}
	}
	if err := g.unregister(1050); err == nil {
		t.Fatal("unregister of an inner address accepted")
	}
	if err := g.unregister(1000); err != nil || registered(&g, 1000, 1) {
		t.Fatal("unregister failed")
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]uint64{"16MB": 16 << 20, "4gb": 4 << 30, "1024": 1024, "2 KiB": 2048, "1.5k": 1536, "3t": 3 << 40} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v", in, got, err)
		}
	}
	for _, bad := range []string{"", "MB", "-1", "x12", "99999999999999999999t"} {
		if _, err := ParseSize(bad); err == nil {
			t.Errorf("ParseSize(%q) accepted", bad)
		}
	}
}

func TestConcurrentClients(t *testing.T) {
	m := testkit.StartMaster(t)
	a := newClient(t, m.Addr(), 32<<20)
	b := newClient(t, m.Addr(), 32<<20)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := []*Client{a, b}[g%2]
			for i := range 20 {
				k := fmt.Sprintf("g%d/%d", g, i)
				v := testkit.Pattern(uint64(g*1000+i), 64<<10)
				if r := c.Writes().PutBatch([]PutItem{{Key: k, Parts: [][]byte{v}}}, wire.ReplicaConfig{}); r[0] != wire.OK {
					t.Errorf("put %s: %v", k, r[0])
					return
				}
				dst := make([]byte, len(v))
				if got := []*Client{b, a}[g%2].Reads().GetInto([]string{k}, [][][]byte{{dst}}); got[0] != int64(len(v)) || !bytes.Equal(dst, v) {
					t.Errorf("get %s: %d", k, got[0])
					return
				}
			}
		}()
	}
	wg.Wait()
}

func TestMasterRestartRemounts(t *testing.T) {
	withConfig(t, func(c *Config) { c.PingInterval = 20 * time.Millisecond })
	m := testkit.StartMaster(t)
	addr := m.Addr()
	c := newClient(t, addr, 1<<20)
	m.Close()
	// A new master on the same address knows nothing; the heartbeat must
	// bring the segment back.
	_, port, _ := net.SplitHostPort(addr)
	m2 := testkit.StartMaster(t, "--rpc_port="+port)
	deadline := time.Now().Add(5 * time.Second)
	for len(m2.Core().Segments()) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	segs := m2.Core().Segments()
	if len(segs) != 1 || segs[0].Name != c.Hostname() {
		t.Fatalf("segments after master restart: %+v", segs)
	}
	v := testkit.Pattern(3, 1000)
	if r := c.Writes().PutBatch([]PutItem{{Key: "after", Parts: [][]byte{v}}}, wire.ReplicaConfig{}); r[0] != wire.OK {
		t.Fatalf("put after remount: %v", r[0])
	}
	for c.Health() != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if c.Health() != 0 {
		t.Fatal("client unhealthy after the master came back")
	}
}

func TestUpsertReplacesAndPutDoesNot(t *testing.T) {
	m := testkit.StartMaster(t)
	owner := newClient(t, m.Addr(), 8<<20)
	c := newClient(t, m.Addr(), 0)
	v1, v2, v3 := testkit.Pattern(1, 5000), testkit.Pattern(2, 5000), testkit.Pattern(3, 7000)
	write := func(f func([]PutItem, wire.ReplicaConfig) []wire.Code, v []byte) wire.Code {
		return f([]PutItem{{Key: "k", Parts: [][]byte{v[:100], v[100:]}}}, wire.ReplicaConfig{})[0]
	}
	// Reads by another client end in the background: until the master hears
	// of it, an upsert may see -714, which callers retry.
	upsert := func(v []byte) wire.Code {
		deadline := time.Now().Add(5 * time.Second)
		for {
			code := write(c.Writes().UpsertBatch, v)
			if code != wire.ErrObjectReplicaBusy || time.Now().After(deadline) {
				return code
			}
			time.Sleep(time.Millisecond)
		}
	}
	read := func() []byte {
		dst := make([]byte, 8000)
		n := owner.Reads().GetInto([]string{"k"}, [][][]byte{{dst}})[0]
		if n < 0 {
			t.Fatalf("get: %d", n)
		}
		return dst[:n]
	}
	if upsert(v1) != wire.OK || !bytes.Equal(read(), v1) {
		t.Fatal("upsert of a new key")
	}
	if write(c.Writes().PutBatch, v2) != wire.OK || !bytes.Equal(read(), v1) {
		t.Fatal("put overwrote")
	}
	if upsert(v2) != wire.OK || !bytes.Equal(read(), v2) {
		t.Fatal("same-size upsert")
	}
	if upsert(v3) != wire.OK || !bytes.Equal(read(), v3) {
		t.Fatal("resizing upsert")
	}
	// The writer's own finished reads never make its upsert busy (once the
	// other client's reads above have drained).
	if upsert(v1) != wire.OK {
		t.Fatal("upsert after the other client's reads")
	}
	for i := range 20 {
		dst := make([]byte, 8000)
		if n := c.Reads().GetInto([]string{"k"}, [][][]byte{{dst}})[0]; n < 0 {
			t.Fatalf("get %d: %d", i, n)
		}
		v := [][]byte{v1, v2}[i%2]
		if code := write(c.Writes().UpsertBatch, v); code != wire.OK {
			t.Fatalf("upsert %d right after the same client's read: %v", i, code)
		}
	}
}

func TestReadOutlivingItsLeaseIsRefused(t *testing.T) {
	forceTCP(t) // slow enough to outlive 1 ms
	m := testkit.StartMaster(t, "--default_kv_lease_ttl=1")
	owner := newClient(t, m.Addr(), 64<<20)
	c := newClient(t, m.Addr(), 0)
	v := testkit.Pattern(9, 32<<20)
	if r := c.Writes().PutBatch([]PutItem{{Key: "big", Parts: [][]byte{v}}}, wire.ReplicaConfig{}); r[0] != wire.OK {
		t.Fatal(r[0])
	}
	_ = owner
	if got := c.Reads().GetInto([]string{"big"}, [][][]byte{{make([]byte, len(v))}}); got[0] != int64(wire.ErrLeaseExpired) {
		t.Fatalf("get outliving a 1 ms lease = %d, want -707", got[0])
	}
}

func TestCopyAndMoveTasks(t *testing.T) {
	m := testkit.StartMaster(t)
	a := newClient(t, m.Addr(), 8<<20)
	b := newClient(t, m.Addr(), 8<<20)
	v := testkit.Pattern(4, 300000)
	if r := a.Writes().PutBatch([]PutItem{{Key: "k", Parts: [][]byte{v}}}, wire.ReplicaConfig{Preferred: []string{a.Hostname()}}); r[0] != wire.OK {
		t.Fatal(r[0])
	}
	wait := func(id string) wire.TaskInfo {
		deadline := time.Now().Add(5 * time.Second)
		for {
			info, err := a.Tasks().QueryTask(id)
			if err != nil {
				t.Fatal(err)
			}
			if info.Status != "PROCESSING" || time.Now().After(deadline) {
				return info
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	id, err := a.Tasks().CreateCopyTask("k", []string{b.Hostname()})
	if err != nil {
		t.Fatal(err)
	}
	if info := wait(id); info.Status != "SUCCESS" {
		t.Fatalf("copy: %+v", info)
	}
	a.Close() // the original holder leaves; the copy serves
	dst := make([]byte, len(v))
	if got := b.Reads().GetInto([]string{"k"}, [][][]byte{{dst}}); got[0] != int64(len(v)) || !bytes.Equal(dst, v) {
		t.Fatalf("read from the copy: %d", got[0])
	}
	c := newClient(t, m.Addr(), 8<<20)
	id, err = b.Tasks().CreateMoveTask("k", b.Hostname(), c.Hostname())
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		info, _ := b.Tasks().QueryTask(id)
		if info.Status == "SUCCESS" {
			break
		}
		if info.Status == "FAILED" || time.Now().After(deadline) {
			t.Fatalf("move: %+v", info)
		}
		time.Sleep(5 * time.Millisecond)
	}
	b.Close()
	clear(dst)
	if got := c.Reads().GetInto([]string{"k"}, [][][]byte{{dst}}); got[0] != int64(len(v)) || !bytes.Equal(dst, v) {
		t.Fatalf("read after move: %d", got[0])
	}
	if _, err := c.Tasks().CreateCopyTask("k", []string{"nowhere:1"}); wire.CodeOf(err) != wire.ErrInvalidParams {
		t.Fatalf("unknown target: %v", err)
	}
}

// Close from one thread while others copy into and out of this client's own
// segment: the calls either finish or fail with a code, never touch
// unmapped memory.
func TestCloseWhileCallsAreInFlight(t *testing.T) {
	m := testkit.StartMaster(t)
	c := newClient(t, m.Addr(), 16<<20)
	v := testkit.Pattern(5, 256<<10)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dst := make([]byte, len(v))
			for i := 0; ; i++ {
				k := fmt.Sprintf("g%d/%d", g, i)
				if r := c.Writes().PutBatch([]PutItem{{Key: k, Parts: [][]byte{v}}}, wire.ReplicaConfig{}); r[0] != wire.OK {
					if r[0] != wire.ErrInternal {
						t.Errorf("put after close: %v, want -1", r[0])
					}
					return
				}
				if got := c.Reads().GetInto([]string{k}, [][][]byte{{dst}}); got[0] < 0 {
					return
				} else if !bytes.Equal(dst, v) {
					t.Errorf("%s: bytes differ", k)
					return
				}
				c.Keys().Remove([]string{k}, true) // a fast machine would fill the segment (-200) before the close
			}
		}()
	}
	time.Sleep(50 * time.Millisecond)
	c.Close()
	wg.Wait()
}

func registered(g *registry, ptr, size uint64) bool {
	dev, ok := g.lookup(ptr, size)
	return ok && dev == -1 // no GPU here: every range is host memory
}
