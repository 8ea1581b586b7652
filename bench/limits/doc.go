// Package limits measures the physical limits the data-path benchmarks are
// compared with: Go's copy between two warm buffers (the ceiling of the
// shared-memory path) and one raw TCP stream on loopback (the ceiling of
// the TCP path). bench.py reaches them through the library's
// gs_bench_memcpy and gs_bench_tcp_stream; `go test -bench` here reports
// them at 16 MiB.
//
// It is benchmark code, kept out of gostore/: nothing in the store calls it.
// Each measurement takes the machine for its duration (one core copying,
// or a sender and a receiver on loopback); a caller wanting a clean figure
// runs nothing else meanwhile. Both return 0 for a size or iteration count
// of 0 and when the loopback stream cannot be set up.
package limits
