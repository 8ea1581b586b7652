package fileio

import (
	"io"

	"golang.org/x/sys/unix"
)

// preadBackend issues pread(2)/pwrite(2)/fdatasync(2) synchronously; the
// requests of one call (a ReadBatch) run on up to preadParallel goroutines. It is stateless, so
// every call gets its own runner and there is nothing to pool or close; a uring
// engine also uses it for a call when it cannot create another ring.
type preadBackend struct{ st *stats }

func (preadBackend) name() string           { return "pread" }
func (b preadBackend) get() (runner, error) { return preadRunner(b), nil }
func (preadBackend) put(runner)             {}
func (preadBackend) setFixed([]byte)        {} // plain pread has no use for registered memory
func (preadBackend) close() error           { return nil }

type preadRunner struct{ st *stats }

// preadParallel is how many requests of one call run at once: the pread
// counterpart of the ring's queue depth (a disk serves concurrent requests
// much faster than a sequence of them).
const preadParallel = QueueDepth / 2

func (r preadRunner) run(ops []*op) {
	ForEach(len(ops), preadParallel, func(i int) { r.runSeq(ops[i : i+1]) })
}

func (r preadRunner) runSeq(ops []*op) {
	var reads uint64
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
				reads++
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
	if reads > 0 {
		r.st.plainReads.Add(reads)
	}
}

func retryEINTR(f func() error) error {
	for {
		if err := f(); err != unix.EINTR {
			return err
		}
	}
}
