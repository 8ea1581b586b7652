package ucx

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Probe names the library it loaded, its version, the components UCX was
// built with and the resources a default context opens; a context's Info
// lists only what its options let it open.
func TestProbeInfo(t *testing.T) {
	needUCX(t)
	info := Probe()
	t.Logf("%+v", info)
	if !filepath.IsAbs(info.Library) {
		t.Errorf("Library %q is not a resolved path", info.Library)
	} else if _, err := os.Stat(info.Library); err != nil {
		t.Errorf("Library: %v", err)
	}
	if !strings.HasPrefix(info.Version, "1.") || strings.Count(info.Version, ".") != 2 {
		t.Errorf("Version %q", info.Version)
	}
	if !slices.Contains(info.Components, "tcp") || !slices.Contains(info.Resources, "tcp/lo") {
		t.Errorf("no tcp in %v / %v", info.Components, info.Resources)
	}
	c, err := NewContext(ContextOptions{Transports: "tcp", Devices: []string{"lo"}, Rails: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := c.Info().Resources; !slices.Equal(got, []string{"tcp/lo"}) {
		t.Errorf("context of tcp on lo opened %v", got)
	}
}

// The parser reads UCX's component and resource lines, and derives Verbs
// and CUDA (which this machine cannot show: the text is what a host with a
// ConnectX NIC and CUDA prints).
func TestParseContextInfo(t *testing.T) {
	text := `#
# UCP context
#
#     component 0  :  self
#     component 1  :  tcp
#     component 2  :  ib
#     component 3  :  cuda_cpy
#
#            md 0  :  component 0  self
#
#      resource 0  :  md 0  dev 0  flags -- self/memory0
#      resource 1  :  md 1  dev 1  flags -- tcp/eth0
#      resource 2  :  md 2  dev 2  flags -- rc_mlx5/mlx5_0:1
#      resource 3  :  md 3  dev 3  flags -- cuda_copy/cuda
#
`
	comps, res := parseContextInfo(text)
	in := Info{Components: comps, Resources: res}
	in.fill()
	if !slices.Equal(comps, []string{"self", "tcp", "ib", "cuda_cpy"}) ||
		!slices.Equal(res, []string{"self/memory0", "tcp/eth0", "rc_mlx5/mlx5_0:1", "cuda_copy/cuda"}) ||
		!in.Verbs || !in.CUDA || !in.Available {
		t.Fatalf("parsed %+v", in)
	}
	none := Info{}
	none.fill()
	if none.Available || none.Verbs || none.CUDA || none.Reason == "" {
		t.Fatalf("empty text: %+v", none)
	}
}

// Limits names the reader-death abort where the context has tcp (UCX's
// software RMA there has the owner answer gets from its handler), and
// nothing for shared memory or verbs alone.
func TestInfoLimits(t *testing.T) {
	for _, tc := range []struct {
		resources []string
		want      []string
	}{
		{[]string{"self/memory0", "tcp/lo", "tcp/eth0"}, []string{LimitReaderDeath}},
		{[]string{"self/memory0", "tcp/eth0", "rc_mlx5/mlx5_0:1"}, []string{LimitReaderDeath}},
		{[]string{"self/memory0", "posix/memory", "sysv/memory", "cma/memory"}, []string{}},
		{[]string{"rc_mlx5/mlx5_0:1", "ud_verbs/mlx5_0:1"}, []string{}},
	} {
		in := Info{Resources: tc.resources}
		in.fill()
		if !slices.Equal(in.Limits, tc.want) {
			t.Errorf("%v: limits %q, want %q", tc.resources, in.Limits, tc.want)
		}
	}
}

// A library that cannot be loaded (run in a child: loading is once per
// process): Probe says so and names the path, NewContext refuses.
func TestLibraryMissing(t *testing.T) {
	for name, lib := range map[string]string{
		"missing":    "/nonexistent/libucp.so",
		"not libucp": "libc.so.6",
	} {
		t.Run(name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestLibraryChild$", "-test.count=1")
			cmd.Env = append(os.Environ(), EnvLibrary+"="+lib, envLibChild+"=1")
			cmd.Stderr = os.Stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("child: %v\n%s", err, out)
			}
			line, _, _ := strings.Cut(string(out), "\n")
			var info Info
			if err := json.Unmarshal([]byte(line), &info); err != nil {
				t.Fatalf("child printed %q: %v", out, err)
			}
			t.Logf("%s", line)
			if info.Available || !strings.Contains(info.Reason, lib) {
				t.Fatalf("Probe with %s: %+v", lib, info)
			}
			if name == "not libucp" && !strings.Contains(info.Reason, "missing symbol") {
				t.Fatalf("Reason does not name the missing symbol: %q", info.Reason)
			}
		})
	}
}

const envLibChild = "GOSTORE_UCX_TEST_LIBRARY_CHILD"

func TestLibraryChild(t *testing.T) {
	if os.Getenv(envLibChild) == "" {
		t.Skip("the child of TestLibraryMissing")
	}
	b, _ := json.Marshal(Probe())
	os.Stdout.Write(append(b, '\n'))
	if _, err := NewContext(ContextOptions{}); err == nil {
		t.Fatal("NewContext without a library succeeded")
	}
}

// A context that can open no transport is refused, naming what was asked.
func TestContextNoTransport(t *testing.T) {
	needUCX(t)
	_, err := NewContext(ContextOptions{Transports: "tcp", Devices: []string{"nosuchdev0"}})
	if err == nil || !strings.Contains(err.Error(), "nosuchdev0") {
		t.Fatalf("NewContext on a device that does not exist: %v", err)
	}
	t.Log(err)
}
