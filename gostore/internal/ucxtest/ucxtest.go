package ucxtest

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/gostore/gostore/gostore/ucx"
)

// The variables naming the UCX a run expects ("" each: any).
const (
	EnvVersion = "GOSTORE_TEST_UCX_VERSION" // "1.22.0"
	EnvLibrary = "GOSTORE_TEST_UCX_LIBRARY" // a path of the libucp.so.0 file
)

// Main configures UCX from the environment, checks it against the
// expectation and runs the tests: TestMain's os.Exit(ucxtest.Main(m)).
func Main(m *testing.M) int {
	if lib := os.Getenv(ucx.EnvLibrary); lib != "" {
		if err := ucx.Configure(ucx.Options{Library: lib}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
	}
	version, library := os.Getenv(EnvVersion), os.Getenv(EnvLibrary)
	if version != "" || library != "" {
		// Only then: Probe opens the library and a throwaway context.
		if err := Check(ucx.Probe(), version, library); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		// Checked once, here: the children a test starts inherit
		// GOSTORE_LIBUCX, hence this library, unless the test names
		// another on purpose (TestLibraryMissing's), which the
		// expectation must not refuse.
		os.Unsetenv(EnvVersion)
		os.Unsetenv(EnvLibrary)
	}
	return m.Run()
}

// Check says how info (what was loaded) differs from the expected version
// and library file ("": any); nil when it does not.
func Check(info ucx.Info, version, library string) error {
	if info.Library == "" {
		return fmt.Errorf("ucxtest: expected UCX %s (%s), but none was loaded: %s", version, library, info.Reason)
	}
	if version != "" && info.Version != version {
		return fmt.Errorf("ucxtest: expected UCX %s, loaded %s from %s", version, info.Version, info.Library)
	}
	if library != "" && !sameFile(info.Library, library) {
		return fmt.Errorf("ucxtest: expected UCX from %s, loaded %s from %s", library, info.Version, info.Library)
	}
	return nil
}

func sameFile(a, b string) bool {
	fa, errA := os.Stat(a)
	fb, errB := os.Stat(b)
	if errA != nil || errB != nil {
		return filepath.Clean(a) == filepath.Clean(b)
	}
	return os.SameFile(fa, fb)
}
