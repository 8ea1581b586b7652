// Recovery: the newest whole snapshot, then every record after it.

package journal

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

type snapFile struct {
	seq  uint64
	path string
}

type dirListing struct {
	snaps []snapFile // newest first
	logs  []logFile  // oldest first
}

// listDir names the journal's files in dir; stray temporary snapshots (a
// crash mid-Snapshot) are deleted.
func listDir(dir string) (dirListing, error) {
	var out dirListing
	entries, err := os.ReadDir(dir)
	if err != nil {
		return out, fmt.Errorf("journal: %w", err)
	}
	for _, e := range entries {
		name := e.Name()
		switch {
		case strings.HasPrefix(name, "snap-") && strings.HasSuffix(name, ".gsnap.tmp"):
			os.Remove(filepath.Join(dir, name))
		case strings.HasPrefix(name, "snap-") && strings.HasSuffix(name, ".gsnap"):
			if seq, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(name, "snap-"), ".gsnap"), 10, 64); err == nil {
				out.snaps = append(out.snaps, snapFile{seq, filepath.Join(dir, name)})
			}
		case strings.HasPrefix(name, "log-") && strings.HasSuffix(name, ".wal"):
			if first, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(name, "log-"), ".wal"), 10, 64); err == nil {
				out.logs = append(out.logs, logFile{first, filepath.Join(dir, name)})
			}
		}
	}
	sort.Slice(out.snaps, func(a, b int) bool { return out.snaps[a].seq > out.snaps[b].seq })
	sort.Slice(out.logs, func(a, b int) bool { return out.logs[a].first < out.logs[b].first })
	return out, nil
}

func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))
}

// HasSnapshot reports whether a snapshot was recovered (in Snapshot, or
// to read through OpenSnapshot).
func (r *Recovered) HasSnapshot() bool { return r.Snapshot != nil || r.snapFile != "" }

// OpenSnapshot reads the recovered snapshot's payload: from its file
// (Options.StreamSnapshot), checking the checksum again as it reads, so
// that a file changed since Open ends in an error wrapping ErrCorrupt
// rather than io.EOF; from Snapshot otherwise. It is an error when there
// is no snapshot.
func (r *Recovered) OpenSnapshot() (io.ReadCloser, error) {
	if r.snapFile == "" {
		if r.Snapshot == nil {
			return nil, errors.New("journal: no snapshot recovered")
		}
		return io.NopCloser(bytes.NewReader(r.Snapshot)), nil
	}
	f, err := os.Open(r.snapFile)
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	if _, err := f.Seek(snapHeaderSize+4, io.SeekStart); err != nil {
		f.Close()
		return nil, fmt.Errorf("journal: %w", err)
	}
	return &checkedReader{f: f, path: r.snapFile, left: r.snapSize, sum: r.snapSum}, nil
}

// checkedReader reads left bytes of f, then checks their checksum.
type checkedReader struct {
	f    *os.File
	path string
	left int64
	sum  uint32
	crc  uint32
}

func (c *checkedReader) Read(b []byte) (int, error) {
	if c.left <= 0 {
		if c.crc != c.sum {
			return 0, corrupt("%s: checksum mismatch", c.path)
		}
		return 0, io.EOF
	}
	n, err := c.f.Read(b[:min(int64(len(b)), c.left)])
	c.crc = crc32.Update(c.crc, castagnoli, b[:n])
	c.left -= int64(n)
	if err == io.EOF && c.left > 0 {
		return n, corrupt("%s: cut short", c.path)
	}
	if err == io.EOF {
		err = nil
	}
	return n, err
}

func (c *checkedReader) Close() error { return c.f.Close() }

// Len is how many bytes are left to read (the reader of a state sizes
// what it makes by it).
func (c *checkedReader) Len() int { return int(c.left) }

