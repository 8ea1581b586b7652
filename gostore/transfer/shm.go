// shm.go defines the shared-memory path of the Engine: a cache of peers'
// segments mapped through their /proc/<pid>/fd memfd paths.
package transfer

import (
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/gostore/gostore/gostore/wire"
)

// shmMap is one peer segment mapped into this process.
type shmMap struct {
	once sync.Once
	err  error

	mu  sync.RWMutex // read-held during copies, write-held to unmap
	mem []byte       // nil once unmapped
}

// shmCache maps peer segments on first use and remembers the ones that
// could not be mapped, which then go over TCP.
type shmCache struct {
	mu       sync.Mutex
	maps     map[uint64]*shmMap
	fallback map[uint64]error // SegID → why mapping failed
	closed   bool             // after forgetAll: map nothing more
	log      *slog.Logger
	// beforeUnmap runs on a mapping about to go (nil: nothing), with no
	// copy using it: the client unpins what it pinned there.
	beforeUnmap func(mem []byte)
}

func newShmCache(log *slog.Logger, beforeUnmap func([]byte)) *shmCache {
	return &shmCache{maps: map[uint64]*shmMap{}, fallback: map[uint64]error{}, log: log, beforeUnmap: beforeUnmap}
}

func (c *shmCache) failed(segID uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, bad := c.fallback[segID]
	return bad
}

// acquire returns p's mapping, read-locked: the caller copies, then calls
// release. useTCP reports that the segment cannot be mapped (remembered
// until Forget), so the caller should go over TCP instead.
func (c *shmCache) acquire(p Peer) (m *shmMap, useTCP bool, err error) {
	for attempt := 0; ; attempt++ {
		if attempt > 3 {
			return nil, false, wire.Errorf(wire.ErrTransferFail, "segment %d was forgotten during the transfer", p.SegID)
		}
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return nil, false, wire.Errorf(wire.ErrTransferFail, "transfer engine closed")
		}
		if err, bad := c.fallback[p.SegID]; bad {
			c.mu.Unlock()
			return nil, true, err
		}
		m = c.maps[p.SegID]
		if m == nil {
			m = &shmMap{}
			c.maps[p.SegID] = m
		}
		c.mu.Unlock()

		m.once.Do(func() {
			if m.mem, m.err = mapPeer(p); m.err == nil {
				go m.prefault()
			}
		})
		if m.err != nil {
			c.mu.Lock()
			if c.maps[p.SegID] != m { // forgotten meanwhile: look again
				c.mu.Unlock()
				continue
			}
			delete(c.maps, p.SegID)
			c.fallback[p.SegID] = m.err
			c.mu.Unlock()
			c.log.Warn("transfer: cannot map a same-host segment, using TCP for it",
				"seg", p.SegID, "path", p.ShmPath, "err", m.err)
			return nil, true, m.err
		}
		m.mu.RLock()
		if m.mem != nil {
			return m, false, nil
		}
		m.mu.RUnlock() // forgotten between lookup and lock: look again
	}
}

func (m *shmMap) release() { m.mu.RUnlock() }

// prefaultChunk is how much of a peer mapping is faulted in per step.
const prefaultChunk = 64 << 20

// prefault builds the page tables of a fresh peer mapping in the background,
// chunk by chunk, so copies run at memcpy speed instead of taking a minor
// fault per page, without stalling the first transfer on a large segment
// (MAP_POPULATE of 64 GiB takes seconds). MADV_POPULATE_WRITE (Linux 5.14)
// faults pages in without changing their contents; on older kernels this does
// nothing and the copies fault lazily. The read lock keeps the range mapped.
func (m *shmMap) prefault() {
	for off := 0; ; off += prefaultChunk {
		m.mu.RLock()
		if m.mem == nil || off >= len(m.mem) {
			m.mu.RUnlock()
			return
		}
		err := unix.Madvise(m.mem[off:min(off+prefaultChunk, len(m.mem))], unix.MADV_POPULATE_WRITE)
		m.mu.RUnlock()
		if err != nil {
			return
		}
	}
}

// forget unmaps segID once no copy uses it and clears its fallback mark.
func (c *shmCache) forget(segID uint64) {
	c.mu.Lock()
	m := c.maps[segID]
	delete(c.maps, segID)
	delete(c.fallback, segID)
	c.mu.Unlock()
	if m != nil {
		m.unmap(c.beforeUnmap)
	}
}

// forgetAll unmaps every segment (Engine.Close).
func (c *shmCache) forgetAll() {
	c.mu.Lock()
	maps := c.maps
	c.maps = map[uint64]*shmMap{}
	c.fallback = map[uint64]error{}
	c.closed = true
	c.mu.Unlock()
	for _, m := range maps {
		m.unmap(c.beforeUnmap)
	}
}

func (m *shmMap) unmap(before func([]byte)) {
	m.once.Do(func() { m.err = wire.Errorf(wire.ErrTransferFail, "segment forgotten") })
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mem != nil {
		if before != nil {
			before(m.mem)
		}
		_ = unix.Munmap(m.mem)
		m.mem = nil
	}
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
	// Not MAP_POPULATE: see shmMap.prefault.
	mem, err := unix.Mmap(fd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, wire.Errorf(wire.ErrTransferFail, "mmap %s (%d bytes): %v", p.ShmPath, size, err)
	}
	return mem, nil
}

// copyShm performs op against the mapping: one copy() per caller buffer.
func copyShm(mem []byte, op *Op) error {
	if err := CopyScatter(mem, op.Offset, op.Bufs, op.Write); err != nil {
		return wire.Errorf(wire.ErrInvalidParams, "segment %d: %v", op.Peer.SegID, err)
	}
	return nil
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
	workers := min(runtime.GOMAXPROCS(0), int(total/parallelCopyMin))
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
	share := (len(seg) + workers - 1) / workers
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		lo, hi := w*share, min((w+1)*share, len(seg))
		if lo >= hi {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			pos := 0 // offset of the current buffer within seg
			for _, b := range bufs {
				end := pos + len(b)
				if end > lo && pos < hi {
					from, to := max(lo, pos), min(hi, end)
					copyPart(seg[from:to], b[from-pos:to-pos], write)
				}
				pos = end
			}
		}()
	}
	wg.Wait()
}
