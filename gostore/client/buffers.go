// buffers.go defines Buffers and the registry of caller buffers for the
// zero-copy API, and the staging memory that GetBuffers lends out.

package client

import (
	"sort"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/gostore/gostore/gostore/alloc"
	"github.com/gostore/gostore/gostore/gpu"
	"github.com/gostore/gostore/gostore/memlimit"
	"github.com/gostore/gostore/gostore/transfer"
	"github.com/gostore/gostore/gostore/wire"
)

// Buffers is the caller's memory as the zero-copy calls see it: the
// buffers registered with register_buffer (core's registry, under its
// mu, held only inside registry's methods) and where memory never
// registered lives (MemoryOf). It owns no state of its own.
type Buffers struct {
	*core
}

// registry remembers the ranges Python declared with register_buffer. A
// zero-copy call may only touch memory inside one of them.
type registry struct {
	mu     sync.RWMutex
	ranges []addrRange // sorted by start, non-overlapping
}

type addrRange struct {
	start, size uint64
	dev         int // the GPU holding the range, -1 for host memory
}

func (r addrRange) end() uint64 { return r.start + r.size }

func (g *registry) register(ptr, size uint64) error {
	if ptr == 0 || size == 0 || ptr+size < ptr {
		return wire.Errorf(wire.ErrInvalidParams, "register_buffer(%#x, %d): null, empty or wrapping range", ptr, size)
	}
	// Device memory is asked about once, here: a range of it must lie in
	// one allocation, and a host range must not end in device memory.
	dev := DeviceOf(ptr)
	if dev >= 0 {
		if base, n, ok := gpu.AllocationRange(ptr); !ok || ptr+size > base+n {
			return wire.Errorf(wire.ErrInvalidParams, "register_buffer(%#x, %d): the range leaves its allocation on %s",
				ptr, size, location(dev))
		}
	} else if last := DeviceOf(ptr + size - 1); last >= 0 {
		return wire.Errorf(wire.ErrInvalidParams, "register_buffer(%#x, %d): the range starts in host memory and ends on %s",
			ptr, size, location(last))
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	i := sort.Search(len(g.ranges), func(i int) bool { return g.ranges[i].start >= ptr })
	if (i > 0 && g.ranges[i-1].end() > ptr) || (i < len(g.ranges) && ptr+size > g.ranges[i].start) {
		return wire.Errorf(wire.ErrInvalidParams, "register_buffer(%#x, %d) overlaps a registered buffer", ptr, size)
	}
	g.ranges = append(g.ranges, addrRange{})
	copy(g.ranges[i+1:], g.ranges[i:])
	g.ranges[i] = addrRange{start: ptr, size: size, dev: dev}
	return nil
}

func (g *registry) unregister(ptr uint64) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	i := sort.Search(len(g.ranges), func(i int) bool { return g.ranges[i].start >= ptr })
	if i == len(g.ranges) || g.ranges[i].start != ptr {
		return wire.Errorf(wire.ErrInvalidParams, "unregister_buffer(%#x): not registered", ptr)
	}
	g.ranges = append(g.ranges[:i], g.ranges[i+1:]...)
	return nil
}

// lookup reports whether [ptr, ptr+size) lies inside one registered
// buffer, and that buffer's GPU (-1: host).
func (g *registry) lookup(ptr, size uint64) (dev int, ok bool) {
	r, ok := g.rangeOf(ptr, size)
	if !ok {
		return -1, false
	}
	return r.dev, true
}

// rangeOf returns the registered buffer holding [ptr, ptr+size).
func (g *registry) rangeOf(ptr, size uint64) (addrRange, bool) {
	if ptr == 0 || ptr+size < ptr {
		return addrRange{}, false
	}
	g.mu.RLock()
	defer g.mu.RUnlock()
	i := sort.Search(len(g.ranges), func(i int) bool { return g.ranges[i].start > ptr })
	if i == 0 || ptr+size > g.ranges[i-1].end() {
		return addrRange{}, false
	}
	return g.ranges[i-1], true
}

// straddles reports whether [ptr, ptr+size) overlaps a registered buffer
// without lying inside it: a range that starts or ends in one is a
// caller's mistake, not memory of its own.
func (g *registry) straddles(ptr, size uint64) bool {
	g.mu.RLock()
	defer g.mu.RUnlock()
	end := ptr + size
	for _, r := range g.ranges {
		if ptr < r.end() && r.start < end && (ptr < r.start || end > r.end()) {
			return true
		}
	}
	return false
}