// recoverDir reads dir's newest valid snapshot and the records after it;
// stream: the snapshot is checked, not kept (Options.StreamSnapshot).
func recoverDir(dir string, stream bool) (*Recovered, []logFile, error) {
	ls, err := listDir(dir)
	if err != nil {
		return nil, nil, err
	}
	rec := &Recovered{}
	for _, s := range ls.snaps {
		state, size, sum, err := readSnapshot(s, stream)
		if err == nil {
			rec.Snapshot, rec.SnapshotSeq = state, s.seq
			if stream {
				rec.snapFile, rec.snapSize, rec.snapSum = s.path, size, sum
			}
			break
		}
		// A snapshot is renamed into place whole: a bad one is damage. An
		// older one serves only while the log still reaches back to it
		// (checked below, by the gap test).
	}
	next := rec.SnapshotSeq + 1
	var tornAt int64 // where the last file's torn tail starts (0: none)
	for i, lf := range ls.logs {
		last := i == len(ls.logs)-1
		records, first, cut, err := readLog(lf, last)
		if last {
			tornAt = cut
		}
		if err != nil {
			return nil, nil, err
		}
		if first != lf.first {
			return nil, nil, corrupt("%s starts at record %d", lf.path, first)
		}
		if len(records) > 0 && first > next {
			return nil, nil, corrupt("records %d to %d are missing (before %s)", next, first-1, lf.path)
		}
		for k, r := range records {
			if first+uint64(k) == next {
				rec.Records = append(rec.Records, r)
				next++
			}
		}
	}
	if len(ls.snaps) > 0 && !rec.HasSnapshot() && (len(ls.logs) == 0 || ls.logs[0].first > 1) {
		return nil, nil, corrupt("no snapshot in %s can be read and the log does not reach back to record 1", dir)
	}
	// Only a directory recovered whole is changed: a refused one stays as
	// it was found, for whoever looks into it.
	if tornAt > 0 {
		if err := cutTail(ls.logs[len(ls.logs)-1].path, tornAt); err != nil {
			return nil, nil, err
		}
	}
	return rec, ls.logs, nil
}

// readSnapshot reads and checks the snapshot s, returning its payload
// (none when stream: it is only checked, in one pass through a small
// buffer), the payload's size and its checksum.
func readSnapshot(s snapFile, stream bool) (state []byte, size int64, sum uint32, err error) {
	f, err := os.Open(s.path)
	if err != nil {
		return nil, 0, 0, err
	}
	defer f.Close()
	var head [snapHeaderSize + 4]byte
	if _, err := io.ReadFull(f, head[:]); err != nil {
		return nil, 0, 0, corrupt("%s: short header", s.path)
	}
	if string(head[:6]) != snapMagic || binary.LittleEndian.Uint16(head[6:]) != formatVersion ||
		binary.LittleEndian.Uint64(head[8:]) != s.seq {
		return nil, 0, 0, corrupt("%s: not a version-%d snapshot of record %d", s.path, formatVersion, s.seq)
	}
	n := binary.LittleEndian.Uint64(head[16:])
	st, err := f.Stat()
	if err != nil {
		return nil, 0, 0, err
	}
	if n > MaxSnapshot || int64(n) != st.Size()-int64(len(head)) {
		return nil, 0, 0, corrupt("%s: payload of %d bytes in a file of %d", s.path, n, st.Size())
	}
	sum = binary.LittleEndian.Uint32(head[snapHeaderSize:])
	var got uint32
	if stream {
		h := crc32.New(castagnoli)
		if _, err := io.CopyBuffer(h, io.LimitReader(f, int64(n)), make([]byte, 1<<20)); err != nil {
			return nil, 0, 0, corrupt("%s: %v", s.path, err)
		}
		got = h.Sum32()
	} else {
		state = make([]byte, n)
		if _, err := io.ReadFull(f, state); err != nil {
			return nil, 0, 0, corrupt("%s: %v", s.path, err)
		}
		got = crc32.Checksum(state, castagnoli)
	}
	if got != sum {
		return nil, 0, 0, corrupt("%s: checksum mismatch", s.path)
	}
	return state, int64(n), sum, nil
}

