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
// Callers: a Segment or Pinned buffer is the caller's to Close, after every
// copy that uses it has returned; copies may come from any goroutine.
package gpu
