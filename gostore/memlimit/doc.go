// doc.go defines the package documentation of memlimit.

// Package memlimit owns one question: may this process take N more bytes
// of memory now? Every memory gostore takes up front asks it before taking
// anything: setup's segment (global_segment_size), local buffer
// (local_buffer_size) and SSD tier staging buffer, segments allocated at run time
// (allocate_and_mount_segment), a get_buffer loan of 64 MiB or more beyond
// the local buffer, and through setup the standalone gostore-client's
// segment. Asking first turns what used to be a setup
// that blocked for minutes in reclaim, or a process the kernel's OOM killer
// ended without a word, into a refusal with ErrInvalidParams that names
// the size asked and the bound it exceeds.
//
// The bounds read (Probe.Bounds), the tightest of which decides:
//
//   - the host's MemAvailable (/proc/meminfo): what the kernel can hand
//     out without swapping;
//   - with vm.overcommit_memory=2, CommitLimit less Committed_AS;
//   - the memory cgroup of this process, and each ancestor up to the
//     hierarchy's root: cgroup v2's memory.max less memory.current, v1's
//     memory.limit_in_bytes less memory.usage_in_bytes. The cgroup is
//     found from /proc/self/cgroup and the hierarchies' mounts from
//     /proc/self/mountinfo, so a limit set on the container's or the
//     service's cgroup counts, whatever it is mounted under.
//
// memfd memory (segments) is shmem: charged to the memory cgroup and
// counted by MemAvailable, and not bounded by /dev/shm's size (memfds live
// on the kernel's internal mount), so /dev/shm is not read.
//
// Invariants: nothing here allocates the memory asked about or writes
// anywhere; a bound that cannot be read is skipped (a host without
// /proc/meminfo refuses nothing). The answer is a snapshot: memory others
// take meanwhile is not reserved, so a caller still handles a failed
// allocation.
//
// Callers' duties: ask with the total about to be taken at once (setup
// asks for segment and buffer together), before taking any of it; log the
// error returned (it names what was asked, the bound and its numbers) and
// return its code.
package memlimit
