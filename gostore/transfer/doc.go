// doc.go defines the package documentation of transfer, gostore's data plane.

// Package transfer moves object bytes between a caller's buffers and a peer's
// segment, the memory another client contributed to the pool.
//
// A process contributes memory with NewLocalSegment: a memfd mapped
// MAP_SHARED whose /proc/<pid>/fd/<n> path (ShmPath) lets peers on the same
// host (same HostID) map the very same pages. The kernel frees the memory
// when the owner and every peer have unmapped it, so nothing is left behind
// in /dev/shm when a process dies.
//
// Each client runs a Server over its segment. The Engine picks the path per
// peer: a cached shared mapping and a single copy() when the peer is on the
// same host, otherwise a pool of pipelined TCP streams to the peer's Server.
//
// The TCP protocol (little endian) on each connection is a stream of
// requests, answered in order:
//
//	request:  u8 op (1 write, 2 read) | u64 id | u64 offset | u64 length | write payload
//	response: u64 id | i32 status (0 or a wire.Code) | u64 length | read payload
//
// The response length is the number of payload bytes that follow it: the
// requested length for a successful read, zero otherwise. Write payloads are
// read straight into the segment and read payloads are written straight from
// it. A request with an unknown op closes the connection.
package transfer
