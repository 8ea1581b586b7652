// segment_test.go tests LocalSegment, NewLocalBuffer and HostID.

package transfer

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

func TestLocalSegmentSharedMapping(t *testing.T) {
	const size = 1<<20 + 123
	seg, err := NewLocalSegment("seg-test", size)
	if err != nil {
		t.Fatal(err)
	}
	if seg.Size() != size || len(seg.Bytes()) != size {
		t.Fatalf("size %d, len %d", seg.Size(), len(seg.Bytes()))
	}
	prefix := fmt.Sprintf("/proc/%d/fd/", os.Getpid())
	if !strings.HasPrefix(seg.ShmPath(), prefix) {
		t.Fatalf("ShmPath %q", seg.ShmPath())
	}
	want := pattern(1, size)
	copy(seg.Bytes(), want)

	fd, err := unix.Open(seg.ShmPath(), unix.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	other, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	unix.Close(fd)
	if err != nil {
		t.Fatal(err)
	}
	if d := firstDiff(other, want); d != "" {
		t.Fatalf("second mapping differs: %s", d)
	}
	copy(other[size-100:], "written through the second mapping")
	if !bytes.HasPrefix(seg.Bytes()[size-100:], []byte("written through the second mapping")) {
		t.Fatal("write through the second mapping not visible in the first")
	}
	if err := unix.Munmap(other); err != nil {
		t.Fatal(err)
	}
	if err := seg.Close(); err != nil {
		t.Fatal(err)
	}
	if err := seg.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := os.Stat(seg.ShmPath()); err == nil {
		t.Fatal("memfd still open after Close")
	}
}

func TestLocalSegmentBadSize(t *testing.T) {
	if _, err := NewLocalSegment("zero", 0); err == nil {
		t.Fatal("size 0 accepted")
	}
	if _, err := NewLocalBuffer(1 << 63); err == nil {
		t.Fatal("size 2^63 accepted")
	}
}

func TestLocalBuffer(t *testing.T) {
	b, err := NewLocalBuffer(3 << 20)
	if err != nil {
		t.Fatal(err)
	}
	if b.ShmPath() != "" || len(b.Bytes()) != 3<<20 {
		t.Fatalf("path %q len %d", b.ShmPath(), len(b.Bytes()))
	}
	copy(b.Bytes(), pattern(2, 3<<20))
	if d := firstDiff(b.Bytes(), pattern(2, 3<<20)); d != "" {
		t.Fatal(d)
	}
	if b.Close() != nil || b.Close() != nil {
		t.Fatal("Close failed")
	}
}

func TestHostID(t *testing.T) {
	id := HostID()
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		t.Skip(err)
	}
	netns, _ := os.Readlink("/proc/self/ns/net")
	if !strings.HasPrefix(id, strings.TrimSpace(string(boot))) || !strings.Contains(id, netns) {
		t.Fatalf("HostID %q lacks boot id or netns %q", id, netns)
	}
	if HostID() != id {
		t.Fatal("HostID not stable")
	}
}

// Segments and buffers are populated at creation, in chunks spread over
// several goroutines: every page is resident when the constructor returns
// (taken up front), and reads as zero.
func TestPopulatedInChunks(t *testing.T) {
	old := populateChunk
	populateChunk = 1 << 20
	t.Cleanup(func() { populateChunk = old })
	const size = 16<<20 + 4096 // a last chunk of one page
	seg, err := NewLocalSegment("populate-test", size)
	if err != nil {
		t.Fatal(err)
	}
	defer seg.Close()
	buf, err := NewLocalBuffer(size)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Close()
	page := os.Getpagesize()
	for _, m := range [][]byte{seg.Bytes(), buf.Bytes()} {
		vec := make([]byte, (len(m)+page-1)/page)
		if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)),
			uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
			t.Fatal(e)
		}
		for i, v := range vec {
			if v&1 == 0 {
				t.Fatalf("page %d of %d not resident after creation", i, len(vec))
			}
		}
		for i := 0; i < len(m); i += page {
			if m[i] != 0 {
				t.Fatalf("byte %d is %d", i, m[i])
			}
		}
	}
}
