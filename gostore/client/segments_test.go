package client

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gostore/gostore/gostore/internal/testkit"
	"github.com/gostore/gostore/gostore/memlimit"
	"github.com/gostore/gostore/gostore/wire"
)

func putOne(t *testing.T, c *Client, key string, v []byte) wire.Code {
	t.Helper()
	return writeOne(c, key, v, false)
}

func getOne(c *Client, key string, n int) ([]byte, int64) {
	dst := make([]byte, n)
	got := c.Reads().GetInto([]string{key}, [][][]byte{{dst}})[0]
	return dst, got
}

// An allocated segment of a pure consumer is the only memory of the pool:
// a peer's puts land there, both read them back over shared memory and
// TCP, and an immediate unmount takes the objects with it and frees the
// memfd.
func TestAllocatedSegmentServesAndUnmounts(t *testing.T) {
	eachTransport(t, func(t *testing.T) {
		m := testkit.StartMaster(t)
		owner := newClient(t, m.Addr(), 0)
		writer := newClient(t, m.Addr(), 0)
		ids, size, err := owner.Segments().AllocateAndMount(1<<20, "tcp", "")
		if err != nil || len(ids) != 1 || size != AllocAlign {
			t.Fatalf("AllocateAndMount = %v, %d, %v", ids, size, err)
		}
		segs := m.Core().Segments()
		if len(segs) != 1 || segs[0].Size != AllocAlign || segs[0].ClientID != owner.ID() {
			t.Fatalf("master's segments: %+v", segs)
		}
		v := testkit.Pattern(7, 300000)
		if code := putOne(t, writer, "k", v); code != wire.OK {
			t.Fatalf("put: %v", code)
		}
		for _, who := range []*Client{writer, owner} {
			if got, n := getOne(who, "k", len(v)); n != int64(len(v)) || !bytes.Equal(got, v) {
				t.Fatalf("get = %d, bytes equal %v", n, bytes.Equal(got, v))
			}
		}
		// The wrong kind of id, and ids never returned, are -1; the good
		// one in the same call is still unmounted.
		if err := owner.Segments().UnmountSegments(ids, 0, false); wire.CodeOf(err) != wire.ErrInternal {
			t.Fatalf("unmount of an allocated id as a file segment: %v", err)
		}
		if err := owner.Segments().UnmountSegments([]string{"1-2", ids[0], "junk"}, 0, true); wire.CodeOf(err) != wire.ErrInternal {
			t.Fatalf("unmount with unknown ids: %v", err)
		}
		if n := len(m.Core().Segments()); n != 0 {
			t.Fatalf("%d segments left after unmount", n)
		}
		if _, n := getOne(writer, "k", len(v)); n != int64(wire.ErrObjectNotFound) {
			t.Fatalf("get after unmount = %d, want -704", n)
		}
		if code := putOne(t, writer, "k2", v); code != wire.ErrNoAvailableHandle {
			t.Fatalf("put with no segment = %v", code)
		}
		if err := owner.Segments().UnmountSegments(ids, 0, true); wire.CodeOf(err) != wire.ErrInternal {
			t.Fatalf("second unmount: %v", err)
		}
		// A same-host peer keeps its mapping until it forgets the segment
		// (here: closes); the owner's own are gone with the unmount.
		writer.Close()
		if mapsMention(t, "gostore:"+segs[0].Name) {
			t.Fatal("the unmounted segment's memfd is still mapped in this process")
		}
	})
}

// mapsMention reports whether /proc/self/maps names s.
func mapsMention(t *testing.T, s string) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Contains(string(b), s)
}

