// Package server drives the master's metadata core: it serves the core over
// the RPC protocol, runs the clock (Tick) and answers HTTP for operators
// (/metrics, /health, /get_all_segments, /query_key).
//
// It is used by the gostore-master binary and by the master embedded in a
// Python process (bindings), with the same flags.
package server
