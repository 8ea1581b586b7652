// conn.go defines Conn and FromTCP.

package blockconn

import (
	"io"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// ErrClosedByPeer is the error of a read that met the end of the stream.
// It is an io.EOF too (errors.Is), so that a caller telling a close from
// other failures (wire.FirstReadError) need not know this package.
var ErrClosedByPeer error = closedByPeer{}

type closedByPeer struct{}

func (closedByPeer) Error() string        { return "connection closed by the peer" }
func (closedByPeer) Is(target error) bool { return target == io.EOF }

// Conn is a blocking TCP connection; see the package documentation.
type Conn struct {
	fd     int
	mu     sync.Mutex // guards closed against a concurrent Close
	closed bool
	bound  time.Duration // the socket's SO_RCVTIMEO/SO_SNDTIMEO; 0: none, -1: unknown
	iov    [][]byte      // Writev's scratch
	spin   time.Duration
}

// DefaultSpin is how long a read polls the socket before it sleeps, unless
// the owner says otherwise (SetSpin). A sleeping thread is woken by the
// kernel when the answer lands, which on a virtual machine whose idle
// CPUs halt costs tens of microseconds. Measured on this project's 2-core
// machine (halt polling off), a 4 KiB get over TCP took 137-152 µs at the
// median sleeping at once, 91-93 µs polling for up to 40, 60 or 100 µs
// (the same: an answer that comes at all comes in 40), and 113-116 µs when
// a fruitless spin turned polling off for the next 8 reads. A reply that
// takes longer costs one spin of CPU.
const DefaultSpin = 60 * time.Microsecond

// FromTCP takes a connected socket out of the netpoller: the descriptor is
// duplicated, tc closed, and the duplicate switched to blocking mode. Its
// reads spin for DefaultSpin.
func FromTCP(tc *net.TCPConn) (*Conn, error) {
	defer tc.Close()
	raw, err := tc.SyscallConn()
	if err != nil {
		return nil, err
	}
	fd := -1
	var dupErr error
	if err := raw.Control(func(s uintptr) { fd, dupErr = unix.Dup(int(s)) }); err != nil {
		return nil, err
	}
	if dupErr != nil {
		return nil, dupErr
	}
	unix.CloseOnExec(fd)
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return &Conn{fd: fd, spin: DefaultSpin}, nil
}

// SetSpin sets how long each read polls before it sleeps; 0 or less never
// polls.
func (b *Conn) SetSpin(d time.Duration) { b.spin = d }

// FD is the socket's descriptor, for tests that poll it.
func (b *Conn) FD() int { return b.fd }

// PeerClosed reports whether the peer has closed the connection (or reset
// it) while it sat idle: a restarted server left it behind. It peeks
// without blocking and consumes nothing.
func (b *Conn) PeerClosed() bool {
	n, err := b.peek()
	return err != unix.EAGAIN && (err != nil || n == 0)
}

// Readable reports whether a read would return at once, because bytes
// have arrived or the stream has ended. It peeks without blocking and
// consumes nothing.
func (b *Conn) Readable() bool {
	_, err := b.peek()
	return err != unix.EAGAIN
}

// peek looks for one byte without blocking: (1, nil) when there is one,
// (0, nil) at the end of the stream, EAGAIN when nothing has come.
func (b *Conn) peek() (int, error) {
	var one [1]byte
	for {
		n, _, err := unix.Recvfrom(b.fd, one[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		if err != unix.EINTR {
			return n, err
		}
	}
}

// SetDeadline bounds the following reads and writes; zero means none.
//
// The socket's timeouts (which bound each system call, see the package
// text) are set a 128th short of the time to t, and set again only when
// that time is shorter than them, or longer by more than a 64th: a
// caller that sets a deadline of now + 30 s before every call (the
// master's RPC client, the lane) makes the two setsockopt calls only
// now and then instead of on every call (a few microseconds of a 4 KiB
// get's hundred). A timeout kept that way is never longer than the time
// to t (but for the kernel rounding it up to a clock tick), and at most
// a 64th shorter.
func (b *Conn) SetDeadline(t time.Time) error {
	var d time.Duration // 0: none
	if !t.IsZero() {
		d = max(time.Until(t), time.Microsecond)
	}
	switch {
	case d == 0 && b.bound == 0:
		return nil // none, as now
	case d > 0 && b.bound > 0 && b.bound <= d && d-b.bound <= d/64:
		return nil
	}
	bound := d - d/128
	tv := unix.NsecToTimeval(bound.Nanoseconds())
	if err := unix.SetsockoptTimeval(b.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		b.bound = -1 // unknown: set again next time
		return err
	}
	if err := unix.SetsockoptTimeval(b.fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv); err != nil {
		b.bound = -1
		return err
	}
	b.bound = bound
	return nil
}

// Read reads what is there, at least one byte; a timeout is
// os.ErrDeadlineExceeded, the end of the stream ErrClosedByPeer. It polls
// for up to the spin first (see DefaultSpin), then sleeps in the kernel.
func (b *Conn) Read(p []byte) (int, error) {
	if b.spin > 0 && len(p) > 0 {
		if n, done, err := b.spinRead(p); done {
			return n, err
		}
	}
	for {
		n, err := unix.Read(b.fd, p)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			return 0, os.ErrDeadlineExceeded
		case err != nil:
			return 0, err
		case n == 0 && len(p) > 0:
			return 0, ErrClosedByPeer
		}
		return n, nil
	}
}

// spinRead polls for data until the spin ends; done is false when none
// came.
func (b *Conn) spinRead(p []byte) (n int, done bool, err error) {
	n, err, done = recvUntil(b.fd, p, time.Now().Add(b.spin))
	if done && err == nil && n == 0 {
		err = ErrClosedByPeer
	}
	return n, done, err
}

// recvUntil reads what socket fd holds into p without blocking, trying
// again until end and giving the CPU to any thread that can run between
// tries (a zero end tries once); got is false when nothing came by then.
// With got, n 0 and a nil err is the end of the stream. Both sides' polls
// run on it: Conn's reply reads and Polled's request reads.
func recvUntil(fd int, p []byte, end time.Time) (n int, err error, got bool) {
	for {
		n, _, err := unix.Recvfrom(fd, p, unix.MSG_DONTWAIT)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			if time.Now().Before(end) {
				yield()
				continue
			}
			return 0, nil, false
		case err != nil:
			return 0, err, true
		}
		return n, nil, true
	}
}

func yield() { unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }

// ReadFull fills p.
func (b *Conn) ReadFull(p []byte) error {
	for len(p) > 0 {
		n, err := b.Read(p)
		if err != nil {
			return err
		}
		p = p[n:]
	}
	return nil
}

// Write writes all of p.
func (b *Conn) Write(p []byte) (int, error) {
	written := 0
	for written < len(p) {
		n, err := unix.Write(b.fd, p[written:])
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			return written, os.ErrDeadlineExceeded
		case err != nil:
			return written, err
		}
		written += n
	}
	return written, nil
}