// A file segment keeps objects in the file's pages, at the offset asked
// for; peers reach it over TCP.
func TestFileSegmentHoldsObjectsInTheFile(t *testing.T) {
	m := testkit.StartMaster(t)
	owner := newClient(t, m.Addr(), 0)
	writer := newClient(t, m.Addr(), 0)
	path := filepath.Join(t.TempDir(), "seg")
	page := os.Getpagesize()
	if err := os.WriteFile(path, make([]byte, 4*page+1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	ids, err := owner.Segments().MountFile(path, uint64(4*page), 1<<20, "tcp", "")
	if err != nil || len(ids) != 1 {
		t.Fatalf("MountFile = %v, %v", ids, err)
	}
	v := testkit.Pattern(9, 100000)
	if code := putOne(t, writer, "f", v); code != wire.OK {
		t.Fatal(code)
	}
	for _, who := range []*Client{writer, owner} {
		if got, n := getOne(who, "f", len(v)); n != int64(len(v)) || !bytes.Equal(got, v) {
			t.Fatalf("get = %d", n)
		}
	}
	file, _ := os.ReadFile(path)
	if at := bytes.Index(file, v); at < 4*page {
		t.Fatalf("object found at %d of the file, want at or past the offset %d", at, 4*page)
	}
	if err := owner.Segments().UnmountSegments(ids, 0, true); wire.CodeOf(err) != wire.ErrInternal {
		t.Fatalf("file id unmounted as an allocated one: %v", err)
	}
	if err := owner.Segments().UnmountSegments(ids, 0, false); err != nil {
		t.Fatal(err)
	}
	if _, n := getOne(writer, "f", len(v)); n != int64(wire.ErrObjectNotFound) {
		t.Fatalf("get after unmount = %d", n)
	}
	if mapsMention(t, path) {
		t.Fatal("the file is still mapped after unmount")
	}
}

// What cannot be mounted fails with -1 (Mooncake's code) and leaves
// nothing behind at the master or in this process.
func TestMountRefusals(t *testing.T) {
	m := testkit.StartMaster(t)
	c := newClient(t, m.Addr(), 0)
	path := filepath.Join(t.TempDir(), "small")
	if err := os.WriteFile(path, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	page := uint64(os.Getpagesize())
	cases := []struct {
		what         string
		path         string
		offset, size uint64
	}{
		{"missing file", path + ".nope", 0, page},
		{"past the end", path, 0, 2 << 20},
		{"offset past the end", path, 2 << 20, page},
		{"range wraps", path, page, ^uint64(0)},
		{"unaligned offset", path, 100, page},
		{"a directory", t.TempDir(), 0, page},
	}
	for _, tc := range cases {
		if ids, err := c.Segments().MountFile(tc.path, tc.offset, tc.size, "tcp", ""); wire.CodeOf(err) != wire.ErrInternal || ids != nil {
			t.Errorf("%s: %v, %v", tc.what, ids, err)
		}
	}
	if ids, err := c.Segments().MountFile(path, 0, 0, "tcp", ""); err != nil || ids == nil || len(ids) != 0 {
		t.Errorf("size 0: %v, %v (want no ids and no error)", ids, err)
	}
	limit, ok := memlimit.Probe{}.Tightest()
	if !ok {
		t.Fatal("no memory bound readable")
	}
	avail := limit.Free
	for _, size := range []uint64{0, avail + AllocAlign, 1 << 50, ^uint64(0)} {
		if ids, n, err := c.Segments().AllocateAndMount(size, "tcp", ""); wire.CodeOf(err) != wire.ErrInternal || ids != nil || n != 0 {
			t.Errorf("allocate %d: %v, %d, %v", size, ids, n, err)
		}
	}
	if segs := m.Core().Segments(); len(segs) != 0 {
		t.Fatalf("refused mounts left segments: %+v", segs)
	}
	if mapsMention(t, path) {
		t.Fatal("a refused mount left the file mapped")
	}
	c.Close()
	if _, err := c.Segments().MountFile(path, 0, page, "tcp", ""); wire.CodeOf(err) != wire.ErrInternal {
		t.Fatalf("mount after close: %v", err)
	}
	if _, _, err := c.Segments().AllocateAndMount(1, "tcp", ""); wire.CodeOf(err) != wire.ErrInternal {
		t.Fatalf("allocate after close: %v", err)
	}
	if err := c.Segments().UnmountSegments([]string{"1-2"}, 0, false); wire.CodeOf(err) != wire.ErrInternal {
		t.Fatalf("unmount after close: %v", err)
	}
}

// A graceful unmount keeps the objects readable for the grace period while
// nothing new lands there, then the master removes the segment and the
// client lets the memory go; a second unmount meanwhile is -600.
func TestGracefulUnmount(t *testing.T) {
	m := testkit.StartMaster(t)
	owner := newClient(t, m.Addr(), 0)
	writer := newClient(t, m.Addr(), 0)
	ids, _, err := owner.Segments().AllocateAndMount(1, "tcp", "")
	if err != nil {
		t.Fatal(err)
	}
	name := m.Core().Segments()[0].Name
	v := testkit.Pattern(1, 5000)
	if code := putOne(t, writer, "g", v); code != wire.OK {
		t.Fatal(code)
	}
	start := time.Now()
	if err := owner.Segments().UnmountSegments(ids, time.Second, true); err != nil {
		t.Fatal(err)
	}
	if err := owner.Segments().UnmountSegments(ids, time.Second, true); wire.CodeOf(err) != wire.ErrInvalidParams {
		t.Fatalf("second unmount during the grace period: %v", err)
	}
	if err := owner.Segments().UnmountSegments(ids, 0, true); wire.CodeOf(err) != wire.ErrInvalidParams {
		t.Fatalf("immediate unmount during the grace period: %v", err)
	}
	if segs := m.Core().Segments(); len(segs) != 1 || !segs[0].Draining {
		t.Fatalf("segments while draining: %+v", segs)
	}
	if got, n := getOne(writer, "g", len(v)); n != int64(len(v)) || !bytes.Equal(got, v) {
		t.Fatalf("read during the grace period = %d", n)
	}
	if code := putOne(t, writer, "g2", v); code != wire.ErrNoAvailableHandle {
		t.Fatalf("put onto a draining segment = %v", code)
	}
	testkit.WaitFor(t, "the segment to go", func() bool { return len(m.Core().Segments()) == 0 })
	if el := time.Since(start); el < time.Second {
		t.Fatalf("segment removed after %v, before its grace period", el)
	}
	if _, n := getOne(writer, "g", len(v)); n != int64(wire.ErrObjectNotFound) {
		t.Fatalf("get after the grace period = %d", n)
	}
	writer.Close() // its mapping of the segment (shared memory) goes with it
	testkit.WaitFor(t, "the memory to be released", func() bool { return !mapsMention(t, "gostore:"+name) })
	if err := owner.Segments().UnmountSegments(ids, 0, true); wire.CodeOf(err) != wire.ErrInternal {
		t.Fatalf("unmount after release: %v", err)
	}
}

// Close during a grace period releases everything at once, and a segment
// still being awaited does not hold Close up.
func TestCloseDuringGracePeriod(t *testing.T) {
	m := testkit.StartMaster(t)
	owner := newClient(t, m.Addr(), 0)
	ids, _, err := owner.Segments().AllocateAndMount(1, "tcp", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := owner.Segments().AllocateAndMount(1, "tcp", ""); err != nil { // stays mounted until close
		t.Fatal(err)
	}
	names := []string{}
	for _, s := range m.Core().Segments() {
		names = append(names, s.Name)
	}
	if err := owner.Segments().UnmountSegments(ids, time.Hour, true); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { owner.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close hangs on a draining segment")
	}
	if n := len(m.Core().Segments()); n != 0 {
		t.Fatalf("%d segments after close", n)
	}
	for _, n := range names {
		if mapsMention(t, "gostore:"+n) {
			t.Fatalf("%s still mapped after close", n)
		}
	}
}

// After a master restart the run-time segments come back (same ids, new
// master IDs) and take objects again.
func TestMasterRestartRemountsExtraSegments(t *testing.T) {
	withConfig(t, func(c *Config) { c.PingInterval = 20 * time.Millisecond })
	m := testkit.StartMaster(t)
	addr := m.Addr()
	owner := newClient(t, addr, 0)
	ids, _, err := owner.Segments().AllocateAndMount(1, "tcp", "")
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
	_, port, _ := net.SplitHostPort(addr)
	m2 := testkit.StartMaster(t, "--rpc_port="+port)
	testkit.WaitFor(t, "the remount", func() bool { return len(m2.Core().Segments()) == 1 })
	writer := newClient(t, addr, 0)
	v := testkit.Pattern(5, 4000)
	if code := putOne(t, writer, "r", v); code != wire.OK {
		t.Fatalf("put after remount: %v", code)
	}
	if got, n := getOne(writer, "r", len(v)); n != int64(len(v)) || !bytes.Equal(got, v) {
		t.Fatalf("get after remount = %d", n)
	}
	if err := owner.Segments().UnmountSegments(ids, 0, true); err != nil {
		t.Fatalf("unmount by the same id after the remount: %v", err)
	}
	if n := len(m2.Core().Segments()); n != 0 {
		t.Fatalf("%d segments left", n)
	}
}

func TestInitAllConfig(t *testing.T) {
	cfg := InitAllConfig("tcp", "mlx5_0", 32<<20)
	want := Config{LocalHostname: "localhost:12345", MetadataServer: "127.0.0.1:2379", GlobalSegmentSize: 32 << 20,
		LocalBufferSize: 1 << 30, Protocol: "tcp", RDMADevices: "mlx5_0", MasterServerAddr: "127.0.0.1:50051"}
	if cfg.LocalHostname != want.LocalHostname || cfg.MetadataServer != want.MetadataServer ||
		cfg.GlobalSegmentSize != want.GlobalSegmentSize || cfg.LocalBufferSize != want.LocalBufferSize ||
		cfg.Protocol != want.Protocol || cfg.RDMADevices != want.RDMADevices || cfg.MasterServerAddr != want.MasterServerAddr {
		t.Fatalf("InitAllConfig = %+v", cfg)
	}
}

// Two segments over the same bytes of a file would give the same memory
// to two objects: a range overlapping a mounted one is refused, whatever
// path names the file; disjoint ranges are fine.
func TestFileSegmentOverlapRefused(t *testing.T) {
	m := testkit.StartMaster(t)
	c := newClient(t, m.Addr(), 0)
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	if err := os.WriteFile(path, make([]byte, 4<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(path, link); err != nil {
		t.Fatal(err)
	}
	first, err := c.Segments().MountFile(path, 0, 2<<20, "tcp", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path         string
		offset, size uint64
	}{{path, 0, 2 << 20}, {path, 1 << 20, 2 << 20}, {link, 0, 4096}} {
		if ids, err := c.Segments().MountFile(tc.path, tc.offset, tc.size, "tcp", ""); wire.CodeOf(err) != wire.ErrInternal || ids != nil {
			t.Fatalf("overlapping mount %+v: %v, %v", tc, ids, err)
		}
	}
	if _, err := c.Segments().MountFile(link, 2<<20, 2<<20, "tcp", ""); err != nil {
		t.Fatalf("disjoint range: %v", err)
	}
	if n := len(m.Core().Segments()); n != 2 {
		t.Fatalf("%d segments, want 2", n)
	}
	if err := c.Segments().UnmountSegments(first, 0, false); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Segments().MountFile(path, 1<<20, 1<<20, "tcp", ""); err != nil {
		t.Fatalf("the range is free again: %v", err)
	}
}
