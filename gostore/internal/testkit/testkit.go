// testkit.go defines StartMaster, Pattern, WaitFor and Samples.

package testkit

import (
	"bufio"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/gostore/gostore/gostore/internal/testbase"
	"github.com/gostore/gostore/gostore/master/server"
)

// StartMaster runs a real master server on loopback for the test (no
// HTTP), with extra flags; it stops when the test ends.
func StartMaster(t testing.TB, extra ...string) *server.Server {
	t.Helper()
	opts, err := server.ParseFlags(append([]string{"--rpc_address=127.0.0.1", "--rpc_port=0", "--metrics_port=-1"}, extra...), nil)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return srv
}

// Pattern returns n pseudo-random bytes determined by seed.
func Pattern(seed uint64, n int) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// WaitFor is testbase.WaitFor, for the tests that import testkit anyway.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testbase.WaitFor(t, what, cond)
}

// Samples reads a Prometheus text exposition into "name{labels}" -> value
// (labels as the format writes them), failing the test on a sample that
// does not parse.
func Samples(t testing.TB, text io.Reader) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	sc := bufio.NewScanner(text)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("unparsable sample %q", line)
		}
		out[line[:i]] = v
	}
	return out
}
