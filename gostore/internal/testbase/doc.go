// doc.go defines the package documentation of testbase.

// Package testbase holds what the tests of every package may share, the
// lowest ones (rpc, wire, storage) included: it imports nothing of
// gostore. A log buffer that server goroutines write while the test reads
// it, and waiting for a condition no event announces. testkit, which
// starts real masters, builds on it. Only _test files import it.
package testbase
