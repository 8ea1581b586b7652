package fileio

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	// QueueDepth is the io_uring ring size and the number of requests a
	// ReadBatch keeps in flight at once.
	QueueDepth = 32
	// Alignment is the O_DIRECT alignment of buffer address, length and offset.
	Alignment = 4096

	// maxChunk caps one submitted transfer (io_uring lengths are uint32 and
	// Linux caps a single read/write at 0x7ffff000 bytes anyway).
	maxChunk = 1 << 30

	// Environment variables read by FromEnv.
	EnvUseURing       = "MOONCAKE_OFFLOAD_USE_URING"
	EnvUseURingLegacy = "MOONCAKE_USE_URING"
)

// Engine performs file I/O for the SSD backends. Implementations: uring
// (giouring, one ring per Engine, guarded by a mutex), and pread/pwrite.
type Engine interface {
	Name() string // "io_uring" or "pread"
	// ReadAt/WriteAt: full transfers or an error (short I/O retried internally).
	ReadAt(f *os.File, p []byte, off int64) error
	WriteAt(f *os.File, p []byte, off int64) error
	// ReadBatch submits up to QueueDepth (32) reads at once and waits for all;
	// errs[i] per request (nil on success). len(errs) == len(reqs).
	ReadBatch(reqs []Request) []error
	Datasync(f *os.File) error
	Close() error
}

// Request is one read of a ReadBatch.
type Request struct {
	File *os.File
	Buf  []byte
	Off  int64
}

// op is one transfer handed to a backend. done counts bytes transferred so far;
// backends resubmit the remainder until done == len(buf) or err != nil. A read
// that reaches end of file sets err to an error wrapping io.ErrUnexpectedEOF and
// leaves done at the bytes actually read.
type op struct {
	fd    int
	buf   []byte
	off   int64
	write bool
	sync  bool // fdatasync; buf unused
	done  int
	err   error
}

// backend is what the two implementations provide; engine adds validation and
// the O_DIRECT bounce rule on top, so both behave identically.
type backend interface {
	name() string
	run(ops []*op) // fills op.done / op.err for every op
	close() error
}

type engine struct {
	b      backend
	closed atomic.Bool
}

func (e *engine) Name() string { return e.b.name() }

func (e *engine) Close() error {
	if e.closed.Swap(true) {
		return nil
	}
	return e.b.close()
}

func errEOF(o *op) error {
	return fmt.Errorf("fileio: read %d of %d bytes at offset %d: %w", o.done, len(o.buf), o.off, io.ErrUnexpectedEOF)
}

// xfer is a user request, possibly redirected through a bounce buffer.
type xfer struct {
	op     op
	user   []byte // caller's buffer when bounced, else nil
	head   int    // offset of the user data inside the bounce buffer
	oldEnd int64  // writes: file size before the write (bounce only)
	f      *os.File
}

func (e *engine) check(f *os.File, off int64) error {
	if e.closed.Load() {
		return os.ErrClosed
	}
	if f == nil {
		return errors.New("fileio: nil file")
	}
	if off < 0 {
		return fmt.Errorf("fileio: negative offset %d", off)
	}
	return nil
}

func isAligned(p []byte, off int64) bool {
	return uintptr(unsafe.Pointer(unsafe.SliceData(p)))%Alignment == 0 &&
		len(p)%Alignment == 0 && off%Alignment == 0
}

// isDirect reports whether fd was opened with O_DIRECT.
func isDirect(fd int) bool {
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	return err == nil && fl&unix.O_DIRECT != 0
}

// prepare builds the transfer for (f, p, off), applying the bounce rule (see
// package doc). For bounced writes it performs the head/tail read-modify-write.
func (e *engine) prepare(f *os.File, p []byte, off int64, write bool) (*xfer, error) {
	fd := int(f.Fd())
	x := &xfer{f: f, op: op{fd: fd, buf: p, off: off, write: write}}
	if isAligned(p, off) || !isDirect(fd) {
		return x, nil
	}
	start := off &^ (Alignment - 1)
	end := roundUp(off + int64(len(p)))
	b := heapAligned(int(end - start))
	x.user, x.head = p, int(off-start)
	x.op.buf, x.op.off = b, start
	if !write {
		return x, nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("fileio: fstat for bounce write: %w", err)
	}
	x.oldEnd = st.Size
	// Read-modify-write of partial head and tail blocks; bytes past EOF stay zero.
	var rmw []*op
	if x.head != 0 && start < st.Size {
		rmw = append(rmw, &op{fd: fd, buf: b[:Alignment], off: start})
	}
	if tail := end - Alignment; off+int64(len(p)) != end && tail < st.Size && (tail != start || len(rmw) == 0) {
		rmw = append(rmw, &op{fd: fd, buf: b[tail-start:], off: tail})
	}
	if len(rmw) > 0 {
		e.b.run(rmw)
		for _, o := range rmw {
			if o.err != nil && !errors.Is(o.err, io.ErrUnexpectedEOF) {
				return nil, fmt.Errorf("fileio: bounce read-modify-write: %w", o.err)
			}
		}
	}
	copy(b[x.head:], p)
	return x, nil
}

