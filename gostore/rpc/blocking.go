// blocking.go defines blockingConn: a TCP connection read and written with
// blocking system calls on the calling thread.

package rpc

import (
	"errors"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// blockingConn exists for latency. A call from Python arrives through cgo on
// a goroutine locked to the Python thread; when a net.Conn read would block,
// that goroutine parks, the netpoller wakes another thread when the reply
// lands, and that thread hands the goroutine back: two extra thread wake-ups
// per RPC, which measured 2–5× the whole round trip of a small get on these
// machines. A blocking read instead sleeps in the kernel on the caller's own
// thread and is woken once, directly, as a C client would be. The Go
// runtime lets other goroutines run meanwhile (the thread is in a syscall).
//
// Deadlines become SO_RCVTIMEO/SO_SNDTIMEO (two setsockopt calls when the
// deadline moves, which is every call in practice). They bound each system
// call rather than the whole frame; a frame read takes one or two.
type blockingConn struct {
	fd       int
	mu       sync.Mutex // guards closed against a concurrent Close
	closed   bool
	deadline time.Time
}

// toBlocking takes a connected socket out of the netpoller: the
// descriptor is duplicated, tc closed, and the duplicate switched to
// blocking mode.
func toBlocking(tc *net.TCPConn) (*blockingConn, error) {
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
	return &blockingConn{fd: fd}, nil
}

// peerClosed reports whether the peer has closed the connection (or reset
// it) while it sat idle: a restarted master left it behind. It peeks
// without blocking and consumes nothing.
func (b *blockingConn) peerClosed() bool {
	var one [1]byte
	for {
		n, _, err := unix.Recvfrom(b.fd, one[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			return false // nothing to read: alive
		case err != nil || n == 0:
			return true // EOF or an error: dead
		}
		return false // unexpected bytes; the frame check will tell
	}
}

// SetDeadline bounds the following reads and writes; zero means none.
func (b *blockingConn) SetDeadline(t time.Time) error {
	if t.Equal(b.deadline) {
		return nil
	}
	b.deadline = t
	var tv unix.Timeval
	if !t.IsZero() {
		d := time.Until(t)
		if d <= 0 {
			d = time.Microsecond
		}
		tv = unix.NsecToTimeval(d.Nanoseconds())
	}
	if err := unix.SetsockoptTimeval(b.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return err
	}
	return unix.SetsockoptTimeval(b.fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv)
}

func (b *blockingConn) Read(p []byte) (int, error) {
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
			return 0, errors.New("connection closed by the master")
		}
		return n, nil
	}
}

func (b *blockingConn) Write(p []byte) (int, error) {
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

func (b *blockingConn) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	return unix.Close(b.fd)
}
