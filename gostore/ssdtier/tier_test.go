package ssdtier_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gostore/gostore/gostore/client"
	"github.com/gostore/gostore/gostore/client/clienttest"
	"github.com/gostore/gostore/gostore/internal/testkit"
	"github.com/gostore/gostore/gostore/master/server"
	"github.com/gostore/gostore/gostore/pipeline"
	"github.com/gostore/gostore/gostore/rpc"
	"github.com/gostore/gostore/gostore/ssdtier"
	"github.com/gostore/gostore/gostore/storage"
	"github.com/gostore/gostore/gostore/wire"
)

// env is a Config.Getenv over a map: tests set the MOONCAKE_OFFLOAD_*
// settings per client without touching the process environment.
type env map[string]string

func (e env) lookup(name string) (string, bool) {
	v, ok := e[name]
	return v, ok
}

// tierEnv is a fast heartbeat and a small staging buffer; extra entries
// override.
func tierEnv(extra env) env {
	e := env{
		storage.EnvHeartbeat:  "0.05",
		storage.EnvBufferSize: fmt.Sprint(8 << 20),
	}
	for k, v := range extra {
		e[k] = v
	}
	return e
}

func newTierClient(t *testing.T, master string, segment uint64, dir string, e env) *client.Client {
	t.Helper()
	c, err := newTierClientErr(master, segment, dir, e)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func newTierClientErr(master string, segment uint64, dir string, e env) (*client.Client, error) {
	return client.New(clienttest.Edge(client.Config{LocalHostname: "127.0.0.1", MasterServerAddr: master, GlobalSegmentSize: segment,
		LocalBufferSize: 1 << 20, EnableSSDOffload: true, SSDOffloadPath: dir, Getenv: e.lookup}), nil)
}

func startOffloadMaster(t *testing.T, extra ...string) string {
	return testkit.StartMaster(t, append([]string{"--enable_offload", "--tick_interval_ms=10",
		"--eviction_high_watermark_ratio=0.7", "--eviction_ratio=0.3"}, extra...)...).Addr()
}

// putRetrying writes v under key, retrying while the pool is full (the
// master frees space once the SSD tier has the old objects).
func putRetrying(t *testing.T, c *client.Client, key string, v []byte) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		code := c.Writes().PutBatch([]client.PutItem{{Key: key, Parts: [][]byte{v}}}, wire.ReplicaConfig{})[0]
		if code == wire.OK {
			return
		}
		if code != wire.ErrNoAvailableHandle || time.Now().After(deadline) {
			t.Fatalf("put %s: %v", key, code)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func mustGet(t *testing.T, c *client.Client, key string, want []byte) {
	t.Helper()
	dst := make([]byte, len(want))
	if got := c.Reads().GetInto([]string{key}, [][][]byte{{dst}}); got[0] != int64(len(want)) {
		t.Fatalf("get %s: %d", key, got[0])
	}
	if !bytes.Equal(dst, want) {
		t.Fatalf("get %s: bytes differ", key)
	}
}

// Four times the pool written through a small segment: every object stays
// readable with its exact bytes, from memory or from the SSD tier, by the
// holder itself and by another client (through the staging buffer, over
// shared memory and over TCP), for each backend.
func TestSSDTierKeepsFourTimesThePool(t *testing.T) {
	for _, desc := range []string{storage.DescriptorBucket, storage.DescriptorPerKey, storage.DescriptorOffset} {
		for _, tcp := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/tcp=%v", desc, tcp), func(t *testing.T) {
				if tcp {
					clienttest.ForceTCP(t)
				}
				m := startOffloadMaster(t)
				const segment, obj = 4 << 20, 64 << 10
				holder := newTierClient(t, m, segment, t.TempDir(), tierEnv(env{
					storage.EnvDescriptor:                      desc,
					"MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES":  fmt.Sprint(64 << 20),
					"MOONCAKE_OFFLOAD_BUCKET_KEYS_LIMIT":       "16",
					"MOONCAKE_OFFLOAD_BUCKET_SIZE_LIMIT_BYTES": fmt.Sprint(1 << 20),
					"MOONCAKE_OFFLOAD_BUCKET_EVICTION_POLICY":  "none",
					"MOONCAKE_OFFLOAD_CLIENT_BUFFER_GC_TTL_MS": "5000",
					"MOONCAKE_OFFLOAD_USE_URING":               "true",
				}))
				writer := clienttest.New(t, m, 0)
				n := 4 * segment / obj
				for i := range n {
					putRetrying(t, writer, fmt.Sprint("k", i), testkit.Pattern(uint64(i), obj))
				}
				st, _ := holder.SSDStats()
				if st.Offloaded == 0 || st.Objects == 0 {
					t.Fatalf("nothing offloaded: %+v", st)
				}
				diskOnly := 0
				for i := range n {
					g := writer.Keys().GetSize(fmt.Sprint("k", i))
					if g != obj {
						t.Fatalf("k%d: size %d", i, g)
					}
				}
				for _, c := range []*client.Client{writer, holder} {
					for i := range n {
						mustGet(t, c, fmt.Sprint("k", i), testkit.Pattern(uint64(i), obj))
					}
				}
				// Most of them can only have come from disk: the pool
				// holds a quarter.
				st, _ = holder.SSDStats()
				diskOnly = int(st.Staged)
				if diskOnly < n/2 {
					t.Fatalf("only %d of %d reads by another client were staged from disk", diskOnly, n)
				}
				if used, leases := holder.SSD().Storage().Buffer().Usage(); used != 0 || leases != 0 {
					t.Fatalf("staging buffer still holds %d bytes in %d leases after the reads", used, leases)
				}
			})
		}
	}
}

