package memlimit

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gostore/gostore/gostore/wire"
)

// fakeRoot writes a fake proc/ and sys/ tree (files path -> content) under a
// temporary directory: the cgroup hierarchies this sandbox lacks, and
// meminfo figures that do not depend on the host.
func fakeRoot(t *testing.T, files map[string]string) Probe {
	t.Helper()
	root := t.TempDir()
	for p, c := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return Probe{Root: root}
}

const gib = 1 << 30

func meminfo(availKB string) string {
	return "MemTotal:       24684092 kB\nMemFree:         1000000 kB\nMemAvailable:   " + availKB + " kB\n" +
		"CommitLimit:    12342044 kB\nCommitted_AS:     453296 kB\n"
}

// A cgroup v2 service whose parent slice has 1.5 GiB with 0.25 GiB used:
// the parent's limit is the tightest, though the process's own cgroup has
// none ("max"), and a 2 GiB segment is refused naming it; 1 GiB fits.
func TestFakeCgroupV2Ancestor(t *testing.T) {
	p := fakeRoot(t, map[string]string{
		"proc/meminfo":                                           meminfo("20971520"), // 20 GiB
		"proc/self/cgroup":                                       "0::/app.slice/gostore.service\n",
		"proc/self/mountinfo":                                    "29 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n",
		"sys/fs/cgroup/memory.current":                           "5000000000\n", // the root has no memory.max
		"sys/fs/cgroup/app.slice/memory.max":                     "1610612736\n",
		"sys/fs/cgroup/app.slice/memory.current":                 "268435456\n",
		"sys/fs/cgroup/app.slice/gostore.service/memory.max":     "max\n",
		"sys/fs/cgroup/app.slice/gostore.service/memory.current": "1000\n",
	})
	b, ok := p.Tightest()
	if !ok || b.Free != 1610612736-268435456 || !strings.Contains(b.What, "/app.slice (v2: memory.max 1.5 GiB") {
		t.Fatalf("tightest: %+v, %v", b, ok)
	}
	err := p.Check(Ask{"global_segment_size", 2 * gib}, Ask{"local_buffer_size", 16 << 20})
	if wire.CodeOf(err) != wire.ErrInvalidParams {
		t.Fatalf("2 GiB in 1.5 GiB: %v", err)
	}
	for _, want := range []string{"global_segment_size 2 GiB", "local_buffer_size 16 MiB", "1.25 GiB (1342177280 bytes) free", "memory cgroup /app.slice"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q lacks %q", err, want)
		}
	}
	if err := p.Check(Ask{"global_segment_size", gib}); err != nil {
		t.Fatalf("1 GiB: %v", err)
	}
}

// cgroup v1 in a hybrid layout, as this sandbox's host has it: the memory
// hierarchy at /sys/fs/cgroup/memory, v2 mounted without the controller.
// The process's own cgroup's limit counts; usage above the limit leaves 0.
func TestFakeCgroupV1(t *testing.T) {
	p := fakeRoot(t, map[string]string{
		"proc/meminfo":     meminfo("20971520"),
		"proc/self/cgroup": "4:memory:/jobs/j1\n3:cpu,cpuacct:/\n0::/\n",
		"proc/self/mountinfo": "31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n" +
			"35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n" +
			"33 31 0:30 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n" +
			"41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n",
		"sys/fs/cgroup/memory/memory.limit_in_bytes":         "9223372036854771712\n",
		"sys/fs/cgroup/memory/memory.usage_in_bytes":         "900000000\n",
		"sys/fs/cgroup/memory/jobs/j1/memory.limit_in_bytes": "1610612736\n",
		"sys/fs/cgroup/memory/jobs/j1/memory.usage_in_bytes": "536870912\n",
		"sys/fs/cgroup/unified/cgroup.procs":                 "",
	})
	err := p.Check(Ask{"global_segment_size", 2 * gib})
	if wire.CodeOf(err) != wire.ErrInvalidParams || !strings.Contains(err.Error(),
		"1 GiB (1073741824 bytes) free under the memory cgroup /jobs/j1 (v1: memory.limit_in_bytes 1.5 GiB less memory.usage_in_bytes 512 MiB)") {
		t.Fatalf("v1: %v", err)
	}
	over := fakeRoot(t, map[string]string{
		"proc/meminfo":     meminfo("20971520"),
		"proc/self/cgroup": "4:memory:/\n",
		"sys/fs/cgroup/memory/memory.limit_in_bytes": "1000\n", // no mountinfo: the usual place
		"sys/fs/cgroup/memory/memory.usage_in_bytes": "2000\n",
	})
	if b, _ := over.Tightest(); b.Free != 0 {
		t.Fatalf("usage above the limit: %+v", b)
	}
}

