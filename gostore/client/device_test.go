package client

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"github.com/gostore/gostore/gostore/gpu"
	"github.com/gostore/gostore/gostore/internal/testkit"
	"github.com/gostore/gostore/gostore/transfer"
	"github.com/gostore/gostore/gostore/wire"
)

// No GPU exists where these tests run: the device paths run against the
// FAKE driver of gostore/gpu/testdata (its "device memory" is host memory
// it tracks), in a child process because the driver is loaded once.
// tests/gpu runs the same paths on a real GPU.
func TestDevicePartsFakeDriver(t *testing.T) {
	if os.Getenv(gpu.EnvLibrary) != "" {
		t.Skip("child")
	}
	lib := filepath.Join(t.TempDir(), "libcuda-fake.so")
	if out, err := exec.Command("gcc", "-shared", "-fPIC", "-o", lib, "../gpu/testdata/fakecuda.c").CombinedOutput(); err != nil {
		t.Skipf("cannot build the fake driver: %v\n%s", err, out)
	}
	for _, name := range []string{"TestDevicePartsChild", "TestGPUSegmentChild"} {
		cmd := exec.Command(os.Args[0], "-test.run=^"+name+"$", "-test.v")
		cmd.Env = append(os.Environ(), gpu.EnvLibrary+"="+lib)
		out, err := cmd.CombinedOutput()
		if err != nil || !bytes.Contains(out, []byte("--- PASS: "+name)) {
			t.Fatalf("%s: %v\n%s", name, err, out)
		}
	}
}

// Without a driver a GPU segment is refused with the reason; so are
// locations that are not one and a GPU segment with the SSD tier.
func TestGPUSegmentRefused(t *testing.T) {
	if os.Getenv(gpu.EnvLibrary) != "" {
		t.Skip("child")
	}
	m := testkit.StartMaster(t)
	for _, tc := range []struct{ loc, want string }{
		{"cuda:0", "no CUDA driver"}, {"tpu:0", "want"}, {"cuda:-1", "want"}, {"cuda:x", "want"},
	} {
		if gpu.Probe().Available && tc.loc == "cuda:0" {
			continue
		}
		_, err := New(Config{LocalHostname: "127.0.0.1", MasterServerAddr: m.Addr(), GlobalSegmentSize: 1 << 20,
			SegmentLocation: tc.loc}, nil)
		if wire.CodeOf(err) != wire.ErrInvalidParams || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("location %q: %v", tc.loc, err)
		}
	}
	_, err := New(Config{LocalHostname: "127.0.0.1", MasterServerAddr: m.Addr(), GlobalSegmentSize: 1 << 20,
		SegmentLocation: "cuda:0", EnableSSDOffload: true, SSDOffloadPath: t.TempDir()}, nil)
	if wire.CodeOf(err) != wire.ErrInvalidParams {
		t.Errorf("a GPU segment with the SSD tier: %v", err)
	}
}