// location names where memory lives, as the topology does: cuda:N or host.
func location(dev int) string {
	if dev < 0 {
		return "host"
	}
	return "cuda:" + strconv.Itoa(dev)
}

// staging lends memory to GetBuffers: ranges of the local buffer
// (local_buffer_size) while it has room, a private mapping per buffer beyond
// that. The memory is mmap'ed, never Go heap, because Python keeps the
// address after the call returns. Private mappings handed back stay mapped
// (spare, by size class) up to retain bytes in all, so that a batch larger
// than the local buffer, lent again, lands in pages already faulted in
// rather than in fresh ones the kernel must zero first.
type staging struct {
	mu    sync.Mutex
	buf   *transfer.LocalSegment
	alloc *alloc.Allocator
	lent  map[uintptr]lent
	// spare holds unlent private mappings by size (a size class of
	// privateSize); spareBytes is their total, at most retain.
	spare      map[uint64][]*transfer.LocalSegment
	spareBytes uint64
	retain     uint64
	// closed: the store closed while memory was still lent; the shared
	// buffer is unmapped when the last loan comes back, never under Python.
	closed bool
}

type lent struct {
	size    uint64 // bytes reserved in buf (rounded), or 0 for an own mapping
	private *transfer.LocalSegment
}

func newStaging(size, retain uint64) (*staging, error) {
	s := &staging{lent: make(map[uintptr]lent), spare: map[uint64][]*transfer.LocalSegment{}, retain: retain}
	if size == 0 {
		return s, nil
	}
	buf, err := transfer.NewLocalBuffer(size)
	if err != nil {
		return nil, err
	}
	s.buf, s.alloc = buf, alloc.New(size, 64)
	return s, nil
}

// privateSize is the size class of a private mapping for size bytes: whole
// pages, and whole 2 MiB (a huge page) from 2 MiB up, so that spares fit
// loans of nearby sizes.
func privateSize(size uint64) uint64 {
	const page, huge = 4 << 10, 2 << 20
	if size >= huge {
		return (size + huge - 1) &^ (huge - 1)
	}
	return (size + page - 1) &^ (page - 1)
}

// checkedLoan is the smallest private mapping weighed against what the
// host can give before it is populated (memlimit reads a few files, some
// tens of microseconds: nothing beside populating 64 MiB, too much for
// every small loan).
const checkedLoan = 64 << 20

// get returns size bytes of lent memory.
func (s *staging) get(size uint64) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, wire.Errorf(wire.ErrInvalidParams, "store is closed")
	}
	if s.alloc != nil {
		if off, ok := s.alloc.Alloc(size); ok {
			b := s.buf.Bytes()[off : off+size : off+size]
			s.lent[addrOf(b)] = lent{size: size}
			return b, nil
		}
	}
	class := privateSize(size)
	var m *transfer.LocalSegment
	if list := s.spare[class]; len(list) > 0 {
		m = list[len(list)-1]
		list[len(list)-1] = nil
		s.spare[class] = list[:len(list)-1]
		s.spareBytes -= class
	} else {
		if class >= checkedLoan {
			if err := memlimit.Check(memlimit.Ask{Name: "get_buffer beyond the local buffer", Bytes: class}); err != nil {
				return nil, err
			}
		}
		var err error
		if m, err = transfer.NewLocalBuffer(class); err != nil {
			return nil, wire.Errorf(wire.ErrInternal, "staging %d bytes: %v", size, err)
		}
	}
	b := m.Bytes()[:size:size]
	s.lent[addrOf(b)] = lent{private: m}
	return b, nil
}

// put takes back memory lent by get; an unknown address is an error.
func (s *staging) put(addr uintptr) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.lent[addr]
	if !ok {
		return wire.Errorf(wire.ErrInvalidParams, "free_buffer(%#x): not a buffer of this store", addr)
	}
	delete(s.lent, addr)
	if m := l.private; m != nil {
		if class := m.Size(); !s.closed && s.spareBytes+class <= s.retain {
			s.spare[class] = append(s.spare[class], m)
			s.spareBytes += class
			return nil
		}
		return m.Close()
	}
	err := s.alloc.Free(uint64(addr-addrOf(s.buf.Bytes())), l.size)
	s.releaseIfIdleLocked()
	return err
}

