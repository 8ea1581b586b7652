package storage

import (
	"os"
	"sync"

	"github.com/gostore/gostore/gostore/storage/fileio"
)

// seqChunk is the size of one write of a seqWriter: large enough that the
// disk streams, small enough that two per writer cost little memory.
const seqChunk = 8 << 20

// chunkPool recycles the writers' aligned chunk buffers (mmap'ed memory:
// allocating it per bucket would cost two syscalls and page faults).
var chunkPool = sync.Pool{New: func() any { return fileio.AlignedBuffer(seqChunk, fileio.Alignment) }}

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
	return &seqWriter{eng: eng, f: f, buf: chunkPool.Get().([]byte)}
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
	pad := (fileio.Alignment - (w.Offset()+n)%fileio.Alignment) % fileio.Alignment
	w.Write(zeros[:pad])
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
		chunkPool.Put(chunk[:seqChunk])
		done <- err
	}(w.done)
	w.buf, w.fill, w.off = chunkPool.Get().([]byte), 0, off+int64(n)
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
		padded := (w.fill + fileio.Alignment - 1) &^ (fileio.Alignment - 1)
		clear(w.buf[w.fill:padded])
		w.flush(padded)
	}
	w.wait()
	chunkPool.Put(w.buf[:seqChunk])
	w.buf = nil
	return w.err
}
