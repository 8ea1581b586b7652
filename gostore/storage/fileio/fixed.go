package fileio

import (
	"syscall"
	"unsafe"

	"github.com/pawelgaczynski/giouring"
)

// fixedChunk is the largest piece of the fixed-buffer region registered as one
// io_uring buffer. The kernel caps a registered buffer at 1 GiB; smaller pieces
// also keep each pin, and the kernel's per-buffer page array, modest. A
// variable so tests can exercise chunk boundaries without a huge region.
var fixedChunk = 256 << 20

// registerHook, when set (tests), runs before each ring registers the region;
// a non-nil error makes that registration fail.
var registerHook func() error

// fixedRegion is the memory declared with Engine.RegisterFixed, split into the
// iovecs that every ring registers in the same order, so buffer index i means
// the same chunk on all rings.
type fixedRegion struct {
	mem   []byte // referenced so Go-heap memory cannot be freed while pinned
	base  uintptr
	size  uintptr
	chunk uintptr
	iovs  []syscall.Iovec
}

func newFixedRegion(mem []byte, chunk int) *fixedRegion {
	r := &fixedRegion{
		mem:   mem,
		base:  uintptr(unsafe.Pointer(unsafe.SliceData(mem))),
		size:  uintptr(len(mem)),
		chunk: uintptr(chunk),
	}
	for off := 0; off < len(mem); off += chunk {
		n := min(chunk, len(mem)-off)
		iov := syscall.Iovec{Base: &mem[off]}
		iov.SetLen(n)
		r.iovs = append(r.iovs, iov)
	}
	return r
}

// index returns the registered buffer index whose chunk holds all of
// [addr, addr+n), or -1 when the range is outside the region or crosses a
// chunk boundary (READ_FIXED needs the whole transfer inside one buffer).
// A nil region holds nothing.
func (r *fixedRegion) index(addr uintptr, n uint32) int {
	if r == nil || n == 0 || addr < r.base || addr-r.base >= r.size {
		return -1
	}
	rel := addr - r.base
	i := rel / r.chunk
	end := min((i+1)*r.chunk, r.size)
	if uintptr(n) > end-rel {
		return -1
	}
	return int(i)
}

// register pins the region into ring as len(r.iovs) fixed buffers.
func (r *fixedRegion) register(ring *giouring.Ring) error {
	if registerHook != nil {
		if err := registerHook(); err != nil {
			return err
		}
	}
	_, err := ring.RegisterBuffers(r.iovs)
	return err
}
