// Command bindings is built with -buildmode=c-shared into libgostore.so: the
// C ABI that python/gostore loads with ctypes (see ABI.md beside this file).
//
// It holds only //export shims: handles, conversion of C arrays and
// addresses into Go slices, and the mapping of errors to the contract's
// numbers. Behaviour lives in gostore/client (with the packages it holds:
// gostore/ssdtier, gostore/planclient) and gostore/master; the benchmark
// probes bench.py calls live in bench/limits.
//
// Addresses from Python are turned into slices that alias Python memory for
// the duration of a call only; nothing here keeps them after returning.
package main

func main() {}
