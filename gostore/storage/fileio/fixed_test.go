package fileio

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	testChunk  = 64 << 10 // fixedChunk during these tests
	testRegion = 1 << 20  // registered bytes (16 chunks)
	testAlloc  = testRegion + testChunk
)

// smallChunks lowers fixedChunk so chunk boundaries are cheap to reach.
func smallChunks(t *testing.T) {
	old := fixedChunk
	fixedChunk = testChunk
	t.Cleanup(func() { fixedChunk = old })
}

// anonMem and memfdMem return testAlloc bytes of page-aligned memory; the
// first testRegion bytes get registered, the rest is mapped memory just past
// the region. Call them before creating the engine, so that the engine's
// Close (a later t.Cleanup) runs before the unmap.
func anonMem(t *testing.T) []byte {
	m := AlignedBuffer(testAlloc, 0)
	t.Cleanup(func() { FreeAligned(m) })
	return m
}

func memfdMem(t *testing.T) []byte {
	fd, err := unix.MemfdCreate("fileio-fixed-test", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd) // the mapping keeps the memory
	if err := unix.Ftruncate(fd, testAlloc); err != nil {
		t.Fatal(err)
	}
	m, err := unix.Mmap(fd, 0, testAlloc, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(m) })
	return m
}

func poison(b []byte) {
	for i := range b {
		b[i] = 0xA5
	}
}

func isPoison(b []byte) bool {
	for _, c := range b {
		if c != 0xA5 {
			return false
		}
	}
	return true
}

// counterDelta runs fn and returns how much Counters moved.
func counterDelta(e Engine, fn func()) (fixed, plain uint64) {
	f0, p0 := e.Counters()
	fn()
	f1, p1 := e.Counters()
	return f1 - f0, p1 - p0
}

func TestFixedReads(t *testing.T) {
	for _, kind := range []string{"anon", "memfd"} {
		t.Run(kind, func(t *testing.T) {
			smallChunks(t)
			mem := anonMem
			if kind == "memfd" {
				mem = memfdMem
			}
			testFixedReads(t, mem(t))
		})
	}
}

func testFixedReads(t *testing.T, alloc []byte) {
	e, p := newURing(t)
	logs := captureLog(t)
	const fileSize = 2 << 20
	data := pattern(fileSize, 21)
	f := writeFile(t, "fx", data)
	region := alloc[:testRegion]
	if err := e.RegisterFixed(region); err != nil {
		t.Fatal(err)
	}

	// read reads len(dst) bytes at off into dst (inside alloc), and checks the
	// bytes, that nothing around dst was touched, and which path it took.
	read := func(name string, dst []byte, off int64, wantFixed, wantPlain uint64) {
		t.Helper()
		poison(alloc)
		var err error
		fx, pl := counterDelta(e, func() { err = e.ReadAt(f, dst, off) })
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !bytes.Equal(dst, data[off:off+int64(len(dst))]) {
			t.Fatalf("%s: bytes differ", name)
		}
		start := uintptr(unsafe.Pointer(&dst[0])) - uintptr(unsafe.Pointer(&alloc[0]))
		if !isPoison(alloc[:start]) || !isPoison(alloc[start+uintptr(len(dst)):]) {
			t.Fatalf("%s: bytes outside the destination were written", name)
		}
		if fx != wantFixed || pl != wantPlain {
			t.Fatalf("%s: %d fixed and %d plain submissions, want %d and %d", name, fx, pl, wantFixed, wantPlain)
		}
	}

	read("inside chunk 0, unaligned", region[100:30100], 12345, 1, 0)
	read("whole last chunk", region[testRegion-testChunk:], 4096, 1, 0)
	read("straddles chunks 1 and 2", region[2*testChunk-1000:2*testChunk+1000], 777, 0, 1)
	read("crosses the region's end", alloc[testRegion-100:testRegion+100], 5, 0, 1)
	read("just past the region", alloc[testRegion+10:testRegion+1000], 5, 0, 1)
	heap := make([]byte, 5000)
	poison(alloc)
	if fx, pl := counterDelta(e, func() {
		if err := e.ReadAt(f, heap, 3); err != nil || !bytes.Equal(heap, data[3:5003]) {
			t.Fatalf("heap read: %v", err)
		}
	}); fx != 0 || pl != 1 {
		t.Fatalf("heap read: %d fixed %d plain, want 0 and 1", fx, pl)
	}

	// Resubmission: with 1000-byte submissions a 60000-byte read is 60
	// partial transfers, each with an advanced address in the same buffer.
	maxSubmit = 1000
	read("resubmitted in pieces", region[3*testChunk+7:3*testChunk+60007], 99999, 60, 0)
	maxSubmit = maxChunk

	// A batch wider than the queue, every piece in some chunk.
	poison(alloc)
	reqs := make([]Request, 40)
	for i := range reqs {
		at := (i%16)*testChunk + (i*997)%(testChunk-5000)
		reqs[i] = Request{File: f, Buf: region[at : at+5000], Off: int64(i) * 40000}
	}
	var errs []error
	fx, pl := counterDelta(e, func() { errs = e.ReadBatch(reqs) })
	for i, err := range errs {
		if err != nil || !bytes.Equal(reqs[i].Buf, data[reqs[i].Off:reqs[i].Off+5000]) {
			t.Fatalf("batch req %d: %v", i, err)
		}
	}
	if fx != 40 || pl != 0 {
		t.Fatalf("batch: %d fixed %d plain, want 40 and 0", fx, pl)
	}

	// A fixed read that hits EOF: the first submission is short, the
	// resubmission (also fixed) reads 0 bytes.
	poison(alloc)
	var err error
	fx, pl = counterDelta(e, func() { err = e.ReadAt(f, region[:8192], fileSize-100) })
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("fixed read past EOF: %v", err)
	}
	if !bytes.Equal(region[:100], data[fileSize-100:]) || !isPoison(region[100:8192]) {
		t.Fatal("fixed read past EOF: the bytes before EOF are wrong")
	}
	if fx != 2 || pl != 0 {
		t.Fatalf("fixed read past EOF: %d fixed %d plain, want 2 and 0", fx, pl)
	}

	u := checkout(t, p)
	if u.fixed == nil {
		t.Fatal("ring has no registered region")
	}
	u.put()
	if strings.Contains(logs.String(), "registration failed") {
		t.Fatalf("registration failed: %s", logs.String())
	}
}

