// Command bindings is built with -buildmode=c-shared into libgostore.so: the
// C ABI that python/gostore loads with ctypes (see ABI.md beside this file).
//
// It holds only //export shims: handles, conversion of C arrays and
// addresses into Go slices, and the mapping of errors to the contract's
// numbers. Behaviour lives in gostore/client (with the packages it holds:
// gostore/ssdtier, gostore/planclient) and gostore/master; the benchmark
// probes bench.py calls live in bench/limits.
//
// The edge of configuration: setup's keys and the environment (libc's
// getenv, see getenv) become client.Config here; the bounds of the calls
// that wait on the network in timeouts.go. interrupt.go chains a SIGINT
// handler in front of Python's so that Ctrl-C ends a call the main thread
// waits in (client.Client.InterruptMain): Python cannot run its own
// handler while a thread is inside a ctypes call.
//
// Addresses from Python are turned into slices that alias Python memory for
// the duration of a call only; nothing here keeps them after returning.
package main

func main() {}