// In a container whose cgroup mount shows only its own subtree (the mount's
// root is the container's cgroup), the path in /proc/self/cgroup is read
// relative to that root.
func TestFakeCgroupMountRoot(t *testing.T) {
	p := fakeRoot(t, map[string]string{
		"proc/meminfo":                    meminfo("20971520"),
		"proc/self/cgroup":                "0::/kubepods/pod1/c1\n",
		"proc/self/mountinfo":             "29 23 0:26 /kubepods/pod1 /sys/fs/cgroup ro - cgroup2 cgroup2 rw\n",
		"sys/fs/cgroup/memory.max":        "2147483648\n",
		"sys/fs/cgroup/memory.current":    "0\n",
		"sys/fs/cgroup/c1/memory.max":     "max\n",
		"sys/fs/cgroup/c1/memory.current": "0\n",
	})
	b, ok := p.Tightest()
	if !ok || b.Free != 2*gib || !strings.Contains(b.What, "/kubepods/pod1 (v2") {
		t.Fatalf("%+v %v", b, ok)
	}
}

// MemAvailable and, with strict overcommit, the commit limit bound too;
// without any readable bound nothing is refused; sizes that overflow
// together are refused, not wrapped.
func TestFakeHostBounds(t *testing.T) {
	p := fakeRoot(t, map[string]string{"proc/meminfo": meminfo("1048576")}) // 1 GiB
	if err := p.Check(Ask{"local_buffer_size", 1 << 50}); wire.CodeOf(err) != wire.ErrInvalidParams ||
		!strings.Contains(err.Error(), "local_buffer_size 1 PiB (1125899906842624 bytes) asked") ||
		!strings.Contains(err.Error(), "1 GiB (1073741824 bytes) free under the host's MemAvailable") {
		t.Fatalf("1 PiB: %v", err)
	}
	if err := p.Check(Ask{"a", ^uint64(0)}, Ask{"b", ^uint64(0)}); wire.CodeOf(err) != wire.ErrInvalidParams {
		t.Fatalf("overflow: %v", err)
	}
	if err := p.Check(Ask{"a", 0}); err != nil {
		t.Fatalf("nothing asked: %v", err)
	}
	strict := fakeRoot(t, map[string]string{"proc/meminfo": meminfo("20971520"), "proc/sys/vm/overcommit_memory": "2\n"})
	if b, _ := strict.Tightest(); !strings.Contains(b.What, "vm.overcommit_memory=2") || b.Free != (12342044-453296)<<10 {
		t.Fatalf("strict overcommit: %+v", b)
	}
	if err := (Probe{Root: t.TempDir()}).Check(Ask{"a", 1 << 60}); err != nil {
		t.Fatalf("no bound readable: %v", err)
	}
}

// The real host: MemAvailable is read, and more than it is refused.
func TestRealHost(t *testing.T) {
	b, ok := Probe{}.Tightest()
	if !ok {
		t.Fatal("no bound readable on this host")
	}
	if err := Check(Ask{"global_segment_size", b.Free + gib}); wire.CodeOf(err) != wire.ErrInvalidParams {
		t.Fatalf("%v", err)
	}
}

func TestSize(t *testing.T) {
	for n, want := range map[uint64]string{0: "0 B", 1023: "1023 B", 1024: "1 KiB", 1536 << 20: "1.5 GiB", 1 << 50: "1 PiB", 64<<30 + 16<<20: "64.02 GiB"} {
		if got := Size(n); got != want {
			t.Errorf("Size(%d) = %q, want %q", n, got, want)
		}
	}
}