// O_DIRECT reads (the case fixed buffers are for) into the region.
func TestFixedReadsDirect(t *testing.T) {
	smallChunks(t)
	alloc := anonMem(t)
	e, _ := newURing(t)
	f := openDirect(t, "fd")
	data := pattern(256<<10, 22)
	if _, err := f.WriteAt(alignedCopy(data), 0); err != nil {
		t.Fatal(err)
	}
	if err := e.RegisterFixed(alloc[:testRegion]); err != nil {
		t.Fatal(err)
	}
	poison(alloc)
	dst := alloc[5*testChunk : 5*testChunk+32<<10]
	fx, pl := counterDelta(e, func() {
		if err := e.ReadAt(f, dst, 8192); err != nil {
			t.Fatal(err)
		}
	})
	if !bytes.Equal(dst, data[8192:8192+32<<10]) {
		t.Fatal("O_DIRECT fixed read: bytes differ")
	}
	if fx != 1 || pl != 0 {
		t.Fatalf("O_DIRECT read: %d fixed %d plain, want 1 and 0", fx, pl)
	}
	// Unaligned: bounced through a heap buffer, so a plain read.
	poison(alloc)
	dst = alloc[testChunk+1 : testChunk+1+5000]
	fx, pl = counterDelta(e, func() {
		if err := e.ReadAt(f, dst, 4097); err != nil {
			t.Fatal(err)
		}
	})
	if !bytes.Equal(dst, data[4097:4097+5000]) {
		t.Fatal("bounced read: bytes differ")
	}
	if fx != 0 || pl != 1 {
		t.Fatalf("bounced read: %d fixed %d plain, want 0 and 1", fx, pl)
	}
}

// Every ring registers the region: one checked out during RegisterFixed on its
// next use, and ones created later at creation.
func TestFixedAllRings(t *testing.T) {
	smallChunks(t)
	alloc := anonMem(t)
	e, p := newURing(t)
	data := pattern(1<<20, 23)
	f := writeFile(t, "far", data)
	first := checkout(t, p) // created before the region exists
	if err := e.RegisterFixed(alloc[:testRegion]); err != nil {
		t.Fatal(err)
	}
	if first.fixed != nil || first.fixedTried {
		t.Fatal("checked-out ring touched by RegisterFixed")
	}
	dst := alloc[:4096]
	if fx, _ := counterDelta(e, func() {
		if err := e.ReadAt(f, dst, 0); err != nil {
			t.Fatal(err)
		}
	}); fx != 1 {
		t.Fatal("a ring created after RegisterFixed did not read fixed")
	}
	first.put() // now on top of the idle stack: the next call uses it
	if fx, _ := counterDelta(e, func() {
		if err := e.ReadAt(f, dst, 4096); err != nil || !bytes.Equal(dst, data[4096:8192]) {
			t.Fatal(err)
		}
	}); fx != 1 || first.fixed == nil {
		t.Fatal("the older ring did not register the region on its next use")
	}

	// Concurrent fixed reads over all rings, each into its own slice.
	const workers, per = 8, 30
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	fx, pl := counterDelta(e, func() {
		for g := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				mine := alloc[g*2*testChunk : g*2*testChunk+testChunk]
				for i := range per {
					off := int64((g*per + i) * 1000)
					if err := e.ReadAt(f, mine[:8000], off); err != nil || !bytes.Equal(mine[:8000], data[off:off+8000]) {
						errc <- fmt.Errorf("worker %d read %d: %v", g, i, err)
						return
					}
				}
			}()
		}
		wg.Wait()
	})
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if fx != workers*per || pl != 0 {
		t.Fatalf("concurrent: %d fixed %d plain, want %d and 0 (%d rings)", fx, pl, workers*per, p.created.Load())
	}
}