// readLog returns the records of one log file and its first sequence
// number. A frame of length 0 ends the records when only zeros follow it:
// space preallocated and never written (the writer writes no empty
// record). In the last file a torn tail (a crash mid-write) is left out,
// and cut says where it starts (0: there is none), for the caller to cut
// off once the whole directory proves recoverable; anywhere else a bad
// frame is corruption. A tail is torn when its first bad frame runs past
// the file, has a length of 0 or past MaxRecord, holds a piece between two
// sector boundaries that is all zeros (a sector that never reached the
// disk: the writes of an unsynced batch land in any order), or is followed
// by nothing but zeros; a bad checksum with written data after it and no
// such sign is damage.
func readLog(lf logFile, last bool) (records [][]byte, first uint64, cut int64, err error) {
	f, err := os.Open(lf.path)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("journal: %w", err)
	}
	defer f.Close()
	var head [logHeaderSize]byte
	if _, err := io.ReadFull(f, head[:]); err != nil {
		if last {
			// Created, header not yet whole: nothing was written after it.
			return nil, lf.first, 0, nil
		}
		return nil, 0, 0, corrupt("%s: short header", lf.path)
	}
	if string(head[:6]) != logMagic || binary.LittleEndian.Uint16(head[6:]) != formatVersion {
		return nil, 0, 0, corrupt("%s: not a version-%d log file", lf.path, formatVersion)
	}
	first = binary.LittleEndian.Uint64(head[8:])
	st, err := f.Stat()
	if err != nil {
		return nil, 0, 0, fmt.Errorf("journal: %w", err)
	}
	r := bufio.NewReaderSize(f, 1<<20)
	good := int64(logHeaderSize)
	for {
		payload, err := readFrame(r, st.Size()-good)
		if err == io.EOF {
			return records, first, 0, nil
		}
		if err == errNoFrame && zerosToEnd(r) {
			if last && good < st.Size() {
				cut = good // the reserved space goes with the tail
			}
			return records, first, cut, nil
		}
		if err != nil {
			torn := err != errBadSum || zeroPiece(good, payload) || zerosToEnd(r)
			if !last || !torn {
				// Damage with written data after it is no torn write.
				return nil, 0, 0, corrupt("%s: record %d: %v", lf.path, first+uint64(len(records)), err)
			}
			return records, first, good, nil
		}
		records = append(records, payload)
		good += int64(frameHeader + len(payload))
	}
}

// cutTail cuts the log file at path to its first size bytes, synced.
func cutTail(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		return fmt.Errorf("journal: cutting the torn tail of %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	return nil
}

var (
	errTorn    = errors.New("torn frame")
	errBadSum  = errors.New("checksum mismatch")
	errNoFrame = errors.New("a frame of length 0")
)

// sectorSize is the unit a disk writes whole or not at all.
const sectorSize = 512

var zeros [64 << 10]byte

// zeroPiece reports whether the frame read at offset at (its header, then
// payload) holds a piece between two sector boundaries of the file, or
// between one and the frame's end, that is all zeros.
func zeroPiece(at int64, frame []byte) bool {
	for len(frame) > 0 {
		n := min(int64(len(frame)), sectorSize-at%sectorSize)
		if bytes.Equal(frame[:n], zeros[:n]) {
			return true
		}
		frame, at = frame[n:], at+n
	}
	return false
}

// zerosToEnd reads r to its end and reports whether all of it is zeros.
func zerosToEnd(r *bufio.Reader) bool {
	for {
		b, err := r.Peek(r.Size())
		if len(b) > 0 {
			for len(b) > 0 {
				n := min(len(b), len(zeros))
				if !bytes.Equal(b[:n], zeros[:n]) {
					return false
				}
				r.Discard(n)
				b = b[n:]
			}
			continue
		}
		return err == io.EOF
	}
}

// readFrame reads the next frame; room is what the file holds from the
// frame's start on. With errBadSum it returns the whole frame read (header
// and payload) for the caller to judge.
func readFrame(r *bufio.Reader, room int64) ([]byte, error) {
	var h [frameHeader]byte
	n, err := io.ReadFull(r, h[:])
	if err == io.EOF {
		return nil, io.EOF
	}
	if err != nil || n < frameHeader {
		return nil, errTorn
	}
	size := binary.LittleEndian.Uint32(h[:4])
	if size == 0 {
		return nil, errNoFrame
	}
	if size > MaxRecord {
		return nil, fmt.Errorf("length %d over the limit", size)
	}
	if int64(size) > room-frameHeader {
		// The payload would run past the end of the file: torn (or a
		// damaged length), and nothing is allocated for what is not there.
		return nil, errTorn
	}
	frame := make([]byte, frameHeader+size)
	copy(frame, h[:])
	payload := frame[frameHeader:]
	if _, err := io.ReadFull(r, payload); err != nil {
		return nil, errTorn
	}
	if crc32.Checksum(payload, castagnoli) != binary.LittleEndian.Uint32(h[4:]) {
		return frame, errBadSum
	}
	return payload, nil
}
