// Package fileio owns the low-level file I/O of gostore's SSD tier: the Engine
// abstraction (io_uring through giouring, or plain pread/pwrite), the start-up
// probe that picks one of them, O_DIRECT opening, and aligned memory for
// O_DIRECT transfers. It knows nothing about keys, buckets or metadata; the
// storage backends in gostore/storage build on it.
//
// # Engines
//
// New(true) creates an io_uring ring (QueueDepth entries, no SQPOLL, no fixed
// files) and runs one NOP through it. On any failure it logs once and returns
// the pread engine instead, so a missing or disabled io_uring never becomes an
// error. New(false) is the pread engine. The choice is the caller's: this
// package reads no environment. UseURing turns a value of the setting (the
// SSD tier's MOONCAKE_OFFLOAD_USE_URING, read by the edge) into the choice:
// io_uring is the default (empty, "true", "1", "yes", "on"); "false", "0",
// "no" or "off" select pread (case and surrounding space ignored); other
// values are logged and keep the default.
//
// Every Engine method either transfers the whole buffer or returns an error:
// short reads/writes are resubmitted for the remainder, and a read that hits
// end of file before the buffer is full returns an error wrapping
// io.ErrUnexpectedEOF (never silent zeros).
//
// A uring Engine keeps a pool of rings, one per concurrent caller: each call
// (including a bounced write's read-modify-write) checks out a ring for its
// duration, so goroutines do I/O in parallel with no lock held across it.
// Rings are created on demand up to max(4, 2*GOMAXPROCS); further callers wait
// for one to come back. If an extra ring cannot be created, that call runs on
// pread/pwrite (logged once). A ring that fails unrecoverably fails the ops in
// flight on it and is closed; later calls get a fresh ring. Close makes later
// calls fail with os.ErrClosed and returns once the calls in flight have
// finished and every ring is closed.
//
// # Fixed buffers
//
// RegisterFixed(mem) declares a page-aligned region (typically the staging
// buffer) that the caller keeps mapped until Close returns. The uring engine
// advises it MADV_NOHUGEPAGE and each ring registers it, on its next use, as
// io_uring fixed buffers of at most 256 MiB each. A read whose destination lies
// entirely inside one of those buffers is issued as IORING_OP_READ_FIXED, which
// skips pinning the pages per request; other reads, all writes, and rings where
// registration failed (logged once) use plain reads. Counters reports how many
// read submissions took each path. The pread engine accepts and ignores the
// region.
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