func (s *staging) releaseIfIdleLocked() {
	if !s.closed || s.buf == nil || s.alloc.Used() > 0 {
		return
	}
	s.buf.Close()
	s.buf, s.alloc = nil, nil
}

// close stops lending and unmaps the spares; memory already lent stays
// mapped until it is put back.
func (s *staging) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for class, list := range s.spare {
		for _, m := range list {
			m.Close()
		}
		delete(s.spare, class)
	}
	s.spareBytes = 0
	s.releaseIfIdleLocked()
}

// RegisterBuffer declares [ptr, ptr+size) usable by the zero-copy calls.
func (c *Buffers) RegisterBuffer(ptr, size uint64) error { return c.buffers.register(ptr, size) }

// UnregisterBuffer forgets a buffer registered at ptr.
// A buffer page-locked for device copies is unlocked first.
func (c *Buffers) UnregisterBuffer(ptr uint64) error {
	if err := c.buffers.unregister(ptr); err != nil {
		return err
	}
	c.engine.Pins().DropRange(ptr)
	return nil
}

// CopyingAllowed says whether the copying calls (put, get, get_buffer: the
// caller's memory is not its zero-copy memory) may run. As in Mooncake,
// whose copying calls stage through the local buffer, a client set up with
// local_buffer_size 0 refuses them with ErrInvalidParams; the zero-copy
// calls work without one.
func (c *Buffers) CopyingAllowed() error {
	if c.cfg.LocalBufferSize == 0 {
		return wire.Errorf(wire.ErrInvalidParams, "copying calls need a local buffer: this client was set up with local_buffer_size=0 (use the zero-copy calls, or a local buffer)")
	}
	return nil
}

// Registered reports whether [ptr, ptr+size) lies inside a registered buffer.
func (c *Buffers) Registered(ptr, size uint64) bool {
	_, ok := c.buffers.lookup(ptr, size)
	return ok
}

// BufferDevice reports whether [ptr, ptr+size) lies inside a registered
// buffer, and the GPU holding it (-1: host memory).
func (c *Buffers) BufferDevice(ptr, size uint64) (dev int, ok bool) {
	return c.buffers.lookup(ptr, size)
}

// MemoryOf says where the caller's [ptr, ptr+size) lives for a zero-copy
// call, as Mooncake's client takes it: inside a registered buffer, that
// buffer's device; memory never registered, the caller's own (its GPU
// when the driver knows the address, else host memory, which must be
// mapped in this process). Refused (ok false): a null or wrapping range,
// one that straddles a registered buffer's edge (a mistake rather than
// memory of the caller's own), and host memory that is not mapped (a
// device pointer with no driver to reach it, or a stale one): touching it
// would kill the process.
func (c *Buffers) MemoryOf(ptr, size uint64) (dev int, ok bool) {
	if dev, ok := c.buffers.lookup(ptr, size); ok {
		return dev, true
	}
	if ptr == 0 || ptr+size < ptr || ptr+size > userSpaceEnd || c.buffers.straddles(ptr, size) {
		return -1, false
	}
	if dev := DeviceOf(ptr); dev >= 0 {
		return dev, true
	}
	return -1, mapped(ptr, size)
}

// mapped reports whether every page of [ptr, ptr+size) is mapped in this
// process: msync answers ENOMEM for a range with unmapped pages, without
// touching the memory (one system call).
func mapped(ptr, size uint64) bool {
	const page = 4096
	start := ptr &^ (page - 1)
	end := (ptr + size + page - 1) &^ (page - 1)
	_, _, errno := unix.Syscall(unix.SYS_MSYNC, uintptr(start), uintptr(end-start), unix.MS_ASYNC)
	return errno == 0
}

// userSpaceEnd bounds the addresses a process can own (48-bit virtual
// addresses): a range past it cannot be the caller's memory.
const userSpaceEnd = 1 << 48

// pinRegistered page-locks the registered host buffer holding b (once):
// host parts copied to or from GPU memory then move at the bus's speed
// instead of through the driver's own staging. Memory outside every
// registered buffer (the copying API's) is left alone.
func (c *Buffers) pinRegistered(b []byte) {
	if len(b) == 0 {
		return
	}
	r, ok := c.buffers.rangeOf(hostAddr(b), uint64(len(b)))
	if !ok || r.dev >= 0 {
		return
	}
	c.engine.Pins().EnsureRange(r.start, r.size, func() bool {
		now, ok := c.buffers.rangeOf(r.start, r.size)
		return ok && now == r
	})
}
