// main_test.go is the edge of the test binary: a child that
// TestDevicePartsFakeDriver starts learns its CUDA driver from the
// environment the parent gave it and passes it to gpu.Configure, as the
// bindings do. Its UCX, likewise, through ucxtest.Main.

package client

import (
	"fmt"
	"os"
	"testing"

	"github.com/gostore/gostore/gostore/gpu"
	"github.com/gostore/gostore/gostore/internal/ucxtest"
)

func TestMain(m *testing.M) {
	if lib := os.Getenv(gpu.EnvLibrary); lib != "" {
		if err := gpu.Configure(gpu.Options{Library: lib}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	}
	os.Exit(ucxtest.Main(m)) // GOSTORE_LIBUCX, and the UCX a run expects
}
