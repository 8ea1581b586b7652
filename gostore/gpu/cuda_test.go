package gpu

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"
)

// This machine has no GPU and no CUDA driver: the real library is absent.
func TestNoDriver(t *testing.T) {
	if os.Getenv(EnvLibrary) != "" {
		t.Skip("run by TestFakeDriver as a child")
	}
	info := Probe()
	if info.Available {
		t.Skipf("a CUDA driver is present (%+v): run tests/gpu on this machine", info)
	}
	if !strings.Contains(info.Reason, "no CUDA driver") || len(info.Devices) != 0 {
		t.Fatalf("info without a driver: %+v", info)
	}
	if _, err := Alloc(0, 1<<20); !errors.Is(err, ErrNoGPU) {
		t.Fatalf("Alloc without a driver: %v", err)
	}
	var x [8]byte
	if k, d := PointerKind(uint64(uintptr(unsafe.Pointer(&x[0])))); k != Unknown || d != -1 {
		t.Fatalf("pointer kind without a driver: %v %d", k, d)
	}
	for _, err := range []error{Pin(1, 1), Unpin(1), CopyToDevice(0, 1, 1, 1), CopyToHost(0, 1, 1, 1), Free(0, 1)} {
		if !errors.Is(err, ErrNoGPU) {
			t.Fatalf("a call without a driver: %v", err)
		}
	}
}

// buildFake compiles testdata/fakecuda.c (a FAKE driver: there is no GPU
// here) into a shared library.
func buildFake(t *testing.T, flags ...string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "libcuda-fake.so")
	args := append([]string{"-shared", "-fPIC", "-o", out, "testdata/fakecuda.c"}, flags...)
	if b, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
		t.Skipf("cannot build the fake driver: %v\n%s", err, b)
	}
	return out
}

// runChild runs the named test in a child process with the fake driver
// (Probe runs once per process).
func runChild(t *testing.T, name, lib string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+name+"$", "-test.v")
	cmd.Env = append(os.Environ(), EnvLibrary+"="+lib)
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("--- PASS: "+name)) {
		t.Fatalf("%s with the fake driver: %v\n%s", name, err, out)
	}
}

func TestFakeDriver(t *testing.T) {
	if os.Getenv(EnvLibrary) != "" {
		t.Skip("child")
	}
	runChild(t, "TestFakeDriverChild", buildFake(t))
	runChild(t, "TestUnversionedDriverChild", buildFake(t, "-DOLD_NAMES"))
}

// TestFakeDriverChild drives every entry point through the fake driver:
// the loader binds the versioned names, and the store's uses of them work.
func TestFakeDriverChild(t *testing.T) {
	if !strings.Contains(os.Getenv(EnvLibrary), "fake") {
		t.Skip("run by TestFakeDriver")
	}
	info := Probe()
	if !info.Available || info.Driver != 12040 || len(info.Devices) != 2 {
		t.Fatalf("info: %+v", info)
	}
	if d := info.Devices[1]; d.Name != "Fake GPU 1" || d.Memory != 16<<30 || d.PCI != "0000:3c:00.0" || d.Compute != "9.0" {
		t.Fatalf("device 1: %+v", d)
	}
	ptr, err := Alloc(1, 4096)
	if err != nil {
		t.Fatal(err)
	}
	if k, dev := PointerKind(ptr); k != DeviceMem || dev != 1 {
		t.Fatalf("device pointer: %v on %d", k, dev)
	}
	src := bytes.Repeat([]byte("gpu!"), 1024)
	dst := make([]byte, len(src))
	if err := CopyToDevice(1, ptr, uint64(uintptr(unsafe.Pointer(&src[0]))), 4096); err != nil {
		t.Fatal(err)
	}
	if err := CopyToHost(1, uint64(uintptr(unsafe.Pointer(&dst[0]))), ptr, 4096); err != nil || !bytes.Equal(dst, src) {
		t.Fatalf("round trip through device memory: %v", err)
	}
	if err := CopyToHost(1, uint64(uintptr(unsafe.Pointer(&dst[0]))), ptr, 8192); err == nil {
		t.Fatal("a copy past the allocation succeeded")
	} else if e := (*Error)(nil); !errors.As(err, &e) || e.Code != 1 || !strings.Contains(e.Msg, "INVALID_VALUE") {
		t.Fatalf("driver error: %v", err)
	}
	h, err := ExportIPC(1, ptr)
	if err != nil {
		t.Fatal(err)
	}
	mapped, err := OpenIPC(1, h)
	if err != nil || mapped != ptr || CloseIPC(1, mapped) != nil {
		t.Fatalf("IPC: %x %v", mapped, err)
	}
	host := make([]byte, 8192)
	hp := uint64(uintptr(unsafe.Pointer(&host[0])))
	if err := Pin(hp, 8192); err != nil {
		t.Fatal(err)
	}
	if k, _ := PointerKind(hp); k != Host {
		t.Fatalf("pinned host memory: %v", k)
	}
	if err := Unpin(hp); err != nil {
		t.Fatal(err)
	}
	if k, _ := PointerKind(hp); k != Unknown {
		t.Fatalf("unpinned host memory: %v", k)
	}
	if err := Free(1, ptr); err != nil {
		t.Fatal(err)
	}
	if _, err := Alloc(7, 10); err == nil {
		t.Fatal("an allocation on a device that does not exist")
	}
}

// A driver without the versioned ABI is refused with the name it lacks,
// never half-bound.
func TestUnversionedDriverChild(t *testing.T) {
	if !strings.Contains(os.Getenv(EnvLibrary), "fake") {
		t.Skip("run by TestFakeDriver")
	}
	if r := Probe().Reason; Probe().Available || !strings.Contains(r, "missing symbol cuDeviceTotalMem_v2") {
		t.Fatalf("reason: %q", r)
	}
}