// A restarted client (same directory) gets its disk copies back; a copy
// of an object removed meanwhile is deleted, not resurrected.
func TestSSDRecoveryAfterRestart(t *testing.T) {
	m := startOffloadMaster(t)
	dir := t.TempDir()
	e := tierEnv(nil)
	a := newTierClient(t, m, 2<<20, dir, e)
	writer := clienttest.New(t, m, 0)
	const n, obj = 40, 128 << 10
	for i := range n {
		putRetrying(t, writer, fmt.Sprint("r", i), testkit.Pattern(uint64(100+i), obj))
	}
	testkit.WaitFor(t, "every object on disk and known to the master", func() bool {
		st, _ := a.SSDStats() // Offloaded counts copies the master accepted
		return st.Objects == n && st.Offloaded >= n
	})
	a.Close()
	// The memory copies went with a's segment; the disk-only ones are
	// unreachable until a comes back.
	if codes := writer.Keys().Remove([]string{"r0"}, true); codes[0] != wire.OK {
		t.Fatalf("remove r0: %v", codes[0])
	}
	b := newTierClient(t, m, 2<<20, dir, e)
	st, _ := b.SSDStats()
	if st.Recovered != n-1 || st.StaleDropped != 1 {
		t.Fatalf("recovered %d (stale %d), want %d and r0 stale", st.Recovered, st.StaleDropped, n-1)
	}
	for i := 1; i < n; i++ {
		mustGet(t, writer, fmt.Sprint("r", i), testkit.Pattern(uint64(100+i), obj))
	}
	if got := writer.Keys().GetSize("r0"); got != int64(wire.ErrObjectNotFound) {
		t.Fatalf("removed r0 came back: %d", got)
	}
	if _, ok := b.SSD().Storage().Backend().Size("r0"); ok {
		t.Fatal("r0's stale copy is still on disk")
	}
}