// A GPU segment in the pool: written and read by its owner (driver
// copies), by a same-host peer (IPC mapping; with a real driver a process
// cannot open its own handle, so that peer falls back to TCP) and over TCP
// (the transfer server staging through host memory); bytes verified.
func TestGPUSegmentChild(t *testing.T) {
	deviceDriver(t)
	m := testkit.StartMaster(t)
	owner, err := New(Config{LocalHostname: "127.0.0.1", MasterServerAddr: m.Addr(), GlobalSegmentSize: 16 << 20,
		SegmentLocation: "cuda:0"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close()
	peer := newClient(t, m.Addr(), 0)
	viaTCP, err := New(edge(Config{LocalHostname: "127.0.0.1", MasterServerAddr: m.Addr(), ForceTCP: true}), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer viaTCP.Close()
	own, _ := owner.peers.get(owner.peers.ownID)
	if own.Location != "cuda:0" || len(own.IPC) != 64 || own.ShmPath != "" {
		t.Fatalf("the GPU segment's description: %+v", own)
	}
	if path := peer.engine.Route(own); path != transfer.RouteIPC {
		t.Fatalf("a same-host peer reaches the GPU segment by %s", path)
	}
	for i, w := range []*Client{owner, peer, viaTCP} {
		v := testkit.Pattern(uint64(i), 2<<20+i)
		key := "gpu" + string(rune('0'+i))
		if codes := w.Writes().PutBatch([]PutItem{{Key: key, Parts: [][]byte{v[:100], v[100:]}}}, wire.ReplicaConfig{ReplicaNum: 1}); codes[0] != wire.OK {
			t.Fatalf("writer %d: %v", i, codes[0])
		}
		for j, r := range []*Client{owner, peer, viaTCP} {
			got := make([]byte, len(v))
			if n := r.Reads().GetInto([]string{key}, [][][]byte{{got}}); n[0] != int64(len(v)) || !bytes.Equal(got, v) {
				t.Fatalf("writer %d, reader %d: %d bytes, equal %v", i, j, n[0], bytes.Equal(got, v))
			}
		}
	}
	// Device parts: straight between GPU memory and the GPU segment (one
	// copy, no staging) for its owner and an IPC peer; staged over TCP.
	head := testkit.Pattern(99, 64)
	for i, w := range []*Client{owner, peer, viaTCP} {
		n := uint64(1<<20 + 17*i)
		data := testkit.Pattern(uint64(50+i), int(n))
		src := devAlloc(t, data, n)
		key := "gpudev" + string(rune('0'+i))
		dev := [][]DevicePart{{{Index: 1, Ptr: src, Size: n, Device: 0}}}
		if codes := w.Writes().PutBatchDevice([]PutItem{{Key: key, Parts: [][]byte{head, nil}}}, dev, wire.ReplicaConfig{ReplicaNum: 1}, false); codes[0] != wire.OK {
			t.Fatalf("device put by writer %d: %v", i, codes[0])
		}
		for j, r := range []*Client{owner, peer, viaTCP} {
			dst := devAlloc(t, bytes.Repeat([]byte{0xEE}, int(n+100)), n+100)
			gotHead := make([]byte, 64)
			p, err := r.Reads().GetStart([]string{key})
			if err != nil {
				t.Fatal(err)
			}
			got := r.Reads().GetFinishDevice(p, [][][]byte{{gotHead, nil}}, [][]DevicePart{{{Index: 1, Ptr: dst, Size: n + 100, Device: 0}}})
			back := devRead(t, dst, n+100)
			if got[0] != int64(64+n) || !bytes.Equal(gotHead, head) || !bytes.Equal(back[:n], data) ||
				!bytes.Equal(back[n:], bytes.Repeat([]byte{0xEE}, 100)) {
				t.Fatalf("device read by %d of writer %d's object: %d", j, i, got[0])
			}
		}
	}
	if staged(owner) || (strings.Contains(os.Getenv(gpu.EnvLibrary), "fake") && staged(peer)) || !staged(viaTCP) {
		t.Fatalf("staging used: owner %v, IPC peer %v, TCP client %v", staged(owner), staged(peer), staged(viaTCP))
	}
	// A device part list that does not match the scatter list is refused
	// and nothing is published.
	src := devAlloc(t, testkit.Pattern(3, 4096), 4096)
	for _, c := range []*Client{owner, viaTCP} { // straight, and staged
		for _, bad := range [][]DevicePart{
			{{Index: 5, Ptr: src, Size: 4096, Device: 0}},
			{{Index: 1, Ptr: src, Size: 4096, Device: 0}, {Index: 1, Ptr: src, Size: 4096, Device: 0}},
			{{Index: 0, Ptr: src, Size: 4096, Device: 0}}, // part 0 is host memory
		} {
			codes := c.Writes().PutBatchDevice([]PutItem{{Key: "badparts", Parts: [][]byte{head, nil}}}, [][]DevicePart{bad},
				wire.ReplicaConfig{ReplicaNum: 1}, false)
			if codes[0] != wire.ErrInvalidParams || owner.Keys().GetSize("badparts") != int64(wire.ErrObjectNotFound) {
				t.Fatalf("device parts %+v: %v", bad, codes[0])
			}
		}
	}
	// A registered host buffer copied to or from a GPU segment is
	// page-locked once (owner: own segment; peer: over IPC with the fake,
	// TCP with a real driver, where nothing needs locking) and unlocked
	// when unregistered.
	for _, c := range []*Client{owner, peer} {
		buf := testkit.Pattern(77, 1<<20)
		addr := uint64(uintptr(unsafe.Pointer(&buf[0])))
		if err := c.Buffers().RegisterBuffer(addr, uint64(len(buf))); err != nil {
			t.Fatal(err)
		}
		key := "pinned" + c.Hostname()
		if codes := c.Writes().PutBatch([]PutItem{{Key: key, Parts: [][]byte{buf[4096:]}}}, wire.ReplicaConfig{ReplicaNum: 1}); codes[0] != wire.OK {
			t.Fatal(codes[0])
		}
		if c == owner || strings.Contains(os.Getenv(gpu.EnvLibrary), "fake") {
			if k, _ := gpu.PointerKind(addr); k != gpu.Host {
				t.Fatalf("a registered buffer copied to a GPU segment is %v, not page-locked", k)
			}
		}
		back := make([]byte, len(buf)-4096)
		if got := c.Reads().GetInto([]string{key}, [][][]byte{{back}}); got[0] != int64(len(back)) || !bytes.Equal(back, buf[4096:]) {
			t.Fatalf("read back: %d", got[0])
		}
		if err := c.Buffers().UnregisterBuffer(addr); err != nil {
			t.Fatal(err)
		}
		if k, _ := gpu.PointerKind(addr); k != gpu.Unknown {
			t.Fatalf("an unregistered buffer is still %v", k)
		}
		runtime.KeepAlive(buf)
	}
	if _, err := owner.Plans().Join(); wire.CodeOf(err) != wire.ErrInvalidParams {
		t.Fatalf("a plan heap on a GPU: %v", err)
	}
}

func devAlloc(t *testing.T, fill []byte, size uint64) uint64 {
	t.Helper()
	p, err := gpu.Alloc(0, size)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gpu.Free(0, p) })
	if fill != nil {
		if err := gpu.CopyToDevice(0, p, uint64(uintptr(unsafe.Pointer(&fill[0]))), uint64(len(fill))); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

func devRead(t *testing.T, p, n uint64) []byte {
	t.Helper()
	b := make([]byte, n)
	if err := gpu.CopyToHost(0, uint64(uintptr(unsafe.Pointer(&b[0]))), p, n); err != nil {
		t.Fatal(err)
	}
	return b
}

// staged reports whether c ever staged device memory through its bounces.
func staged(c *Client) bool {
	return c.engine.StagedParts() > 0
}

// deviceDriver skips unless this process has a driver to test with: the
// FAKE one (a child of TestDevicePartsFakeDriver) or a real GPU's.
func deviceDriver(t *testing.T) {
	t.Helper()
	if strings.Contains(os.Getenv(gpu.EnvLibrary), "fake") {
		return
	}
	if info := gpu.Probe(); os.Getenv(gpu.EnvLibrary) != "" || !info.Available {
		t.Skip("run by TestDevicePartsFakeDriver, or where a GPU is")
	}
}

func TestDevicePartsChild(t *testing.T) {
	deviceDriver(t)
	withConfig(t, func(c *Config) { c.GPUBounceBytes = 2 << 20 }) // small, so large parts take the pinned fallback
	m := testkit.StartMaster(t)
	owner := newClient(t, m.Addr(), 32<<20)
	reader := newClient(t, m.Addr(), 0)
	viaTCP, err := New(edge(Config{LocalHostname: "127.0.0.1", MasterServerAddr: m.Addr(), ForceTCP: true}), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer viaTCP.Close()
	head := testkit.Pattern(1, 100)
	// The owner copies into its own segment and the reader into its shared
	// mapping of it, both page-locked: one copy. Over TCP the device parts
	// are staged (4 KiB in the arena, 3 MiB in a pinned mapping of its own).
	for _, c := range []*Client{owner, reader, viaTCP} {
		for _, n := range []uint64{4096, 3<<20 + 5} {
			data := testkit.Pattern(n, int(n))
			src := devAlloc(t, data, n)
			key := fmt.Sprint("dev", n, c.Hostname())
			item := []PutItem{{Key: key, Parts: [][]byte{head, nil}}}
			dev := [][]DevicePart{{{Index: 1, Ptr: src, Size: n, Device: 0}}}
			if codes := c.Writes().PutBatchDevice(item, dev, wire.ReplicaConfig{ReplicaNum: 1}, false); codes[0] != wire.OK {
				t.Fatalf("put from device memory: %v", codes[0])
			}
			// Host destination: the device bytes arrived.
			host := make([]byte, 100+n)
			if got := owner.Reads().GetInto([]string{key}, [][][]byte{{host}}); got[0] != int64(100+n) ||
				!bytes.Equal(host[:100], head) || !bytes.Equal(host[100:], data) {
				t.Fatalf("host read of an object put from device memory: %d", got[0])
			}
			// Device destination larger than the object: its tail is kept.
			dst := devAlloc(t, bytes.Repeat([]byte{0xEE}, int(n+64)), n+64)
			hhead := make([]byte, 100)
			p, err := c.Reads().GetStart([]string{key})
			if err != nil {
				t.Fatal(err)
			}
			got := c.Reads().GetFinishDevice(p, [][][]byte{{hhead, nil}}, [][]DevicePart{{{Index: 1, Ptr: dst, Size: n + 64, Device: 0}}})
			back := devRead(t, dst, n+64)
			if got[0] != int64(100+n) || !bytes.Equal(hhead, head) || !bytes.Equal(back[:n], data) ||
				!bytes.Equal(back[n:], bytes.Repeat([]byte{0xEE}, 64)) {
				t.Fatalf("device read: %d", got[0])
			}
		}
	}
	if staged(owner) || staged(reader) || !staged(viaTCP) {
		t.Fatalf("staging used: owner %v, shm reader %v, TCP client %v", staged(owner), staged(reader), staged(viaTCP))
	}
	// Registered device memory is known as such; a range that leaves the
	// allocation is refused.
	buf := devAlloc(t, nil, 1<<20)
	if err := reader.Buffers().RegisterBuffer(buf, 1<<20); err != nil {
		t.Fatal(err)
	}
	if dev, ok := reader.Buffers().BufferDevice(buf+10, 100); !ok || dev != 0 {
		t.Fatalf("registered device buffer: %d %v", dev, ok)
	}
	other := devAlloc(t, nil, 1<<20)
	if err := reader.Buffers().RegisterBuffer(other+4096, 1<<20); err == nil {
		t.Fatal("a range reaching past its allocation was registered")
	}
	if !strings.Contains(os.Getenv(gpu.EnvLibrary), "fake") {
		return // a real driver is not fed freed pointers
	}
	// A device part the driver cannot read fails its object alone; nothing
	// is stored under its key.
	gone, _ := gpu.Alloc(0, 4096)
	gpu.Free(0, gone)
	items := []PutItem{{Key: "bad", Parts: [][]byte{nil}}, {Key: "good", Parts: [][]byte{head}}}
	dev := [][]DevicePart{{{Index: 0, Ptr: gone, Size: 4096, Device: 0}}, nil}
	codes := reader.Writes().PutBatchDevice(items, dev, wire.ReplicaConfig{ReplicaNum: 1}, false)
	if codes[0] != wire.ErrTransferFail || codes[1] != wire.OK {
		t.Fatalf("codes: %v", codes)
	}
	if n := reader.Keys().GetSize("bad"); n != int64(wire.ErrObjectNotFound) {
		t.Fatalf("a failed device put left an object: %d", n)
	}
}
