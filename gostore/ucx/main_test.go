// main_test.go is the edge of the test binary: a child that a test starts
// learns its library from the environment the parent gave it and passes it
// to Configure, as the bindings do (ucxtest.Main, which also fails the
// binary when a run expects another UCX); the package itself reads no
// environment.

package ucx_test

import (
	"os"
	"testing"

	"github.com/gostore/gostore/gostore/internal/ucxtest"
)

func TestMain(m *testing.M) { os.Exit(ucxtest.Main(m)) }
