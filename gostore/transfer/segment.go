// segment.go defines LocalSegment, the memfd-backed memory this process
// contributes to the pool, and NewLocalBuffer for private staging memory.

package transfer

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/gostore/gostore/gostore/internal/fanout"
	"github.com/gostore/gostore/gostore/wire"
)

// LocalSegment is memory owned by this process: a memfd mapped MAP_SHARED
// (NewLocalSegment) or a private anonymous mapping (NewLocalBuffer). Its
// pages are populated at creation so the first transfer pays no faults.
//
// The mapping must outlive every user of Bytes, including a Server serving
// it: close the Server before the segment.
type LocalSegment struct {
	name string
	size uint64
	mem  []byte
	path string

	mu     sync.Mutex
	fd     int // -1 for anonymous buffers and after Close
	closed bool
}

// NewLocalSegment creates a memfd of size bytes and maps it shared. Peers on
// the same host (HostID) map ShmPath to reach the same memory.
func NewLocalSegment(name string, size uint64) (*LocalSegment, error) {
	if err := checkMapSize(size); err != nil {
		return nil, err
	}
	mname := "gostore:" + name
	if len(mname) > 240 { // the kernel caps memfd names at 249 bytes
		mname = mname[:240]
	}
	fd, err := unix.MemfdCreate(mname, unix.MFD_CLOEXEC)
	if err != nil {
		return nil, wire.Errorf(wire.ErrInternal, "memfd_create %q: %v", name, err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		return nil, wire.Errorf(wire.ErrInternal, "ftruncate memfd %q to %d: %v", name, size, err)
	}
	mem, err := mapPopulated(fd, size, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return nil, wire.Errorf(wire.ErrInternal, "mmap memfd %q (%d bytes): %v", name, size, err)
	}
	return &LocalSegment{
		name: name, size: size, mem: mem, fd: fd,
		path: fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), fd),
	}, nil
}

// NewLocalBuffer maps size bytes of private anonymous memory, populated. It
// has no ShmPath; use it for staging buffers that peers never map.
func NewLocalBuffer(size uint64) (*LocalSegment, error) {
	if err := checkMapSize(size); err != nil {
		return nil, err
	}
	mem, err := mapPopulated(-1, size, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, wire.Errorf(wire.ErrInternal, "mmap %d anonymous bytes: %v", size, err)
	}
	return &LocalSegment{name: "buffer", size: size, mem: mem, fd: -1}, nil
}

func checkMapSize(size uint64) error {
	if size == 0 || size > math.MaxInt {
		return wire.Errorf(wire.ErrInvalidParams, "segment size %d out of range", size)
	}
	return nil
}

// Populating: the kernel allocates and zeroes every page of a new segment
// or buffer before it is handed out (the memory is taken up front; see
// memlimit). With MADV_POPULATE_WRITE (Linux 5.14) the pages are faulted in
// by up to populateWorkers threads, populateChunk at a time: zeroing is
// bound by one core's speed, and a shmem page fault's work is per page, so
// threads divide the time on a host with idle cores. The call also reports
// a page it could not get (ENOMEM) where MAP_POPULATE would leave it out
// silently. Older kernels get MAP_POPULATE.
const populateWorkers = 8

var populateChunk = 64 << 20 // a variable: tests make it small

// mapPopulated maps size bytes read/write, every page populated.
func mapPopulated(fd int, size uint64, flags int) ([]byte, error) {
	prot := unix.PROT_READ | unix.PROT_WRITE
	mem, err := unix.Mmap(fd, 0, int(size), prot, flags)
	if err != nil {
		return nil, err
	}
	err = populate(mem)
	if err == nil {
		return mem, nil
	}
	unix.Munmap(mem)
	if err != unix.EINVAL {
		return nil, fmt.Errorf("populating %d bytes: %w", size, err)
	}
	// A kernel without MADV_POPULATE_WRITE.
	return unix.Mmap(fd, 0, int(size), prot, flags|unix.MAP_POPULATE)
}

// populate faults every page of mem in for writing, in chunks spread over
// up to populateWorkers goroutines; after the first error the chunks left
// are skipped.
func populate(mem []byte) error {
	chunks := (len(mem) + populateChunk - 1) / populateChunk
	var (
		failed atomic.Bool
		first  error
		once   sync.Once
	)
	fanout.Each(chunks, min(runtime.GOMAXPROCS(0), populateWorkers), func(i int) {
		if failed.Load() {
			return
		}
		end := min((i+1)*populateChunk, len(mem))
		if err := unix.Madvise(mem[i*populateChunk:end], unix.MADV_POPULATE_WRITE); err != nil {
			once.Do(func() { first = err })
			failed.Store(true)
		}
	})
	return first
}

// Name returns the name given at creation.
func (s *LocalSegment) Name() string { return s.name }

// Bytes returns the mapping. The segment owns it; it is invalid after Close.
func (s *LocalSegment) Bytes() []byte { return s.mem }

// Size returns the size in bytes.
func (s *LocalSegment) Size() uint64 { return s.size }

// ShmPath returns /proc/<pid>/fd/<n> of the memfd, which a process with the
// same HostID can open and map; "" for a NewLocalBuffer buffer.
func (s *LocalSegment) ShmPath() string { return s.path }

// Close unmaps the memory and closes the memfd. The kernel frees the pages
// once peers that mapped them unmap too. Close is idempotent.
func (s *LocalSegment) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	var first error
	if err := unix.Munmap(s.mem); err != nil {
		first = err
	}
	if s.fd >= 0 {
		if err := unix.Close(s.fd); err != nil && first == nil {
			first = err
		}
		s.fd = -1
	}
	return first
}