// A ring that cannot register the region reads plainly and correctly; a later
// ring that can register reads fixed.
func TestFixedRegistrationFailure(t *testing.T) {
	smallChunks(t)
	alloc := anonMem(t)
	e, p := newURing(t)
	logs := captureLog(t)
	data := pattern(200000, 24)
	f := writeFile(t, "rf", data)
	registerHook = func() error { return syscall.ENOMEM }
	t.Cleanup(func() { registerHook = nil })
	if err := e.RegisterFixed(alloc[:testRegion]); err != nil {
		t.Fatalf("RegisterFixed must not report a ring's registration failure: %v", err)
	}
	for i := range 3 {
		poison(alloc)
		dst := alloc[1000 : 1000+50000]
		fx, pl := counterDelta(e, func() {
			if err := e.ReadAt(f, dst, int64(i)*333); err != nil {
				t.Fatal(err)
			}
		})
		if !bytes.Equal(dst, data[i*333:i*333+50000]) || !isPoison(alloc[:1000]) {
			t.Fatalf("read %d after failed registration: bytes differ", i)
		}
		if fx != 0 || pl != 1 {
			t.Fatalf("read %d: %d fixed %d plain, want 0 and 1", i, fx, pl)
		}
	}
	if c := strings.Count(logs.String(), "level=WARN"); c != 1 || !strings.Contains(logs.String(), "registration failed") {
		t.Fatalf("want one registration warning, got: %s", logs.String())
	}
	failed := checkout(t, p)
	defer failed.put()
	if failed.fixed != nil || !failed.fixedTried {
		t.Fatal("ring state after failed registration is wrong")
	}
	registerHook = nil
	dst := alloc[:4096]
	if fx, _ := counterDelta(e, func() { // runs on a new ring
		if err := e.ReadAt(f, dst, 0); err != nil || !bytes.Equal(dst, data[:4096]) {
			t.Fatal(err)
		}
	}); fx != 1 {
		t.Fatal("a new ring did not register after an earlier ring's failure")
	}
}

// After a ring breaks, its replacement registers the region at creation.
func TestFixedAfterBrokenRing(t *testing.T) {
	smallChunks(t)
	alloc := anonMem(t)
	e, _ := newURing(t)
	data := pattern(100000, 25)
	f := writeFile(t, "fb", data)
	if err := e.RegisterFixed(alloc[:testRegion]); err != nil {
		t.Fatal(err)
	}
	injected := errors.New("injected")
	submitHook = func() error { return injected }
	if err := e.ReadAt(f, alloc[:100], 0); !errors.Is(err, injected) {
		t.Fatalf("read on the broken ring: %v", err)
	}
	submitHook = nil
	poison(alloc)
	fx, _ := counterDelta(e, func() {
		if err := e.ReadAt(f, alloc[:20000], 50); err != nil {
			t.Fatal(err)
		}
	})
	if !bytes.Equal(alloc[:20000], data[50:20050]) || fx != 1 {
		t.Fatalf("read on the replacement ring: fixed %d, bytes equal %v", fx, bytes.Equal(alloc[:20000], data[50:20050]))
	}
}

func TestRegisterFixedErrors(t *testing.T) {
	for _, e := range engines(t) {
		t.Run(e.Name(), func(t *testing.T) {
			mem := AlignedBuffer(3*4096, 0)
			defer FreeAligned(mem)
			if err := e.RegisterFixed(nil); err == nil {
				t.Fatal("empty region accepted")
			}
			if err := e.RegisterFixed(mem[1:]); err == nil {
				t.Fatal("unaligned region accepted")
			}
			if err := e.RegisterFixed(mem); err != nil {
				t.Fatal(err)
			}
			if err := e.RegisterFixed(mem); err == nil {
				t.Fatal("second RegisterFixed accepted")
			}
		})
	}
}

