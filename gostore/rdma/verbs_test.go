package rdma

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// No RDMA NIC exists here; where libibverbs is installed it still sees no
// device. Either way the probe says why, never fails.
func TestNoVerbs(t *testing.T) {
	if os.Getenv(EnvLibrary) != "" {
		t.Skip("child")
	}
	info := Probe()
	if info.Available {
		t.Skipf("an RDMA device is present: %v", info.Devices)
	}
	if info.Reason == "" || len(info.Devices) != 0 {
		t.Fatalf("info without RDMA: %+v", info)
	}
	t.Log(info.Reason)
}

// TestFakeVerbs runs the probe against testdata/fakeverbs.c, a FAKE verbs
// library, in children (Probe runs once per process).
func TestFakeVerbs(t *testing.T) {
	if os.Getenv(EnvLibrary) != "" {
		t.Skip("child")
	}
	lib := filepath.Join(t.TempDir(), "libibverbs-fake.so")
	if out, err := exec.Command("gcc", "-shared", "-fPIC", "-o", lib, "testdata/fakeverbs.c").CombinedOutput(); err != nil {
		t.Skipf("cannot build the fake verbs library: %v\n%s", err, out)
	}
	for _, tc := range []struct{ devices, want string }{
		{"", "mlx5_0,mlx5_1"}, {"irdma0", "irdma0"}, {",", ""},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestFakeVerbsChild$", "-test.v")
		cmd.Env = append(os.Environ(), EnvLibrary+"="+lib, "WANT_DEVICES="+tc.want)
		if tc.devices != "" {
			cmd.Env = append(cmd.Env, "FAKE_VERBS_DEVICES="+tc.devices)
		}
		if out, err := cmd.CombinedOutput(); err != nil || !bytes.Contains(out, []byte("--- PASS: TestFakeVerbsChild")) {
			t.Fatalf("devices %q: %v\n%s", tc.devices, err, out)
		}
	}
	// A library without the verbs entry points is refused with the name.
	cmd := exec.Command(os.Args[0], "-test.run=^TestFakeVerbsChild$", "-test.v")
	cmd.Env = append(os.Environ(), EnvLibrary+"=libc.so.6", "WANT_REASON=missing symbol ibv_get_device_list")
	if out, err := cmd.CombinedOutput(); err != nil || !bytes.Contains(out, []byte("--- PASS")) {
		t.Fatalf("libc as verbs: %v\n%s", err, out)
	}
}

func TestFakeVerbsChild(t *testing.T) {
	if os.Getenv(EnvLibrary) == "" {
		t.Skip("run by TestFakeVerbs")
	}
	info := Probe()
	if want := os.Getenv("WANT_REASON"); want != "" {
		if info.Available || !strings.Contains(info.Reason, want) {
			t.Fatalf("info: %+v", info)
		}
		return
	}
	want := []string{}
	if w := os.Getenv("WANT_DEVICES"); w != "" {
		want = strings.Split(w, ",")
	}
	if !reflect.DeepEqual(info.Devices, want) || info.Available != (len(want) > 0) {
		t.Fatalf("devices %v (available %v), want %v; reason %q", info.Devices, info.Available, want, info.Reason)
	}
}
