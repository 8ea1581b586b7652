// Package wiretest holds wire formats as earlier versions of gostore wrote
// them, for tests that prove today's decoders still read them (journals,
// snapshots and older peers keep those bytes). It imports nothing of
// gostore; only tests import it.
package wiretest
