// Package fileio owns the low-level file I/O of gostore's SSD tier: the Engine
// abstraction (io_uring through giouring, or plain pread/pwrite), the start-up
// probe that picks one of them, O_DIRECT opening, and aligned memory for
// O_DIRECT transfers. It knows nothing about keys, buckets or metadata; the
// storage backends in gostore/storage build on it.
//
// # Engines
//
// New(true) creates an io_uring ring (QueueDepth entries, no SQPOLL, no fixed
// files, no registered/fixed buffers) and runs one NOP through it. On any
// failure it logs once and returns the pread engine instead, so a missing or
// disabled io_uring never becomes an error. FromEnv reads
// MOONCAKE_OFFLOAD_USE_URING (legacy alias MOONCAKE_USE_URING); "true"/"1"
// selects io_uring, anything else (including unset) pread.
//
// Every Engine method either transfers the whole buffer or returns an error:
// short reads/writes are resubmitted for the remainder, and a read that hits
// end of file before the buffer is full returns an error wrapping
// io.ErrUnexpectedEOF (never silent zeros). A uring Engine owns one ring guarded
// by a mutex, so it is safe but serialised across goroutines; use one Engine per
// I/O goroutine for parallelism.
//
// Callers must not Close a file while an Engine call on it is in flight, and
// must not touch a buffer while a call using it is in flight.
//
// # O_DIRECT and the bounce rule
//
// Under O_DIRECT the kernel requires the buffer address, the length and the
// file offset to be multiples of Alignment (4096). OpenDirect tries O_DIRECT and
// falls back to a buffered descriptor, reporting which it got. Buffers from
// AlignedBuffer are page aligned (mmap-backed, MADV_NOHUGEPAGE).
//
// Rule: a request whose address, length or offset is not aligned is checked
// against the descriptor's flags (one fcntl); if the descriptor is O_DIRECT the
// request goes through a temporary aligned bounce buffer covering the aligned
// range [off rounded down, off+len rounded up):
//   - reads read the aligned range and copy the requested bytes out;
//   - writes first read the partial head/tail blocks (read-modify-write), copy
//     the data in, write the aligned range, and then ftruncate the file back to
//     max(old size, off+len) if the aligned write extended it.
//
// The read-modify-write is not atomic with respect to concurrent writers of the
// same 4 KiB blocks; callers that write unaligned data into shared blocks must
// serialise those writes themselves. Aligned requests never pay the fcntl.
package fileio