// finish turns a completed transfer into the caller's result.
func (x *xfer) finish() error {
	o := &x.op
	if x.user == nil {
		if o.err != nil {
			return o.err
		}
		return nil
	}
	need := x.head + len(x.user)
	if !o.write {
		if o.err != nil && !(errors.Is(o.err, io.ErrUnexpectedEOF) && o.done >= need) {
			if errors.Is(o.err, io.ErrUnexpectedEOF) {
				return fmt.Errorf("fileio: read %d of %d bytes at offset %d: %w",
					max(0, o.done-x.head), len(x.user), o.off+int64(x.head), io.ErrUnexpectedEOF)
			}
			return o.err
		}
		copy(x.user, o.buf[x.head:need])
		return nil
	}
	if o.err != nil {
		return o.err
	}
	want := max(x.oldEnd, o.off+int64(need))
	if o.off+int64(len(o.buf)) > want {
		if err := unix.Ftruncate(o.fd, want); err != nil {
			return fmt.Errorf("fileio: truncate after bounce write: %w", err)
		}
	}
	return nil
}

func (e *engine) rw(f *os.File, p []byte, off int64, write bool) error {
	if err := e.check(f, off); err != nil {
		return err
	}
	if len(p) == 0 {
		return nil
	}
	x, err := e.prepare(f, p, off, write)
	if err != nil {
		return err
	}
	e.b.run([]*op{&x.op})
	err = x.finish()
	runtime.KeepAlive(f)
	return err
}

func (e *engine) ReadAt(f *os.File, p []byte, off int64) error  { return e.rw(f, p, off, false) }
func (e *engine) WriteAt(f *os.File, p []byte, off int64) error { return e.rw(f, p, off, true) }

func (e *engine) ReadBatch(reqs []Request) []error {
	errs := make([]error, len(reqs))
	xs := make([]*xfer, len(reqs))
	ops := make([]*op, 0, len(reqs))
	for i, r := range reqs {
		if errs[i] = e.check(r.File, r.Off); errs[i] != nil || len(r.Buf) == 0 {
			continue
		}
		if xs[i], errs[i] = e.prepare(r.File, r.Buf, r.Off, false); errs[i] == nil {
			ops = append(ops, &xs[i].op)
		}
	}
	if len(ops) > 0 {
		e.b.run(ops)
	}
	for i, x := range xs {
		if x != nil {
			errs[i] = x.finish()
			runtime.KeepAlive(x.f)
		}
	}
	return errs
}

func (e *engine) Datasync(f *os.File) error {
	if err := e.check(f, 0); err != nil {
		return err
	}
	o := &op{fd: int(f.Fd()), sync: true}
	e.b.run([]*op{o})
	runtime.KeepAlive(f)
	if o.err != nil {
		return fmt.Errorf("fileio: fdatasync: %w", o.err)
	}
	return nil
}

func roundUp(n int64) int64 { return (n + Alignment - 1) &^ (Alignment - 1) }

// probeHook, when set (tests), is called by the io_uring probe; a non-nil error
// makes the probe fail as if io_uring were unavailable.
var probeHook func() error

var fallbackLogged atomic.Bool

// New returns the pread engine when useURing is false. When true it creates a
// ring and runs a NOP through it; on any failure it logs (once per process at
// Warn, then at Debug) and returns the pread engine. It never fails merely
// because io_uring is unavailable.
func New(useURing bool) (Engine, error) {
	if useURing {
		u, err := newURing()
		if err == nil {
			return &engine{b: u}, nil
		}
		lvl := slog.LevelDebug
		if !fallbackLogged.Swap(true) {
			lvl = slog.LevelWarn
		}
		slog.Log(context.Background(), lvl, "fileio: io_uring unavailable, falling back to pread/pwrite", "err", err)
	}
	return &engine{b: preadBackend{}}, nil
}

// FromEnv calls New with the setting of MOONCAKE_OFFLOAD_USE_URING, or of the
// legacy MOONCAKE_USE_URING when the former is unset. "true" or "1" (case and
// surrounding space ignored) select io_uring; the default is pread.
func FromEnv() (Engine, error) {
	return New(envUseURing())
}

func envUseURing() bool {
	v, ok := os.LookupEnv(EnvUseURing)
	if !ok {
		v = os.Getenv(EnvUseURingLegacy)
	}
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "true", "1":
		return true
	}
	return false
}
