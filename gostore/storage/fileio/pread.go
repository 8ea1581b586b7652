package fileio

import (
	"io"

	"golang.org/x/sys/unix"
)

// preadBackend issues pread(2)/pwrite(2)/fdatasync(2) synchronously, one
// request after the other (ReadBatch is sequential here).
type preadBackend struct{}

func (preadBackend) name() string { return "pread" }
func (preadBackend) close() error { return nil }

func (preadBackend) run(ops []*op) {
	for _, o := range ops {
		if o.sync {
			o.err = retryEINTR(func() error { return unix.Fdatasync(o.fd) })
			continue
		}
		for o.err == nil && o.done < len(o.buf) {
			chunk := o.buf[o.done:min(len(o.buf), o.done+maxChunk)]
			off := o.off + int64(o.done)
			var n int
			var err error
			if o.write {
				n, err = unix.Pwrite(o.fd, chunk, off)
			} else {
				n, err = unix.Pread(o.fd, chunk, off)
			}
			switch {
			case err == unix.EINTR || err == unix.EAGAIN:
			case err != nil:
				o.err = err
			case n == 0 && o.write:
				o.err = io.ErrShortWrite
			case n == 0:
				o.err = errEOF(o)
			default:
				o.done += n
			}
		}
	}
}

func retryEINTR(f func() error) error {
	for {
		if err := f(); err != unix.EINTR {
			return err
		}
	}
}