// A copy that fails its checksum is reported and skipped: the reader gets
// an error, never wrong bytes, and the master forgets the copy.
func TestSSDCorruptCopyIsNeverServed(t *testing.T) {
	m := startOffloadMaster(t)
	dir := t.TempDir()
	holder := newTierClient(t, m, 1<<20, dir, tierEnv(env{storage.EnvDescriptor: storage.DescriptorPerKey}))
	writer := clienttest.New(t, m, 0)
	v := testkit.Pattern(5, 200<<10)
	putRetrying(t, writer, "bad", v)
	testkit.WaitFor(t, "the copy on disk", func() bool { _, ok := holder.SSD().Storage().Backend().Size("bad"); return ok })
	// Push it out of memory.
	for i := range 12 {
		putRetrying(t, writer, fmt.Sprint("fill", i), testkit.Pattern(uint64(i), 200<<10))
	}
	testkit.WaitFor(t, "bad evicted from memory", func() bool {
		res, err := holder.SSD().Peek([]string{"bad"})
		return err == nil && res[0].Code == wire.OK && len(res[0].Replicas) == 0
	})
	// Flip one byte of the value in its file.
	var files []string
	filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err == nil && info.Mode().IsRegular() && !strings.HasPrefix(info.Name(), ".") {
			files = append(files, path)
		}
		return nil
	})
	flipped := false
	for _, f := range files {
		b, _ := os.ReadFile(f)
		if i := bytes.Index(b, v[1000:1064]); i >= 0 {
			b[i] ^= 0xff
			os.WriteFile(f, b, 0o644)
			flipped = true
		}
	}
	if !flipped {
		t.Fatal("value not found on disk")
	}
	dst := make([]byte, len(v))
	if got := writer.Reads().GetInto([]string{"bad"}, [][][]byte{{dst}}); got[0] != int64(wire.ErrChecksumMismatch) {
		t.Fatalf("corrupt read: %d, want %d", got[0], wire.ErrChecksumMismatch)
	}
	if bytes.Equal(dst, v) || !bytes.Equal(dst, make([]byte, len(v))) {
		t.Fatal("a failed read left bytes in the destination")
	}
	if got := writer.Keys().GetSize("bad"); got != int64(wire.ErrObjectNotFound) {
		t.Fatalf("the corrupt copy is still registered: %d", got)
	}
	if st, _ := holder.SSDStats(); st.Corrupt != 1 {
		t.Fatalf("corrupt count %d", st.Corrupt)
	}
}

// A caller's offload waits in the precondition for the object's write; a
// cancel there leaves no pin (an upsert is not refused as busy) and no
// staging space; an offload let through completes.
func TestSSDOffloadCancelLeavesNothingPinned(t *testing.T) {
	m := testkit.StartMaster(t, "--enable_offload", "--default_kv_lease_ttl=30000")
	c := newTierClient(t, m.Addr(), 1<<20, t.TempDir(), tierEnv(env{storage.EnvHeartbeat: "3600"}))
	// Start a put and leave it unfinished: the precondition must wait.
	mc := rpc.NewClient(m.Addr())
	defer mc.Close()
	var start wire.PutStartResp
	if err := mc.Call(context.Background(), wire.OpPutStart, &wire.PutStartReq{ClientID: "w", Keys: []string{"k"}, Sizes: []uint64{100}}, &start); err != nil || start.Results[0].Code != wire.OK {
		t.Fatal(err, start)
	}
	hs, err := c.Offload([]string{"k"}, []uint64{100})
	if err != nil || hs[0] == nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "the offload waiting in its precondition", func() bool {
		s, _ := c.SSDStats()
		return s.Pipeline.Enqueued == 1
	})
	time.Sleep(30 * time.Millisecond)
	hs[0].Cancel()
	<-hs[0].Done()
	if !errors.Is(hs[0].Err(), context.Canceled) {
		t.Fatalf("cancelled offload: %v", hs[0].Err())
	}
	var end wire.CodesResp
	mc.Call(context.Background(), wire.OpPutEnd, &wire.KeysReq{ClientID: "w", Keys: []string{"k"}}, &end)
	if got := c.Writes().UpsertBatch([]client.PutItem{{Key: "k", Parts: [][]byte{testkit.Pattern(1, 100)}}}, wire.ReplicaConfig{}); got[0] != wire.OK {
		t.Fatalf("upsert after a cancelled offload: %v", got[0])
	}
	if st, _ := c.SSDStats(); st.Objects != 0 || st.Pipeline.Upgraded != 0 || st.Pipeline.Cancelled[pipeline.StagePrecondition] != 1 {
		t.Fatalf("a cancelled offload wrote or pinned: %+v", st)
	}
	if n := c.SSD().Pinned(); n != 0 {
		t.Fatalf("%d pins left", n)
	}
	// Not cancelled: it goes through.
	hs, _ = c.Offload([]string{"k"}, []uint64{100})
	<-hs[0].Done()
	if hs[0].Err() != nil {
		t.Fatal(hs[0].Err())
	}
	hs[0].Cancel() // after the fact: no effect
	if _, ok := c.SSD().Storage().Backend().Size("k"); !ok || hs[0].Err() != nil {
		t.Fatal("offload not on disk")
	}
	if n := c.SSD().Pinned(); n != 0 {
		t.Fatalf("%d pins left after the offload", n)
	}
	if _, err := clienttest.New(t, m.Addr(), 0).Offload([]string{"k"}, []uint64{100}); wire.CodeOf(err) != wire.ErrInvalidParams {
		t.Fatalf("offload without a tier: %v", err)
	}
}

