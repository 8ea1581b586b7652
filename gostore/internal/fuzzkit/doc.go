// Package fuzzkit holds what the fuzz targets of several packages share:
// in-memory connections a test can half-close (so it can send a whole
// stream and still read every answer, and no socket is left behind per
// iteration), a listener that hands their server ends to a real Serve
// loop, and a meter of the heap bytes a call allocates.
//
// Only _test files import it, and it imports nothing of gostore, so any
// package's in-package tests can use it without an import cycle.
package fuzzkit
