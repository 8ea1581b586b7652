// Package rdma finds RDMA devices through libibverbs, opened at run time
// (dlopen) so gostore builds and runs where no verbs library or NIC
// exists and reports why there. It lists the devices verbs can open; the
// client matches them with the topology's NICs to choose one per buffer
// location. Moving bytes over verbs (registration, RDMA READ/WRITE) is not
// part of this build: without a NIC to run on, it would be untested code.
//
// The library is one per process, opened by the first Probe: dlopen maps
// it into the whole process and the entry points bound from it are C
// globals. Which library to open is therefore a process-wide choice, made
// once by the edge with Configure(Options{Library}) before that first Probe
// (the bindings pass GOSTORE_LIBIBVERBS when the library loads; tests pass
// a fake). This package reads no environment.
//
// Callers: Configure, if at all, before the first Probe.
package rdma
