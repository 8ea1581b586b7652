// Snapshot files on their own: a directory that holds snapshots and no
// log (an HA master's, whose log is on etcd), and a snapshot file sent
// whole from one master to another.

package journal

import (
	"bufio"
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

// SaveSnapshot writes state as the snapshot of record seq in dir (see
// SaveSnapshotWith).
func SaveSnapshot(dir string, seq uint64, state []byte) error {
	if uint64(len(state)) > MaxSnapshot {
		return ErrTooLarge
	}
	return SaveSnapshotWith(dir, seq, func(w io.Writer) error {
		_, err := w.Write(state)
		return err
	})
}

// SaveSnapshotWith writes the snapshot of record seq in dir from write's
// stream (whole or absent, as Journal.SnapshotWith writes it), then
// deletes the older ones. For a directory of snapshots alone: it does not
// touch log files.
func SaveSnapshotWith(dir string, seq uint64, write func(io.Writer) error) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	if err := writeSnapshotWith(dir, seq, write, func(int) {}); err != nil {
		return err
	}
	return dropOlderSnapshots(dir, seq)
}

func dropOlderSnapshots(dir string, seq uint64) error {
	snaps, err := listSnapshots(dir)
	if err != nil {
		return err
	}
	for _, s := range snaps {
		if s.seq < seq {
			os.Remove(s.path)
		}
	}
	return syncDir(dir)
}

// listSnapshots is listDir's snapshots, newest first, without its
// deleting of temporary files: those may be a snapshot being written
// meanwhile (listDir runs when nothing writes: at Open).
func listSnapshots(dir string) ([]snapFile, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	var out []snapFile
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, "snap-") || !strings.HasSuffix(name, ".gsnap") {
			continue
		}
		if seq, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(name, "snap-"), ".gsnap"), 10, 64); err == nil {
			out = append(out, snapFile{seq, filepath.Join(dir, name)})
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].seq > out[b].seq })
	return out, nil
}

// NewestSnapshot reads the newest whole snapshot in dir: the record it
// includes and its payload (0 and nil when dir holds none, or does not
// exist). A damaged newer one is passed over, as Open does. Like Open it
// deletes temporary files a crash left: call it before anything writes.
func NewestSnapshot(dir string) (seq uint64, state []byte, err error) {
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return 0, nil, nil
	}
	ls, err := listDir(dir)
	if err != nil {
		return 0, nil, err
	}
	for _, s := range ls.snaps {
		if state, _, _, err := readSnapshot(s, false); err == nil {
			return s.seq, state, nil
		}
	}
	return 0, nil, nil
}

// OpenNewestSnapshot opens the newest snapshot file in dir to send it as
// it is (header and checksum included: ReceiveSnapshot's input), with the
// record it includes and its size; ErrNoSnapshot when there is none. The
// file stays readable while open even if a newer snapshot replaces it.
func OpenNewestSnapshot(dir string) (seq uint64, f *os.File, size int64, err error) {
	snaps, err := listSnapshots(dir)
	if err != nil {
		return 0, nil, 0, err
	}
	if len(snaps) == 0 {
		return 0, nil, 0, ErrNoSnapshot
	}
	s := snaps[0]
	f, err = os.Open(s.path)
	if err != nil {
		return 0, nil, 0, fmt.Errorf("journal: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return 0, nil, 0, fmt.Errorf("journal: %w", err)
	}
	return s.seq, f, st.Size(), nil
}

// ErrNoSnapshot: the directory holds no snapshot.
var ErrNoSnapshot = errors.New("journal: no snapshot")

// ReceiveSnapshot reads a snapshot file's bytes as OpenNewestSnapshot
// sends them from r, and installs them in dir as that snapshot (older
// ones deleted) once they prove whole: the header's magic and version, a
// payload length within MaxSnapshot, exactly that many bytes and no more,
// the checksum. Bytes are streamed to a temporary file as they arrive,
// never held beyond that, so a peer that claims more than it sends costs
// nothing. check, when set, sees the payload before it is installed and
// may refuse it (a state that does not decode, say). It returns the record
// the snapshot includes and its payload; anything else is an error saying
// what was wrong, and dir is unchanged.
func ReceiveSnapshot(dir string, r io.Reader, check func(seq uint64, state []byte) error) (seq uint64, state []byte, err error) {
	br := bufio.NewReaderSize(r, 1<<20)
	var head [snapHeaderSize + 4]byte
	if n, err := io.ReadFull(br, head[:]); err != nil {
		return 0, nil, fmt.Errorf("journal: received snapshot: %d-byte header, want %d: %v", n, len(head), err)
	}
	if string(head[:6]) != snapMagic || binary.LittleEndian.Uint16(head[6:]) != formatVersion {
		return 0, nil, fmt.Errorf("journal: received snapshot: not a version-%d snapshot (header % x)", formatVersion, head[:8])
	}
	seq = binary.LittleEndian.Uint64(head[8:])
	n := binary.LittleEndian.Uint64(head[16:])
	if n > MaxSnapshot {
		return 0, nil, fmt.Errorf("journal: received snapshot: payload of %d bytes, at most %d", n, uint64(MaxSnapshot))
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return 0, nil, fmt.Errorf("journal: %w", err)
	}
	path := filepath.Join(dir, snapName(seq))
	tmp := path + ".tmp" // listDir deletes it after a crash
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return 0, nil, fmt.Errorf("journal: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(tmp)
		}
	}()
	sum := crc32.New(castagnoli)
	if _, err := f.Write(head[:]); err != nil {
		return 0, nil, fmt.Errorf("journal: %w", err)
	}
	got, err := io.CopyN(io.MultiWriter(f, sum), br, int64(n))
	if err != nil {
		return 0, nil, fmt.Errorf("journal: received snapshot %d: %d of %d payload bytes: %v", seq, got, n, err)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		return 0, nil, fmt.Errorf("journal: received snapshot %d: bytes after its %d-byte payload", seq, n)
	}
	if sum.Sum32() != binary.LittleEndian.Uint32(head[snapHeaderSize:]) {
		return 0, nil, fmt.Errorf("journal: received snapshot %d: checksum mismatch", seq)
	}
	if err := f.Sync(); err != nil {
		return 0, nil, fmt.Errorf("journal: %w", err)
	}
	if err := f.Close(); err != nil {
		return 0, nil, fmt.Errorf("journal: %w", err)
	}
	if state, _, _, err = readSnapshot(snapFile{seq, tmp}, false); err != nil {
		return 0, nil, err
	}
	if check != nil {
		if err := check(seq, state); err != nil {
			return 0, nil, err
		}
	}
	if err := os.Rename(tmp, path); err != nil {
		return 0, nil, fmt.Errorf("journal: %w", err)
	}
	ok = true
	return seq, state, dropOlderSnapshots(dir, seq)
}
