package fileio

import (
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"syscall"
	"unsafe"

	"github.com/pawelgaczynski/giouring"
)

// uringBackend owns one io_uring ring (QueueDepth SQ entries, default flags).
// Features used: plain IORING_OP_READ / IORING_OP_WRITE / IORING_OP_FSYNC
// (DATASYNC) and IORING_OP_NOP for the probe. Not used: fixed (registered)
// buffers, fixed files, SQPOLL, IOPOLL. The mutex serialises users of the ring.
type uringBackend struct {
	mu     sync.Mutex
	ring   *giouring.Ring
	broken error // set after an unrecoverable ring error; all later calls fail
}

func newURing() (*uringBackend, error) {
	if probeHook != nil {
		if err := probeHook(); err != nil {
			return nil, err
		}
	}
	ring, err := giouring.CreateRing(QueueDepth)
	if err != nil {
		return nil, fmt.Errorf("io_uring_setup: %w", err)
	}
	u := &uringBackend{ring: ring}
	sqe := ring.GetSQE()
	if sqe == nil {
		ring.QueueExit()
		return nil, errors.New("io_uring probe: no SQE")
	}
	sqe.PrepareNop()
	sqe.SetData64(0xfeed)
	if err := u.submit(); err != nil {
		ring.QueueExit()
		return nil, fmt.Errorf("io_uring probe submit: %w", err)
	}
	cqe, err := u.wait()
	if err != nil {
		ring.QueueExit()
		return nil, fmt.Errorf("io_uring probe wait: %w", err)
	}
	res, data := cqe.Res, cqe.UserData
	ring.CQESeen(cqe)
	if res != 0 || data != 0xfeed {
		ring.QueueExit()
		return nil, fmt.Errorf("io_uring probe: NOP completed with res=%d data=%#x", res, data)
	}
	return u, nil
}

func (u *uringBackend) name() string { return "io_uring" }

func (u *uringBackend) close() error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.ring != nil {
		u.ring.QueueExit()
		u.ring = nil
	}
	return nil
}

func transient(err error) bool {
	return err == syscall.EINTR || err == syscall.EAGAIN || err == syscall.EBUSY
}

func (u *uringBackend) submit() error {
	for {
		_, err := u.ring.Submit()
		if err == nil || !transient(err) {
			return err
		}
	}
}

func (u *uringBackend) wait() (*giouring.CompletionQueueEvent, error) {
	for {
		cqe, err := u.ring.WaitCQE()
		if err == nil && cqe != nil {
			return cqe, nil
		}
		if err != nil && !transient(err) {
			return nil, err
		}
	}
}

// run keeps up to QueueDepth ops in flight, resubmitting the remainder of short
// transfers, until every op is complete or failed.
func (u *uringBackend) run(ops []*op) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.ring == nil || u.broken != nil {
		err := u.broken
		if err == nil {
			err = fmt.Errorf("fileio: io_uring engine closed")
		}
		for _, o := range ops {
			o.err = err
		}
		return
	}
	// Pin the buffers: the kernel holds raw addresses until completion, and
	// pinning also forces them off any goroutine stack (which could move).
	var pin runtime.Pinner
	defer pin.Unpin()
	queue := make([]int, 0, len(ops))
	for i, o := range ops {
		if o.sync || o.done < len(o.buf) {
			if len(o.buf) > 0 {
				pin.Pin(unsafe.SliceData(o.buf))
			}
			queue = append(queue, i)
		}
	}
	inflight := 0
	for len(queue) > 0 || inflight > 0 {
		queued := 0
		for inflight < QueueDepth && len(queue) > 0 {
			sqe := u.ring.GetSQE()
			if sqe == nil {
				break
			}
			i := queue[0]
			queue = queue[1:]
			o := ops[i]
			switch {
			case o.sync:
				sqe.PrepareFsync(o.fd, giouring.FsyncDatasync)
			default:
				n := uint32(min(len(o.buf)-o.done, maxChunk))
				addr := uintptr(unsafe.Pointer(&o.buf[o.done]))
				off := uint64(o.off + int64(o.done))
				if o.write {
					sqe.PrepareWrite(o.fd, addr, n, off)
				} else {
					sqe.PrepareRead(o.fd, addr, n, off)
				}
				// giouring's prepare leaves the per-op flags of the slot's
				// previous user: after a datasync (flag 1) the kernel would
				// read RWF_HIPRI and refuse the read or write with EINVAL.
				sqe.OpcodeFlags = 0
			}
			sqe.SetData64(uint64(i))
			inflight++
			queued++
		}
		if queued > 0 {
			if err := u.submit(); err != nil {
				u.fail(fmt.Errorf("fileio: io_uring submit: %w", err), ops, inflight)
				return
			}
		}
		if inflight == 0 {
			u.fail(errors.New("fileio: io_uring: no SQE available"), ops, 0)
			return
		}
		cqe, err := u.wait()
		if err != nil {
			u.fail(fmt.Errorf("fileio: io_uring wait: %w", err), ops, inflight)
			return
		}
		i, res := int(cqe.UserData), cqe.Res
		u.ring.CQESeen(cqe)
		inflight--
		o := ops[i]
		switch {
		case res < 0:
			if e := syscall.Errno(-res); transient(e) {
				queue = append(queue, i)
			} else {
				o.err = e
			}
		case o.sync:
		case res == 0 && o.write:
			o.err = io.ErrShortWrite
		case res == 0:
			o.err = errEOF(o)
		default:
			o.done += int(res)
			if o.done < len(o.buf) {
				queue = append(queue, i)
			}
		}
	}
}

// fail marks the ring broken after an unrecoverable error, tries to reap the
// requests still in flight (so the kernel is done with the buffers), and fails
// every unfinished op.
func (u *uringBackend) fail(err error, ops []*op, inflight int) {
	u.broken = err
	for ; inflight > 0; inflight-- {
		cqe, werr := u.wait()
		if werr != nil {
			break
		}
		u.ring.CQESeen(cqe)
	}
	for _, o := range ops {
		if o.err == nil && (o.sync || o.done < len(o.buf)) {
			o.err = err
		}
	}
}
