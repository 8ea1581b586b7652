// Package testkit holds what the tests of several packages share: a real
// master on loopback, deterministic byte patterns, waiting for a
// condition, and reading Prometheus samples. Only _test files import it; it imports no client code, so
// the client's own (internal) tests can use it too.
package testkit
