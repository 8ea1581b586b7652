// main_test.go is the edge of the test binary: the UCX route's tests (and
// the children they start) open the libucp that GOSTORE_LIBUCX names, as
// the bindings do, and the binary fails when a run expects another UCX
// (ucxtest.Main).

package transfer

import (
	"os"
	"testing"

	"github.com/gostore/gostore/gostore/internal/ucxtest"
)

func TestMain(m *testing.M) { os.Exit(ucxtest.Main(m)) }