func TestSSDSetupRejectsBadPaths(t *testing.T) {
	m := testkit.StartMaster(t, "--enable_offload")
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	os.WriteFile(file, []byte("x"), 0o644)
	cases := map[string]struct {
		path string
		code wire.Code
	}{
		"missing":     {filepath.Join(dir, "nope"), wire.ErrFileNotFound},
		"a file":      {file, wire.ErrInvalidParams},
		"empty":       {"", wire.ErrInvalidParams},
		"not a place": {unwritableDir(t), wire.ErrFileWriteFail},
	}
	for name, tc := range cases {
		_, err := newTierClientErr(m.Addr(), 1<<20, tc.path, tierEnv(nil))
		if wire.CodeOf(err) != tc.code {
			t.Errorf("%s (%s): %v, want %v", name, tc.path, err, tc.code)
		}
	}
	// A directory another client runs its tier on.
	used := t.TempDir()
	newTierClient(t, m.Addr(), 1<<20, used, tierEnv(nil))
	if _, err := newTierClientErr(m.Addr(), 1<<20, used, tierEnv(nil)); wire.CodeOf(err) != wire.ErrInvalidParams || !strings.Contains(err.Error(), "in use") {
		t.Errorf("second tier on one directory: %v", err)
	}
	if _, err := newTierClientErr(m.Addr(), 1<<20, t.TempDir(), tierEnv(env{storage.EnvDescriptor: "tape"})); wire.CodeOf(err) != wire.ErrInvalidParams {
		t.Errorf("unknown backend: %v", err)
	}
}

// unwritableDir is a directory this process cannot create files in: a
// read-only one, or (as root, who ignores permissions) sysfs.
func unwritableDir(t *testing.T) string {
	if os.Geteuid() != 0 {
		d := t.TempDir()
		os.Chmod(d, 0o555)
		t.Cleanup(func() { os.Chmod(d, 0o755) })
		return d
	}
	if f, err := os.CreateTemp("/sys", "probe"); err == nil {
		f.Close()
		os.Remove(f.Name())
		t.Skip("no unwritable directory here (root, writable /sys)")
	}
	return "/sys"
}

