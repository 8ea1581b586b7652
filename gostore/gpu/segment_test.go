package gpu

import (
	"bytes"
	"encoding/hex"
	"math/rand"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
)

// exerciseSegments drives Segment and Pinned against whatever driver this
// process loaded: the FAKE one (TestFakeDriver) or a real GPU.
func exerciseSegments(t *testing.T, size uint64) {
	t.Helper()
	// The calling thread's context survives every call (a Python thread's
	// torch device must not change under it).
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	before := currentContext()
	defer func() {
		if after := currentContext(); after != before {
			t.Errorf("the thread's current context changed from %#x to %#x", before, after)
		}
	}()
	a, err := NewSegment(0, size)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := NewSegment(0, size)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if k, d := PointerKind(a.Base()); k != DeviceMem || d != 0 {
		t.Fatalf("segment memory is %v on %d", k, d)
	}
	if base, n, ok := AllocationRange(a.Base() + 10); !ok || base != a.Base() || n < size {
		t.Fatalf("allocation of an inner pointer: %#x %d %v (segment %#x)", base, n, ok, a.Base())
	}
	src := make([]byte, size)
	rand.New(rand.NewSource(1)).Read(src)
	if err := a.CopyFrom(0, src); err != nil {
		t.Fatal(err)
	}
	// device to device, then back through pinned memory
	half := size / 2
	if err := b.CopyFromDevice(0, a.Base()+half, half); err != nil {
		t.Fatal(err)
	}
	if err := a.CopyToDevice(b.Base()+half, 0, half); err != nil {
		t.Fatal(err)
	}
	pin, err := NewPinned(size)
	if err != nil {
		t.Fatal(err)
	}
	defer pin.Close()
	if k, _ := PointerKind(hostAddr(pin.Bytes())); k != Host {
		t.Fatalf("pinned memory is %v", k)
	}
	if err := b.CopyTo(pin.Bytes(), 0); err != nil {
		t.Fatal(err)
	}
	want := append(append([]byte{}, src[half:]...), src[:half]...)
	if !bytes.Equal(pin.Bytes(), want) {
		t.Fatal("bytes changed on their way through two segments")
	}
	if err := a.CopyFrom(size-10, make([]byte, 11)); err == nil {
		t.Fatal("a copy past the segment's end was accepted")
	}
	if err := a.CopyTo(make([]byte, 4), size); err == nil {
		t.Fatal("a read past the segment's end was accepted")
	}
}

func TestFakeDriverSegmentsChild(t *testing.T) {
	if !strings.Contains(os.Getenv(EnvLibrary), "fake") {
		t.Skip("run by TestFakeDriverSegments")
	}
	exerciseSegments(t, 1<<16)
}

func TestFakeDriverSegments(t *testing.T) {
	if os.Getenv(EnvLibrary) != "" {
		t.Skip("child")
	}
	runChild(t, "TestFakeDriverSegmentsChild", buildFake(t))
}

// realGPU skips unless a real driver with a device is present.
func realGPU(t *testing.T) {
	t.Helper()
	if os.Getenv(EnvLibrary) != "" {
		t.Skip("a fake driver is loaded")
	}
	if info := Probe(); !info.Available {
		t.Skipf("no GPU: %s", info.Reason)
	}
}

func TestRealSegments(t *testing.T) {
	realGPU(t)
	exerciseSegments(t, 64<<20)
}

const envIPC = "GOSTORE_TEST_IPC_HANDLE"

// Another process maps the segment through its IPC handle, reads what the
// owner wrote and writes an answer the owner reads.
func TestRealIPCAcrossProcesses(t *testing.T) {
	realGPU(t)
	if os.Getenv(envIPC) != "" {
		t.Skip("child")
	}
	const size = 8 << 20
	seg, err := NewSegment(0, size)
	if err != nil {
		t.Fatal(err)
	}
	defer seg.Close()
	if err := seg.CopyFrom(0, bytes.Repeat([]byte("owner wrote this"), size/16)); err != nil {
		t.Fatal(err)
	}
	h, err := seg.Handle()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestRealIPCChild$", "-test.v")
	cmd.Env = append(os.Environ(), envIPC+"="+hex.EncodeToString(h[:]))
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("--- PASS: TestRealIPCChild")) {
		t.Fatalf("child: %v\n%s", err, out)
	}
	got := make([]byte, size/2)
	if err := seg.CopyTo(got, size/2); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, bytes.Repeat([]byte("peer answered!!!"), size/32)) {
		t.Fatal("the peer's write through its IPC mapping is not in the segment")
	}
}

func TestRealIPCChild(t *testing.T) {
	hexH := os.Getenv(envIPC)
	if hexH == "" {
		t.Skip("run by TestRealIPCAcrossProcesses")
	}
	realGPU(t)
	var h IPCHandle
	raw, err := hex.DecodeString(hexH)
	if err != nil || len(raw) != len(h) {
		t.Fatalf("handle %q: %v", hexH, err)
	}
	copy(h[:], raw)
	const size = 8 << 20
	seg, err := OpenSegment(0, h, size)
	if err != nil {
		t.Fatal(err)
	}
	defer seg.Close()
	got := make([]byte, size/2)
	if err := seg.CopyTo(got, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, bytes.Repeat([]byte("owner wrote this"), size/32)) {
		t.Fatal("the owner's bytes are not what the IPC mapping shows")
	}
	if err := seg.CopyFrom(size/2, bytes.Repeat([]byte("peer answered!!!"), size/32)); err != nil {
		t.Fatal(err)
	}
}
