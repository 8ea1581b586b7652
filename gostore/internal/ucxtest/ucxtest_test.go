package ucxtest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gostore/gostore/gostore/ucx"
)

// A run that expects PyPI's 1.22 refuses Debian's 1.13, another file of the
// right version, and no UCX at all; the expected one (named through a
// symlink, as libucp.so.0 is) passes.
func TestCheck(t *testing.T) {
	dir := t.TempDir()
	wheel := filepath.Join(dir, "libucp.so.0.0.0")
	other := filepath.Join(dir, "other.so")
	for _, p := range []string{wheel, other} {
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	link := filepath.Join(dir, "libucp.so.0")
	if err := os.Symlink(wheel, link); err != nil {
		t.Fatal(err)
	}
	loaded := func(version, library string) ucx.Info { return ucx.Info{Version: version, Library: library} }
	for _, c := range []struct {
		name    string
		info    ucx.Info
		version string
		library string
		err     string // "" for none
	}{
		{"the expected one", loaded("1.22.0", wheel), "1.22.0", link, ""},
		{"the system's 1.13", loaded("1.13.1", "/usr/lib/x86_64-linux-gnu/libucp.so.0.0.0"), "1.22.0", link, "loaded 1.13.1"},
		{"another file of 1.22", loaded("1.22.0", other), "1.22.0", link, "expected UCX from " + link},
		{"version only", loaded("1.13.1", other), "1.22.0", "", "expected UCX 1.22.0, loaded 1.13.1"},
		{"none loaded", ucx.Info{Reason: "cannot load UCX library"}, "1.22.0", link, "none was loaded"},
	} {
		err := Check(c.info, c.version, c.library)
		if (err == nil) != (c.err == "") || (err != nil && !strings.Contains(err.Error(), c.err)) {
			t.Errorf("%s: Check = %v; want an error with %q", c.name, err, c.err)
		}
	}
}
