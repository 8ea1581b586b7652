// shm.go defines the shared-memory path of the Engine: peers' segments
// mapped through their /proc/<pid>/fd memfd paths (kept in a peerMaps).

package transfer

import (
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime"
	"strings"

	"github.com/gostore/gostore/gostore/internal/fanout"
	"github.com/gostore/gostore/gostore/wire"
	"golang.org/x/sys/unix"
)

// prefaultChunk is how much of a peer mapping is faulted in per step.
const prefaultChunk = 64 << 20

// prefault builds the page tables of a fresh peer mapping in the background,
// chunk by chunk, so copies run at memcpy speed instead of taking a minor
// fault per page, without stalling the first transfer on a large segment
// (MAP_POPULATE of 64 GiB takes seconds). MADV_POPULATE_WRITE (Linux 5.14)
// faults pages in without changing their contents; on older kernels this does
// nothing and the copies fault lazily. The read lock keeps the range mapped.
func prefault(m *peerMap[[]byte]) {
	go func() {
		for off := 0; ; off += prefaultChunk {
			m.mu.RLock()
			if !m.live || off >= len(m.mem) {
				m.mu.RUnlock()
				return
			}
			err := unix.Madvise(m.mem[off:min(off+prefaultChunk, len(m.mem))], unix.MADV_POPULATE_WRITE)
			m.mu.RUnlock()
			if err != nil {
				return
			}
		}
	}()
}

// newShmMaps maps same-host peers' segments; beforeUnmap (may be nil)
// runs on a mapping about to go, no copy using it (the Engine unpins what
// it pinned there).
func newShmMaps(log *slog.Logger, beforeUnmap func([]byte)) *peerMaps[[]byte] {
	c := newPeerMaps("map a same-host segment", mapPeer, func(mem []byte) {
		if beforeUnmap != nil {
			beforeUnmap(mem)
		}
		_ = unix.Munmap(mem)
	}, log)
	c.opened = prefault
	return c
}

// mapPeer opens p.ShmPath and maps the whole file shared. The descriptor is
// closed at once; the mapping keeps the memory alive.
func mapPeer(p Peer) ([]byte, error) {
	if p.ShmPath == "" {
		return nil, wire.Errorf(wire.ErrTransferFail, "segment %d has no shm path", p.SegID)
	}
	// The path must name a memfd, so that a recycled pid or fd number cannot
	// make us map some unrelated file.
	if target, err := os.Readlink(p.ShmPath); err != nil || !strings.HasPrefix(target, "/memfd:") {
		return nil, wire.Errorf(wire.ErrTransferFail, "segment %d: %s is not a memfd (%q, %v)", p.SegID, p.ShmPath, target, err)
	}
	fd, err := unix.Open(p.ShmPath, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, wire.Errorf(wire.ErrTransferFail, "open %s: %v", p.ShmPath, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, wire.Errorf(wire.ErrTransferFail, "fstat %s: %v", p.ShmPath, err)
	}
	size := uint64(st.Size)
	if st.Size <= 0 || (p.Size != 0 && size < p.Size) {
		return nil, wire.Errorf(wire.ErrTransferFail, "%s holds %d bytes, segment %d claims %d", p.ShmPath, st.Size, p.SegID, p.Size)
	}
	if p.Size != 0 {
		size = p.Size
	}
	if size > uint64(math.MaxInt) {
		return nil, wire.Errorf(wire.ErrTransferFail, "segment %d too large to map (%d bytes)", p.SegID, size)
	}
	// Not MAP_POPULATE: see prefault.
	mem, err := unix.Mmap(fd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, wire.Errorf(wire.ErrTransferFail, "mmap %s (%d bytes): %v", p.ShmPath, size, err)
	}
	return mem, nil
}

// CopyScatter copies between the contiguous range of mem starting at off
// and the scatter list bufs: into mem when write, out of it otherwise. A
// range outside mem is an error and nothing is copied. Copies of a few MiB
// and more are spread over the cores (see parallelCopyMin).
func CopyScatter(mem []byte, off uint64, bufs [][]byte, write bool) error {
	var total uint64
	for _, b := range bufs {
		total += uint64(len(b))
	}
	if !inRange(off, total, uint64(len(mem))) {
		return fmt.Errorf("range [%d,+%d) outside %d bytes", off, total, len(mem))
	}
	workers := copyShares(total)
	if workers < 2 {
		for _, b := range bufs {
			copyPart(mem[off:], b, write)
			off += uint64(len(b))
		}
		return nil
	}
	copyParallel(mem[off:off+total], bufs, write, workers)
	return nil
}

// parallelCopyMin is the share of a copy worth another goroutine. One core
// copying into a peer's segment (memory not in this core's cache) reached
// 6-8 GB/s here, two reached 11-15 GB/s; below a few MiB the goroutine
// start-up and hand-off cost more than they save.
const parallelCopyMin = 2 << 20

// copyShares is how many goroutines a copy of total bytes is worth: one per
// parallelCopyMin, at most one per core.
func copyShares(total uint64) int {
	return int(min(uint64(runtime.GOMAXPROCS(0)), total/parallelCopyMin))
}

func copyPart(seg, buf []byte, write bool) {
	if write {
		copy(seg, buf)
	} else {
		copy(buf, seg)
	}
}

// copyParallel copies between the contiguous seg and the scatter list bufs
// (same total length) with workers goroutines, each taking an equal byte
// range that may span several buffers.
func copyParallel(seg []byte, bufs [][]byte, write bool, workers int) {
	fanout.Ranges(len(seg), workers, func(_, lo, hi int) {
		pos := 0 // offset of the current buffer within seg
		for _, b := range bufs {
			end := pos + len(b)
			if end > lo && pos < hi {
				from, to := max(lo, pos), min(hi, end)
				copyPart(seg[from:to], b[from-pos:to-pos], write)
			}
			pos = end
		}
	})
}
