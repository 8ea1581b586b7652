// helpers_test.go runs a master and clients for the tests, as
// gostore/client's tests do (the same helpers, for this package's tests).

package ssdtier_test

import (
	"math/rand/v2"
	"testing"

	"github.com/gostore/gostore/gostore/client"
	"github.com/gostore/gostore/gostore/master/server"
)

// startMaster runs a real master server on loopback for the test.
func startMaster(t testing.TB, extra ...string) *server.Server {
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

// testConfig holds what the bindings would read from the environment,
// for every client a test makes.
var testConfig client.Config

// withConfig sets testConfig's edge settings for the rest of t.
func withConfig(t *testing.T, set func(*client.Config)) {
	saved := testConfig
	set(&testConfig)
	t.Cleanup(func() { testConfig = saved })
}

// forceTCP makes the test's clients reach each other over TCP only.
func forceTCP(t *testing.T) { withConfig(t, func(c *client.Config) { c.ForceTCP = true }) }

// edge fills cfg's edge settings from testConfig.
func edge(cfg client.Config) client.Config {
	cfg.ForceTCP = cfg.ForceTCP || testConfig.ForceTCP
	cfg.PingInterval, cfg.GPUBounceBytes = testConfig.PingInterval, testConfig.GPUBounceBytes
	return cfg
}

func newClient(t *testing.T, master string, segment uint64) *client.Client {
	t.Helper()
	c, err := client.New(edge(client.Config{LocalHostname: "127.0.0.1", MasterServerAddr: master,
		GlobalSegmentSize: segment, LocalBufferSize: 1 << 20}), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func pattern(seed uint64, n int) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}
