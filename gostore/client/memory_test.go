// memory_test.go tests MemoryOf: which caller memory a zero-copy call
// takes (registered, or the caller's own) and which it refuses.

package client

import (
	"testing"
	"unsafe"

	"github.com/gostore/gostore/gostore/internal/testkit"
	"golang.org/x/sys/unix"
)

func TestMemoryOf(t *testing.T) {
	m := testkit.StartMaster(t)
	c := newClient(t, m.Addr(), 0)
	reg, err := unix.Mmap(-1, 0, 3*4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(reg)
	base := uint64(uintptr(unsafe.Pointer(&reg[0])))
	if err := c.Buffers().RegisterBuffer(base+4096, 4096); err != nil { // the middle page only
		t.Fatal(err)
	}
	gone, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	goneAddr := uint64(uintptr(unsafe.Pointer(&gone[0])))
	unix.Munmap(gone)
	for _, tc := range []struct {
		name      string
		ptr, size uint64
		ok        bool
	}{
		{"registered", base + 4096, 4096, true},
		{"never registered", base, 4096, true},
		{"never registered, unaligned", base + 10, 100, true},
		{"straddles the registered start", base + 4000, 200, false},
		{"straddles the registered end", base + 8000, 400, false},
		{"covers the registered buffer", base, 3 * 4096, false},
		{"not mapped", goneAddr, 4096, false},
		{"null", 0, 10, false},
		{"wraps", base, ^uint64(0) - base + 10, false},
		{"past the address space", 1 << 48, 10, false},
	} {
		if dev, ok := c.Buffers().MemoryOf(tc.ptr, tc.size); ok != tc.ok || (ok && dev != -1) {
			t.Errorf("%s: MemoryOf = %d, %v; want ok %v", tc.name, dev, ok, tc.ok)
		}
	}
}
