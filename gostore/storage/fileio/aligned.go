package fileio

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

var (
	mapMu sync.Mutex
	maps  = map[*byte][]byte{} // first byte of an AlignedBuffer -> full mapping
)

// AlignedBuffer returns size bytes whose address is a multiple of align (a power
// of two; 0 means Alignment). Buffers with align up to the page size are
// anonymous mmap'ed memory with MADV_NOHUGEPAGE (so io_uring can long-term pin
// them later) and should be released with FreeAligned; larger alignments come
// from the Go heap, over-allocated and sliced (FreeAligned is a no-op for them).
// It panics on an invalid align or size, like make.
func AlignedBuffer(size, align int) []byte {
	if align == 0 {
		align = Alignment
	}
	if align < 0 || align&(align-1) != 0 || size < 0 {
		panic(fmt.Sprintf("fileio: AlignedBuffer(%d, %d): bad size or alignment", size, align))
	}
	if size == 0 {
		return []byte{}
	}
	page := os.Getpagesize()
	if align > page {
		return heapAlignedTo(size, align)
	}
	n := (size + page - 1) &^ (page - 1)
	m, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return heapAlignedTo(size, align)
	}
	_ = unix.Madvise(m, unix.MADV_NOHUGEPAGE)
	mapMu.Lock()
	maps[&m[0]] = m
	mapMu.Unlock()
	return m[:size:size]
}

// FreeAligned unmaps a buffer returned by AlignedBuffer. It is a no-op for
// heap-backed buffers and for nil or empty slices. The buffer must not be used
// afterwards.
func FreeAligned(b []byte) error {
	if cap(b) == 0 {
		return nil
	}
	p := unsafe.SliceData(b)
	mapMu.Lock()
	m, ok := maps[p]
	delete(maps, p)
	mapMu.Unlock()
	if !ok {
		return nil
	}
	return unix.Munmap(m)
}

// heapAligned returns a GC-managed buffer aligned to Alignment (bounce buffers).
func heapAligned(size int) []byte { return heapAlignedTo(size, Alignment) }

func heapAlignedTo(size, align int) []byte {
	b := make([]byte, size+align)
	skip := (align - int(uintptr(unsafe.Pointer(&b[0]))%uintptr(align))) % align
	return b[skip : skip+size : skip+size]
}

// OpenDirect opens path with O_DIRECT added to flag and reports true; if the
// file system rejects O_DIRECT (EINVAL) it opens the file buffered and reports
// false. Other errors are returned as is. When flag has O_CREATE|O_EXCL and the
// O_DIRECT attempt created the file before failing, the buffered retry drops
// O_EXCL so it does not fail on the file the first attempt made.
func OpenDirect(path string, flag int, perm os.FileMode) (*os.File, bool, error) {
	f, err := os.OpenFile(path, flag|unix.O_DIRECT, perm)
	if err == nil {
		return f, true, nil
	}
	if !errors.Is(err, unix.EINVAL) {
		return nil, false, err
	}
	fb := flag
	if flag&(os.O_CREATE|os.O_EXCL) == os.O_CREATE|os.O_EXCL {
		if _, serr := os.Stat(path); serr == nil {
			fb &^= os.O_EXCL
		}
	}
	f, err = os.OpenFile(path, fb, perm)
	if err != nil {
		return nil, false, err
	}
	return f, false, nil
}
