// doc.go defines the package documentation of transfer, gostore's data plane.

// Package transfer owns how object bytes move between a caller's memory
// and a segment, the memory a client contributed to the pool: it is the one
// place that decides the route, and the client only hands it ops.
//
// A process contributes memory with NewLocalSegment: a memfd mapped
// MAP_SHARED whose /proc/<pid>/fd/<n> path (ShmPath) lets peers on the same
// host (same HostID) map the very same pages. The kernel frees the memory
// when the owner and every peer have unmapped it, so nothing is left behind
// in /dev/shm when a process dies. Each client runs a Server over its
// segment (host memory, or a GPU segment through DeviceMemory).
//
// # Routes
//
// Engine.Do takes a batch of ops and routes each by its peer (Route): the
// own segment (SetOwn) is copied to directly; a same-host host segment is
// mapped once and copied with copy(); a same-host GPU segment is opened
// from its IPC handle and copied by the driver; anything else, or what
// cannot be opened, goes over pooled, pipelined TCP streams to the peer's
// Server. Each route is a Transport; Options.Wrap puts a test's fake in
// front of any of them. TCP starts first so the network works while the
// caller's goroutine copies the local routes.
//
// # Where the caller's memory lives
//
// Op.Bufs are host parts; Op.Device names parts on a GPU (nil placeholders
// in Bufs). A device part moves GPU to GPU into an IPC or own GPU segment,
// in one DMA into a mapping the engine page-locked (Pins), and through
// pinned bounce memory (staging.go) on a route that cannot reach the GPU
// (TCP, a mapping that cannot be locked, Engine.Staged for the SSD tier).
// The GPU is reached only through the Driver the caller supplies: this
// package links no driver, and tests supply a fake.
//
// # Invariants and the caller's duties
//
//   - Do returns one error per op, carrying a wire.Code (ErrInvalidParams
//     for a bad range or device parts, refused before anything moves;
//     ErrTransferFail for I/O, cancellation included). When Do returns the
//     caller's memory is no longer used, also after ctx ended.
//   - The caller keeps its memory valid until Do returns, and never hands
//     an op a range it does not own.
//   - A mapping or connection that failed is dropped by Forget (the client
//     calls it for segments whose ops failed in transfer); Close fails
//     what is in flight, unmaps, unpins and frees the bounces.
//
// # TCP protocol
//
// Little endian, on each connection a stream of requests answered in order:
//
//	request:  u8 op (1 write, 2 read) | u64 id | u64 offset | u64 length | write payload
//	response: u64 id | i32 status (0 or a wire.Code) | u64 length | read payload
//
// The response length is the number of payload bytes that follow it: the
// requested length for a successful read, zero otherwise. Write payloads are
// read straight into the segment and read payloads are written straight from
// it. A request with an unknown op closes the connection.
package transfer