// The tier's RPC endpoint is reachable by any peer: garbage, unknown ops
// and bad requests get errors or a closed connection, never a crash, and
// the endpoint goes on serving.
func TestSSDEndpointSurvivesBadPeers(t *testing.T) {
	m := startOffloadMaster(t)
	holder := newTierClient(t, m, 1<<20, t.TempDir(), tierEnv(nil))
	ep := holder.SSD().Endpoint()
	for _, raw := range [][]byte{
		[]byte("GET / HTTP/1.1\r\n\r\n"),
		wire.AppendFrame(nil, 1, wire.OpPutStart, wire.OK, []byte{0x90}),                  // a master op
		wire.AppendFrame(nil, 2, wire.OpStageOffloaded, wire.OK, []byte{0xc1}),            // bad msgpack
		wire.AppendFrame(nil, 3, wire.Op(63), wire.OK, nil),                               // unknown op
		wire.AppendFrame(nil, 4, wire.OpReleaseStaged, wire.OK, []byte{0x91, 0xa1, 0x78}), // wrong type
	} {
		conn, err := net.Dial("tcp", ep)
		if err != nil {
			t.Fatal(err)
		}
		conn.Write(raw)
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := conn.Read(make([]byte, 64)); err == nil {
			t.Errorf("%q: answered instead of closing", raw)
		}
		conn.Close()
	}
	peer := rpc.NewClient(ep)
	defer peer.Close()
	ctx := context.Background()
	var resp wire.StageResp
	if err := peer.Call(ctx, wire.OpStageOffloaded, &wire.StageReq{Keys: []string{"a", "b"}, Sizes: []uint64{1}}, &resp); wire.CodeOf(err) != wire.ErrInvalidParams {
		t.Fatalf("mismatched lengths: %v", err)
	}
	keys := make([]string, ssdtier.MaxStageKeys+1)
	if err := peer.Call(ctx, wire.OpStageOffloaded, &wire.StageReq{Keys: keys, Sizes: make([]uint64, len(keys))}, &resp); wire.CodeOf(err) != wire.ErrInvalidParams {
		t.Fatalf("too many keys: %v", err)
	}
	if err := peer.Call(ctx, wire.OpStageOffloaded, &wire.StageReq{Keys: []string{"", "nope", "x"}, Sizes: []uint64{1, 1 << 62, 0}}, &resp); err != nil {
		t.Fatal(err)
	}
	for i, code := range resp.Codes {
		if code == wire.OK {
			t.Fatalf("key %d of nonsense staged", i)
		}
	}
	if err := peer.Call(ctx, wire.OpReleaseStaged, &wire.ReleaseStagedReq{BatchID: 12345}, &wire.CodesResp{}); err != nil {
		t.Fatal(err)
	}
	// Still serving: a real object round trip through the tier.
	writer := clienttest.New(t, m, 0)
	v := testkit.Pattern(9, 100<<10)
	putRetrying(t, writer, "ok", v)
	testkit.WaitFor(t, "the copy on disk", func() bool { _, ok := holder.SSD().Storage().Backend().Size("ok"); return ok })
	if err := peer.Call(ctx, wire.OpStageOffloaded, &wire.StageReq{Keys: []string{"ok"}, Sizes: []uint64{uint64(len(v))}}, &resp); err != nil || resp.Codes[0] != wire.OK {
		t.Fatalf("stage after the abuse: %v %v", err, resp.Codes)
	}
	if !bytes.Equal(holder.SSD().Storage().Buffer().Slice(resp.Offsets[0], uint64(len(v))), v) {
		t.Fatal("staged bytes differ")
	}
}

// A master that restarts knows nothing; the tier's client rejoins and
// brings its disk copies back, so the objects are readable again.
func TestSSDSurvivesAMasterRestart(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	flags := []string{"--enable_offload", fmt.Sprintf("--rpc_port=%d", port)}
	start := func() *server.Server {
		opts, err := server.ParseFlags(append([]string{"--rpc_address=127.0.0.1", "--metrics_port=-1"}, flags...), nil)
		if err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(10 * time.Second); ; {
			srv, err := server.Start(opts)
			if err == nil {
				return srv
			}
			if time.Now().After(deadline) {
				t.Fatal(err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	m := start()
	holder := newTierClient(t, m.Addr(), 1<<20, t.TempDir(), tierEnv(nil))
	writer := clienttest.New(t, m.Addr(), 0)
	vals := map[string][]byte{}
	for i := range 8 {
		k := fmt.Sprint("survivor", i)
		vals[k] = testkit.Pattern(uint64(50+i), 64<<10)
		putRetrying(t, writer, k, vals[k])
	}
	testkit.WaitFor(t, "every object on disk and known to the master", func() bool {
		st, _ := holder.SSDStats()
		return st.Objects == len(vals) && st.Offloaded >= int64(len(vals))
	})
	m.Close()
	m = start()
	defer m.Close()
	testkit.WaitFor(t, "the holder's copies back at the new master", func() bool {
		st, _ := holder.SSDStats()
		return st.Recovered >= int64(len(vals))
	})
	for k, v := range vals {
		mustGet(t, writer, k, v)
	}
}