// Writev writes every byte of bufs, in order, with as few system calls as
// the socket allows (one, when its buffer has room). Empty parts are
// skipped. bufs is not modified.
func (b *Conn) Writev(bufs ...[]byte) error {
	iov := b.iov[:0]
	for _, p := range bufs {
		if len(p) > 0 {
			iov = append(iov, p)
		}
	}
	all := iov
	defer func() { clear(all); b.iov = all[:0] }()
	for len(iov) > 0 {
		n, err := unix.Writev(b.fd, iov[:min(len(iov), maxIov)])
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			return os.ErrDeadlineExceeded
		case err != nil:
			return err
		}
		for n > 0 {
			if n < len(iov[0]) {
				iov[0] = iov[0][n:]
				break
			}
			n -= len(iov[0])
			iov = iov[1:]
		}
	}
	return nil
}

// maxIov stays under the kernel's IOV_MAX (1024).
const maxIov = 1024

// Shutdown ends both directions of the connection: a read or write blocked
// in another goroutine returns at once. The socket stays open until Close.
func (b *Conn) Shutdown() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.closed {
		_ = unix.Shutdown(b.fd, unix.SHUT_RDWR)
	}
}

// Close closes the socket once; later calls do nothing.
func (b *Conn) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	return unix.Close(b.fd)
}
