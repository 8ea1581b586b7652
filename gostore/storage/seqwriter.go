package storage

import (
	"os"

	"github.com/gostore/gostore/gostore/storage/fileio"
)

// seqChunk is the size of one write of a seqWriter: large enough that the
// disk streams, small enough that two per writer cost little memory.
const seqChunk = 8 << 20

// freeChunks recycles the writers' aligned chunk buffers (mmap'ed memory:
// allocating it per file would cost syscalls and page faults). It is a
// bounded list rather than a sync.Pool because a pool drops idle items at
// GC without unmapping them; here a chunk that does not fit is unmapped.
// Its size covers every offload worker with one chunk writing and one
// filling.
var freeChunks = make(chan []byte, 2*offloadWorkers+2)

func getChunk() []byte {
	select {
	case c := <-freeChunks:
		return c
	default:
		return fileio.AlignedBuffer(seqChunk, fileio.Alignment)
	}
}

func putChunk(c []byte) {
	select {
	case freeChunks <- c[:seqChunk]:
	default:
		fileio.FreeAligned(c)
	}
}

// seqWriter writes a new file from front to back through aligned chunks, so
// the file can be opened O_DIRECT: the page cache is bypassed (no double
// copy, no dirty pages for datasync to flush) and the disk sees large
// writes. While one chunk is on its way to the disk the next one fills.
// Close pads the last chunk with zeros to the alignment and writes it; the
// file's size is then a multiple of fileio.Alignment.
type seqWriter struct {
	eng  fileio.Engine
	f    *os.File
	buf  []byte // the chunk filling
	fill int
	off  int64 // file offset of buf
	done chan error
	err  error
}

func newSeqWriter(eng fileio.Engine, f *os.File) *seqWriter {
	return &seqWriter{eng: eng, f: f, buf: getChunk()}
}

// Write appends p.
func (w *seqWriter) Write(p []byte) {
	for len(p) > 0 && w.err == nil {
		n := copy(w.buf[w.fill:], p)
		w.fill += n
		p = p[n:]
		if w.fill == len(w.buf) {
			w.flush(len(w.buf))
		}
	}
}

// Offset is the file offset the next Write lands at.
func (w *seqWriter) Offset() uint64 { return uint64(w.off) + uint64(w.fill) }

// AlignAfter writes zeros so that, after n more bytes, the offset is a
// multiple of fileio.Alignment: a record's header then ends, and its value
// starts, on a block boundary, where an O_DIRECT read can fetch it
// straight into aligned memory.
func (w *seqWriter) AlignAfter(n uint64) {
	var zeros [fileio.Alignment]byte
	end := w.Offset() + n
	w.Write(zeros[:roundUpAlign(end)-end])
}

// flush starts writing the first n bytes of the chunk (n aligned) and
// continues in a fresh chunk.
func (w *seqWriter) flush(n int) {
	w.wait()
	if w.err != nil {
		return
	}
	chunk, off := w.buf[:n], w.off
	w.done = make(chan error, 1)
	go func(done chan<- error) {
		err := w.eng.WriteAt(w.f, chunk, off)
		putChunk(chunk)
		done <- err
	}(w.done)
	w.buf, w.fill, w.off = getChunk(), 0, off+int64(n)
}

// wait collects the write in flight.
func (w *seqWriter) wait() {
	if w.done != nil {
		if err := <-w.done; err != nil && w.err == nil {
			w.err = err
		}
		w.done = nil
	}
}

// Close writes what is left and returns the first error (datasync is the
// caller's).
func (w *seqWriter) Close() error {
	if w.fill > 0 {
		padded := int(roundUpAlign(uint64(w.fill)))
		clear(w.buf[w.fill:padded])
		w.flush(padded)
	}
	w.wait()
	putChunk(w.buf)
	w.buf = nil
	return w.err
}
