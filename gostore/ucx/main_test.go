// main_test.go is the edge of the test binary: a child that a test starts
// learns its library from the environment the parent gave it and passes it
// to Configure, as the bindings do; the package itself reads no
// environment.

package ucx

import (
	"fmt"
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	if lib := os.Getenv(EnvLibrary); lib != "" {
		if err := Configure(Options{Library: lib}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	}
	os.Exit(m.Run())
}
