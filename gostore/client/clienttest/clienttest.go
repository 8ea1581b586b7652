// Package clienttest makes real clients for the tests of the packages
// above the client (gostore/ssdtier, gostore/planclient): Config's edge
// settings, which the bindings would read from the environment, come from
// one place per test binary. Only _test files import it.
package clienttest

import (
	"testing"

	"github.com/gostore/gostore/gostore/client"
)

// edgeConfig holds the edge settings every client a test makes gets.
var edgeConfig client.Config

// ForceTCP makes the test's clients reach each other over TCP only, for
// the rest of t.
func ForceTCP(t *testing.T) {
	saved := edgeConfig
	edgeConfig.ForceTCP = true
	t.Cleanup(func() { edgeConfig = saved })
}

// Edge fills cfg's edge settings (a PingInterval cfg sets stays).
func Edge(cfg client.Config) client.Config {
	cfg.ForceTCP = cfg.ForceTCP || edgeConfig.ForceTCP
	if cfg.PingInterval == 0 {
		cfg.PingInterval = edgeConfig.PingInterval
	}
	cfg.GPUBounceBytes = edgeConfig.GPUBounceBytes
	return cfg
}

// New makes a client of master contributing segment bytes (0: a pure
// consumer), closed when the test ends.
func New(t testing.TB, master string, segment uint64) *client.Client {
	t.Helper()
	return NewWith(t, client.Config{LocalHostname: "127.0.0.1", MasterServerAddr: master,
		GlobalSegmentSize: segment, LocalBufferSize: 1 << 20})
}

// NewWith is New for a Config of the test's own.
func NewWith(t testing.TB, cfg client.Config) *client.Client {
	t.Helper()
	c, err := client.New(Edge(cfg), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