// The pread engine accepts the region and counts its reads as plain.
func TestPreadCounters(t *testing.T) {
	e, err := New(false)
	if err != nil {
		t.Fatal(err)
	}
	mem := AlignedBuffer(1<<20, 0)
	defer FreeAligned(mem)
	defer e.Close()
	if err := e.RegisterFixed(mem); err != nil {
		t.Fatal(err)
	}
	data := pattern(100000, 26)
	f := writeFile(t, "pc", data)
	fx, pl := counterDelta(e, func() {
		if err := e.ReadAt(f, mem[:50000], 7); err != nil || !bytes.Equal(mem[:50000], data[7:50007]) {
			t.Fatal(err)
		}
		for i, err := range e.ReadBatch([]Request{{File: f, Buf: mem[4096:8192], Off: 0}, {File: f, Buf: make([]byte, 10), Off: 99}}) {
			if err != nil {
				t.Fatal(i, err)
			}
		}
	})
	if fx != 0 || pl != 3 {
		t.Fatalf("pread engine: %d fixed %d plain, want 0 and 3", fx, pl)
	}
}

// The real chunking, on a reserved (never touched) 1.5 GiB address range.
func TestFixedRegionChunks(t *testing.T) {
	const size = 3<<29 + 12345 // 1.5 GiB and a bit: 6 full chunks and a partial
	m, err := unix.Mmap(-1, 0, size, unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		t.Skip("cannot reserve address space:", err)
	}
	defer unix.Munmap(m)
	const chunk = 256 << 20
	r := newFixedRegion(m, fixedChunk)
	if fixedChunk != chunk {
		t.Fatalf("fixedChunk is %d, want 256 MiB", fixedChunk)
	}
	if len(r.iovs) != 7 {
		t.Fatalf("%d iovecs, want 7", len(r.iovs))
	}
	base := uintptr(unsafe.Pointer(&m[0]))
	for i, iov := range r.iovs {
		want := uint64(chunk)
		if i == 6 {
			want = size - 6*chunk
		}
		if uintptr(unsafe.Pointer(iov.Base)) != base+uintptr(i)*chunk || iov.Len != want {
			t.Fatalf("iovec %d: base +%d len %d", i, uintptr(unsafe.Pointer(iov.Base))-base, iov.Len)
		}
	}
	cases := []struct {
		off  uintptr
		n    uint32
		want int
	}{
		{0, 4096, 0},
		{chunk - 4096, 4096, 0},
		{chunk - 4096, 4097, -1}, // straddles 0|1
		{chunk, 1 << 20, 1},
		{5*chunk + 1, chunk - 1, 5},
		{5*chunk + 1, chunk, -1},
		{6 * chunk, size - 6*chunk, 6},
		{6 * chunk, size - 6*chunk + 1, -1}, // past the end
		{size, 1, -1},
	}
	for _, c := range cases {
		if got := r.index(base+c.off, c.n); got != c.want {
			t.Errorf("index(+%d, %d) = %d, want %d", c.off, c.n, got, c.want)
		}
	}
	if got := r.index(base-1, 1); got != -1 {
		t.Errorf("index before the region = %d", got)
	}
	if got := (*fixedRegion)(nil).index(base, 1); got != -1 {
		t.Errorf("nil region index = %d", got)
	}
}

// RegisterFixed advises the region MADV_NOHUGEPAGE before rings pin it.
func TestRegisterFixedNoHugePage(t *testing.T) {
	const n = 4 << 20
	m, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(m) })
	e, _ := newURing(t)
	if hasNoHugePage(t, m) {
		t.Fatal("fresh mapping already has MADV_NOHUGEPAGE")
	}
	if err := e.RegisterFixed(m); err != nil {
		t.Fatal(err)
	}
	if !hasNoHugePage(t, m) {
		t.Fatal("region not advised MADV_NOHUGEPAGE")
	}
}

// hasNoHugePage reports whether the mapping starting at m carries the "nh"
// VmFlag in /proc/self/smaps.
func hasNoHugePage(t *testing.T, m []byte) bool {
	t.Helper()
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Skip("no /proc/self/smaps:", err)
	}
	start := fmt.Sprintf("%x-", uintptr(unsafe.Pointer(&m[0])))
	in := false
	for line := range strings.SplitSeq(string(smaps), "\n") {
		if strings.HasPrefix(line, start) {
			in = true
		}
		if in && strings.HasPrefix(line, "VmFlags:") {
			return slices.Contains(strings.Fields(line)[1:], "nh")
		}
	}
	t.Fatal("mapping not found in /proc/self/smaps")
	return false
}
