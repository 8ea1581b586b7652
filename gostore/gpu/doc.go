// Package gpu reaches the CUDA driver without linking it: libcuda.so.1 is
// opened at run time (dlopen) and its few entry points are bound by their
// versioned names (cuMemAlloc_v2, cuMemcpyHtoD_v2, ...) with hand-declared
// types, so gostore builds and runs where no CUDA is installed and reports
// "no GPU" there. Where a driver exists it offers what the store needs:
// device properties, device memory (GPU segments), pinning of host memory,
// copies between host and device, the kind of a pointer (is a caller's
// buffer device memory?), and CUDA IPC handles so a same-host peer maps
// another process's GPU memory.
//
// Every call uses the device's primary context, made current on the
// calling thread first (callers may come from any goroutine).
//
// The driver is one per process, opened lazily by the first call that needs
// it (never at load, so a process that forks before using the GPU stays
// fork-safe): a dlopen'd library is mapped into the whole process, the
// entry points bound from it are C globals, and the primary contexts
// retained through it live until exit. Which library to open is therefore a
// process-wide choice, made once by the edge: Configure(Options{Library})
// before the first use (the bindings pass GOSTORE_LIBCUDA when the library
// loads; tests pass a fake). This package reads no environment.
//
// Callers: Configure, if at all, before anything else here; a Segment or
// Pinned buffer is the caller's to Close, after every copy that uses it has
// returned; copies may come from any goroutine.
package gpu
