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
	// QueueDepth is the size of each io_uring ring and the number of
	// requests a ReadBatch keeps in flight at once.
	QueueDepth = 32
	// Alignment is the O_DIRECT alignment of buffer address, length and offset.
	Alignment = 4096

	// maxChunk caps one submitted transfer (io_uring lengths are uint32 and
	// Linux caps a single read/write at 0x7ffff000 bytes anyway).
	maxChunk = 1 << 30
)

// Engine performs file I/O for the SSD backends. Implementations: uring
// (giouring, a pool of rings, one checked out per call) and pread/pwrite.
type Engine interface {
	Name() string // "io_uring" or "pread"
	// ReadAt/WriteAt: full transfers or an error (short I/O retried internally).
	ReadAt(f *os.File, p []byte, off int64) error
	WriteAt(f *os.File, p []byte, off int64) error
	// ReadBatch submits up to QueueDepth (32) reads at once and waits for all;
	// errs[i] per request (nil on success). len(errs) == len(reqs).
	ReadBatch(reqs []Request) []error
	Datasync(f *os.File) error
	// RegisterFixed declares mem as the fixed-buffer region: reads landing
	// entirely inside one registered chunk of it use IORING_OP_READ_FIXED.
	// mem must be page aligned and stay mapped until Close returns. At most
	// one call per Engine; a failed registration only costs the fast path.
	RegisterFixed(mem []byte) error
	// Counters reports how many read submissions used READ_FIXED and how many
	// a plain read (io_uring SQEs, or pread calls for the pread engine).
	Counters() (fixedReads, plainReads uint64)
	// Close waits for calls in flight, releases the rings, and makes later
	// calls fail with os.ErrClosed.
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
//
// Every Engine call checks out one runner with get, runs all its ops on it
// (including a bounced write's read-modify-write) and hands it back with put,
// so a uring runner (one ring) is never shared by two calls at once.
type backend interface {
	name() string
	get() (runner, error) // os.ErrClosed after close
	put(runner)
	setFixed(mem []byte) // called at most once, with validated memory
	close() error        // idempotent; waits for checked-out runners
}

// runner executes ops; it fills op.done / op.err for every op.
type runner interface {
	run(ops []*op)
}

// stats backs Engine.Counters. Runners add their per-call totals once, so the
// shared cache line is touched once per call, not once per submission (the
// parallel pread runner adds once per request, each a syscall anyway).
type stats struct {
	fixedReads, plainReads atomic.Uint64
}

type engine struct {
	b        backend
	st       *stats
	closed   atomic.Bool
	fixedSet atomic.Bool
}

func (e *engine) Name() string { return e.b.name() }

// Close is idempotent; every call returns once the runners are released.
func (e *engine) Close() error {
	e.closed.Store(true)
	return e.b.close()
}

func (e *engine) Counters() (fixedReads, plainReads uint64) {
	return e.st.fixedReads.Load(), e.st.plainReads.Load()
}

// RegisterFixed validates mem and hands it to the backend. The pread backend
// ignores the region, but the checks are shared so that a caller's misuse
// fails the same way whichever engine New picked.
func (e *engine) RegisterFixed(mem []byte) error {
	if e.closed.Load() {
		return os.ErrClosed
	}
	if len(mem) == 0 {
		return errors.New("fileio: RegisterFixed: empty region")
	}
	if uintptr(unsafe.Pointer(unsafe.SliceData(mem)))%uintptr(os.Getpagesize()) != 0 {
		return errors.New("fileio: RegisterFixed: region is not page aligned")
	}
	if e.fixedSet.Swap(true) {
		return errors.New("fileio: RegisterFixed: a fixed-buffer region is already registered")
	}
	e.b.setFixed(mem)
	return nil
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
// package doc). For bounced writes it performs the head/tail read-modify-write
// on r, the runner of the calling Engine method (r is unused for reads).
func prepare(r runner, f *os.File, p []byte, off int64, write bool) (*xfer, error) {
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
		r.run(rmw)
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
	r, err := e.b.get()
	if err != nil {
		return err
	}
	x, err := prepare(r, f, p, off, write)
	if err == nil {
		r.run([]*op{&x.op})
	}
	e.b.put(r) // finish needs no ring; let another call have it now
	if err != nil {
		return err
	}
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
		// Reads never do read-modify-write, so no runner is needed yet.
		if xs[i], errs[i] = prepare(nil, r.File, r.Buf, r.Off, false); errs[i] == nil {
			ops = append(ops, &xs[i].op)
		}
	}
	if len(ops) > 0 {
		r, err := e.b.get()
		if err != nil {
			for _, o := range ops {
				o.err = err
			}
		} else {
			r.run(ops)
			e.b.put(r)
		}
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
	r, err := e.b.get()
	if err != nil {
		return err
	}
	o := &op{fd: int(f.Fd()), sync: true}
	r.run([]*op{o})
	e.b.put(r)
	runtime.KeepAlive(f)
	if o.err != nil {
		return fmt.Errorf("fileio: fdatasync: %w", o.err)
	}
	return nil
}

func roundUp(n int64) int64 { return (n + Alignment - 1) &^ (Alignment - 1) }

// probeHook, when set (tests), is called before every ring is created (the
// probe at New and the extra rings of the pool); a non-nil error makes that
// creation fail as if io_uring were unavailable.
var probeHook func() error

var fallbackLogged atomic.Bool

// logOnce logs msg at Warn the first time flag is set and at Debug afterwards,
// so a persistent condition does not flood the log.
func logOnce(flag *atomic.Bool, msg string, err error) {
	lvl := slog.LevelDebug
	if !flag.Swap(true) {
		lvl = slog.LevelWarn
	}
	slog.Log(context.Background(), lvl, msg, "err", err)
}

// New returns the pread engine when useURing is false. When true it creates a
// first ring and runs a NOP through it; on any failure it logs (once per
// process at Warn, then at Debug) and returns the pread engine. It never fails
// merely because io_uring is unavailable.
func New(useURing bool) (Engine, error) {
	st := new(stats)
	if useURing {
		p, err := newURingPool(st)
		if err == nil {
			return &engine{b: p, st: st}, nil
		}
		logOnce(&fallbackLogged, "fileio: io_uring unavailable, falling back to pread/pwrite", err)
	}
	return &engine{b: preadBackend{st: st}, st: st}, nil
}

// UseURing interprets a value of the io_uring setting (the SSD tier's
// MOONCAKE_OFFLOAD_USE_URING, which the caller reads; the empty string
// means unset): io_uring is the default; "false", "0", "no" or "off" (case
// and surrounding space ignored) select pread. Unrecognised values are
// logged and give the default, true.
func UseURing(v string) bool {
	use, known := parseUseURing(v)
	if !known {
		slog.Warn("fileio: unrecognised io_uring setting, using the default (io_uring)", "value", v)
	}
	return use
}

// parseUseURing reports the setting v selects and whether v was recognised.
func parseUseURing(v string) (use, known bool) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "", "true", "1", "yes", "on":
		return true, true
	case "false", "0", "no", "off":
		return false, true
	}
	return true, false
}
