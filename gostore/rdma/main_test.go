// main_test.go is the edge of the test binary: a child that TestFakeVerbs
// starts learns its library from the environment the parent gave it and
// passes it to Configure, as the bindings do; the package itself reads no
// environment.

package rdma

import (
	"errors"
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

// Once the library is open, Configure changes nothing.
func TestConfigureAfterOpen(t *testing.T) {
	before := Probe()
	if err := Configure(Options{Library: "libibverbs-that-does-not-exist.so"}); !errors.Is(err, ErrOpened) {
		t.Fatalf("Configure after Probe: %v", err)
	}
	if after := Probe(); after.Available != before.Available || after.Reason != before.Reason {
		t.Fatalf("Probe changed after a late Configure: %+v, then %+v", before, after)
	}
}
