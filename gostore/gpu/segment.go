// segment.go defines Segment, device memory the store moves bytes in and
// out of, and Pinned, page-locked host memory for staging copies.

package gpu

import (
	"fmt"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Segment is a range of device memory: allocated here (NewSegment, the
// owner may export it) or mapped from another process's (OpenSegment).
// Host code never dereferences it; every byte moves through the driver.
type Segment struct {
	dev    int
	base   uint64
	size   uint64
	mapped bool // opened from an IPC handle: closed, not freed

	mu     sync.Mutex
	closed bool
}

// NewSegment allocates size bytes on device dev.
func NewSegment(dev int, size uint64) (*Segment, error) {
	if size == 0 {
		return nil, fmt.Errorf("gpu: empty segment")
	}
	p, err := Alloc(dev, size)
	if err != nil {
		return nil, err
	}
	return &Segment{dev: dev, base: p, size: size}, nil
}

// OpenSegment maps the device memory another process on this host
// exported (Segment.Handle) of size bytes on device dev. A size larger
// than the allocation behind the handle is refused: the peer's word is
// not trusted with the range this process copies into.
func OpenSegment(dev int, h IPCHandle, size uint64) (*Segment, error) {
	p, err := OpenIPC(dev, h)
	if err != nil {
		return nil, err
	}
	if base, n, ok := AllocationRange(p); !ok || p+size > base+n {
		CloseIPC(dev, p)
		return nil, fmt.Errorf("gpu: an IPC mapping of %d bytes claims %d", n-(p-base), size)
	}
	return &Segment{dev: dev, base: p, size: size, mapped: true}, nil
}

// Device is the ordinal of the GPU holding the memory.
func (s *Segment) Device() int { return s.dev }

// Size is the segment's length in bytes.
func (s *Segment) Size() uint64 { return s.size }

// Base is the device address of the first byte.
func (s *Segment) Base() uint64 { return s.base }

// Handle is the IPC handle a same-host peer opens to map this memory.
func (s *Segment) Handle() (IPCHandle, error) { return ExportIPC(s.dev, s.base) }

func (s *Segment) check(off, n uint64) error {
	if off > s.size || n > s.size-off {
		return fmt.Errorf("gpu: range [%d,+%d) outside a segment of %d bytes", off, n, s.size)
	}
	return nil
}

// CopyFrom writes src to [off, off+len(src)) of the segment.
func (s *Segment) CopyFrom(off uint64, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	if err := s.check(off, uint64(len(src))); err != nil {
		return err
	}
	return CopyToDevice(s.dev, s.base+off, hostAddr(src), uint64(len(src)))
}

// CopyTo reads [off, off+len(dst)) of the segment into dst.
func (s *Segment) CopyTo(dst []byte, off uint64) error {
	if len(dst) == 0 {
		return nil
	}
	if err := s.check(off, uint64(len(dst))); err != nil {
		return err
	}
	return CopyToHost(s.dev, hostAddr(dst), s.base+off, uint64(len(dst)))
}

// CopyFromDevice copies n bytes at device address src (any device this
// process reaches) to [off, off+n) of the segment.
func (s *Segment) CopyFromDevice(off, src, n uint64) error {
	if err := s.check(off, n); err != nil {
		return err
	}
	return Copy(s.dev, s.base+off, src, n)
}

// CopyToDevice copies [off, off+n) of the segment to device address dst.
func (s *Segment) CopyToDevice(dst, off, n uint64) error {
	if err := s.check(off, n); err != nil {
		return err
	}
	return Copy(s.dev, dst, s.base+off, n)
}

// Close frees the memory (or unmaps a peer's). Idempotent.
func (s *Segment) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if s.mapped {
		return CloseIPC(s.dev, s.base)
	}
	return Free(s.dev, s.base)
}

func hostAddr(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(&b[0]))) }

// Pinned is page-locked host memory: copies between it and a device run at
// the bus's speed and never through the driver's own staging.
type Pinned struct {
	mem []byte
}

// NewPinned maps size bytes of anonymous memory and pins them.
func NewPinned(size uint64) (*Pinned, error) {
	if size == 0 {
		return nil, fmt.Errorf("gpu: empty pinned buffer")
	}
	if !Probe().Available {
		return nil, ErrNoGPU
	}
	mem, err := unix.Mmap(-1, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("gpu: map %d bytes to pin: %w", size, err)
	}
	if err := Pin(hostAddr(mem), size); err != nil {
		unix.Munmap(mem)
		return nil, err
	}
	return &Pinned{mem: mem}, nil
}

// Bytes is the pinned memory; invalid after Close.
func (p *Pinned) Bytes() []byte { return p.mem }

// Close unpins and unmaps the memory.
func (p *Pinned) Close() error {
	if p.mem == nil {
		return nil
	}
	err := Unpin(hostAddr(p.mem))
	if e := unix.Munmap(p.mem); err == nil {
		err = e
	}
	p.mem = nil
	return err
}
