// The log: group-committed appends, rotation, snapshots and the files
// they let go.

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
	"sync"
	"time"
)

const (
	logMagic       = "GSWAL\x00"
	snapMagic      = "GSSNAP"
	formatVersion  = 1
	logHeaderSize  = 16
	snapHeaderSize = 24
	frameHeader    = 8

	// MaxRecord bounds one record (and what a frame header read from disk
	// may claim) so a corrupt length never allocates more.
	MaxRecord = 64 << 20
	// MaxSnapshot bounds a snapshot's payload likewise.
	MaxSnapshot = 4 << 30

	defaultSegmentBytes = 64 << 20
	defaultSyncInterval = 100 * time.Millisecond
)

var (
	// ErrCorrupt: the directory holds a state that cannot be recovered
	// whole (a bad frame before the last one, a gap in the records, a
	// snapshot the log no longer reaches back to).
	ErrCorrupt = errors.New("journal: corrupt")
	// ErrClosed: Append after Close.
	ErrClosed = errors.New("journal: closed")
	// ErrTooLarge: a record over MaxRecord.
	ErrTooLarge = errors.New("journal: record too large")
	// ErrEmpty: a record of no bytes (a zero frame length marks the
	// unwritten, preallocated end of a log file).
	ErrEmpty = errors.New("journal: empty record")
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Options configure a Journal.
type Options struct {
	Dir string
	// SegmentBytes: a log file past this size is closed and a new one
	// started (default 64 MiB).
	SegmentBytes int64
	// AckBeforeSync: Append returns once its record is written, before it
	// is synced; the writer syncs at least every SyncInterval (default
	// 100 ms). A crash of the machine (not of the process) loses at most
	// that window.
	AckBeforeSync bool
	SyncInterval  time.Duration
	// BootID names this boot of the machine (default: Linux's
	// /proc/sys/kernel/random/boot_id); see Recovered.Rebooted.
	BootID string
	// StreamSnapshot: Open checks the snapshot's checksum in one
	// sequential pass without keeping it, and Recovered.Snapshot stays
	// nil: the caller reads it through Recovered.OpenSnapshot. A snapshot
	// of millions of objects is then never whole in memory.
	StreamSnapshot bool
}

// Recovered is what Open found: the newest snapshot and every record
// after it, in order.
type Recovered struct {
	Snapshot    []byte // nil when there is none (or Options.StreamSnapshot)
	SnapshotSeq uint64 // the last record the snapshot includes (0: none)
	Records     [][]byte
	// Rebooted: the machine may have restarted since the directory was
	// last open (another boot id, or none known). Records that were only
	// written, never synced (WaitWritten, AckBeforeSync), may then be
	// lost; after a process crash they are not (the kernel still had them).
	Rebooted bool
	// LastWrite is no earlier than the last write of the newest log file
	// (its modification time, taken before a torn tail is cut, plus
	// mtimeLag: a data sync does not store that time; zero when
	// there is none).
	LastWrite time.Time

	// snapFile is the snapshot's file (Options.StreamSnapshot; "": none),
	// its payload's size and checksum.
	snapFile string
	snapSize int64
	snapSum  uint32
}

// LastSeq is the sequence number of the last record recovered.
func (r *Recovered) LastSeq() uint64 { return r.SnapshotSeq + uint64(len(r.Records)) }

// Stats count what a Journal wrote.
type Stats struct {
	Records uint64 // appended
	Bytes   uint64 // written to log files, frames included
	Syncs   uint64 // fsyncs of log files
	Batches uint64 // writes (one per group of appends)
}

type logFile struct {
	first uint64 // sequence number of its first record
	path  string
}

// Journal is an open log directory.
type Journal struct {
	opts Options

	mu   sync.Mutex
	cond *sync.Cond
	next uint64 // sequence number the next Append gets
	// pending: the frames of the records appended and not yet written,
	// pendingN of them, the first being written+1. spare: a written batch's
	// buffer kept for the next, so that a steady load allocates none.
	pending  []byte
	pendingN uint64
	spare    []byte
	written  uint64 // last sequence number written to the file
	synced   uint64 // last sequence number synced
	// writing, syncing: a waiting caller (or the ticker, or Close) is
	// writing a batch, or syncing the file, with mu released (see until).
	// One of each at a time; a batch is written while a sync runs.
	writing, syncing bool
	err              error // the first write or sync failure: the journal is failed
	closed           bool
	stats            Stats

	stop    chan struct{}
	stopped chan struct{}

	// file is the log file written; it changes (under mu) only in the
	// writer's rotate and in Close. fileSize belongs to the writer.
	file     *os.File
	fileSize int64

	filesMu sync.Mutex
	files   []logFile // oldest first; the last is the one written

	// fullSyncAt: when a sync last stored the file's modification time
	// (see mtimeLag); fullSyncs counts such syncs. Both under mu.
	fullSyncAt time.Time
	fullSyncs  uint64

	beforeFlush func() // tests: runs in the writer before it takes a batch
	beforeSync  func() // tests: runs in the syncer before it syncs
	// afterSnapStep (tests) runs after each step of SnapshotWith.
	afterSnapStep func(step int)
}

// mtimeLag bounds how far the log file's modification time on disk may
// lag its last synced write: a data sync (fdatasync) does not store the
// time, so at least once this long a sync is a full one (fsync), which
// does. After a crash of the machine the time, plus this, is still no
// earlier than any write acknowledged (see Recovered.LastWrite).
const mtimeLag = time.Second

// maxSpare bounds the batch buffer a Journal keeps for reuse.
const maxSpare = 4 << 20

// Open recovers dir (creating it when missing) and opens it for appending.
func Open(opts Options) (*Journal, *Recovered, error) {
	if opts.Dir == "" {
		return nil, nil, errors.New("journal: no directory")
	}
	if opts.SegmentBytes <= 0 {
		opts.SegmentBytes = defaultSegmentBytes
	}
	if opts.SyncInterval <= 0 {
		opts.SyncInterval = defaultSyncInterval
	}
	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("journal: %w", err)
	}
	// The newest log file's time before recovery: cutting a torn (or
	// preallocated) tail would make it now.
	lastWrite := newestLogTime(opts.Dir)
	rec, files, err := recoverDir(opts.Dir, opts.StreamSnapshot)
	if err != nil {
		return nil, nil, err
	}
	if !lastWrite.IsZero() {
		rec.LastWrite = lastWrite.Add(mtimeLag)
	}
	if err := checkBoot(opts, rec); err != nil {
		return nil, nil, err
	}
	j := &Journal{opts: opts, files: files, stop: make(chan struct{}), stopped: make(chan struct{})}
	j.cond = sync.NewCond(&j.mu)
	j.written = rec.LastSeq()
	j.synced = j.written
	j.next = j.written + 1
	if err := j.startFile(j.next); err != nil {
		return nil, nil, err
	}
	go j.run()
	return j, rec, nil
}

// newestLogTime is the modification time of dir's newest log file (zero
// when there is none).
func newestLogTime(dir string) time.Time {
	ls, err := listDir(dir)
	if err != nil || len(ls.logs) == 0 {
		return time.Time{}
	}
	fi, err := os.Stat(ls.logs[len(ls.logs)-1].path)
	if err != nil {
		return time.Time{}
	}
	return fi.ModTime()
}

// Append writes rec as the next record and returns its sequence number
// once it is durable (see Options.AckBeforeSync).
func (j *Journal) Append(rec []byte) (uint64, error) {
	seq, err := j.Enqueue(rec)
	if err != nil {
		return 0, err
	}
	return seq, j.Wait(seq)
}

// Enqueue hands rec to the writer as the next record and returns its
// sequence number at once, without waiting for the disk: a caller holding
// locks enqueues, and Waits after releasing them. rec is copied (framed
// for the file): the caller may reuse it. A record nobody waits for is
// written and synced within Options.SyncInterval.
func (j *Journal) Enqueue(rec []byte) (uint64, error) {
	if len(rec) > MaxRecord {
		return 0, ErrTooLarge
	}
	if len(rec) == 0 {
		return 0, ErrEmpty
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return 0, ErrClosed
	}
	if j.err != nil {
		return 0, j.err
	}
	seq := j.next
	j.next++
	j.pending = appendFrame(j.pending, rec)
	j.pendingN++
	j.stats.Records++
	return seq, nil
}

// Wait returns once every record up to seq is durable (see
// Options.AckBeforeSync), or the error that stopped the journal.
func (j *Journal) Wait(seq uint64) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.until(seq, !j.opts.AckBeforeSync)
}

// WaitWritten returns once every record up to seq is written to its file,
// synced or not: such a record survives a crash of the process (the
// kernel holds it) but maybe not of the machine (see Recovered.Rebooted).
func (j *Journal) WaitWritten(seq uint64) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.until(seq, false)
}

// until returns once every record up to seq is written, and synced when
// sync asks; j.mu is held. The waiter does the work it waits for when
// nobody is doing it: the first of several writes the batch of all
// (group commit), the next batch is written while a sync runs, and the
// records arriving during a sync go out together once it ends. Nothing
// is handed to another goroutine and back on the way from an RPC to the
// disk.
func (j *Journal) until(seq uint64, sync bool) error {
	for {
		if j.written >= seq && (!sync || j.synced >= seq) {
			return nil
		}
		switch {
		case j.err != nil:
			return j.err
		case seq >= j.next || j.file == nil: // never appended, or closed
			return ErrClosed
		case j.written < seq && !j.writing:
			j.write()
		case j.written >= seq && !j.syncing:
			j.sync()
		default:
			j.cond.Wait()
		}
	}
}

// write writes the pending records as one batch; j.mu is held, and
// released while the file is written.
func (j *Journal) write() {
	j.writing = true
	if j.beforeFlush != nil {
		j.mu.Unlock()
		j.beforeFlush()
		j.mu.Lock()
	}
	batch, n, first := j.pending, j.pendingN, j.written+1
	j.pending, j.pendingN, j.spare = j.spare[:0], 0, nil
	j.mu.Unlock()
	wrote, err := j.writeBatch(first, batch)
	j.mu.Lock()
	j.writing = false
	j.stats.Bytes += uint64(wrote)
	if err != nil {
		j.fail(err)
	} else if n > 0 {
		j.stats.Batches++
		j.written += n
	}
	if cap(batch) <= maxSpare {
		j.spare = batch[:0]
	}
	j.cond.Broadcast()
}

// sync makes the records written so far durable; j.mu is held, and
// released while the file syncs.
func (j *Journal) sync() {
	j.syncing = true
	mark, f := j.written, j.file
	now := time.Now()
	full := now.Sub(j.fullSyncAt) >= mtimeLag
	j.mu.Unlock()
	if j.beforeSync != nil {
		j.beforeSync()
	}
	var err error
	if full {
		err = f.Sync()
	} else {
		err = datasync(f)
	}
	j.mu.Lock()
	j.syncing = false
	if err != nil {
		j.fail(err)
	} else {
		j.stats.Syncs++
		j.synced = max(j.synced, mark)
		if full {
			j.fullSyncAt = now
			j.fullSyncs++
		}
	}
	j.cond.Broadcast()
}

// LastSeq is the sequence number of the last record appended.
func (j *Journal) LastSeq() uint64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.next - 1
}

// Stats so far.
func (j *Journal) Stats() Stats {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.stats
}

// Err is the failure that stopped the journal, or nil.
func (j *Journal) Err() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.err
}

// Close writes and syncs what is pending and closes the files.
func (j *Journal) Close() error {
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return nil
	}
	j.closed = true
	j.mu.Unlock()
	close(j.stop)
	<-j.stopped
	j.mu.Lock()
	j.until(j.next-1, true) // nothing is appended any more
	for j.writing || j.syncing {
		j.cond.Wait()
	}
	j.mu.Unlock()
	err := j.closeFile()
	j.mu.Lock()
	defer j.mu.Unlock()
	j.file = nil
	j.cond.Broadcast()
	if j.err != nil {
		return j.err
	}
	return err
}

// run writes and syncs, every SyncInterval, the records nobody waited for.
func (j *Journal) run() {
	defer close(j.stopped)
	t := time.NewTicker(j.opts.SyncInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			j.mu.Lock()
			j.until(j.next-1, true)
			j.mu.Unlock()
		case <-j.stop:
			return
		}
	}
}

// fail stops the journal with err; j.mu is held.
func (j *Journal) fail(err error) {
	j.err = fmt.Errorf("journal: %w", err)
	j.cond.Broadcast()
}

// writeBatch appends batch, the frames of records first, first+1, ...,
// to the current log file, starting a new one first when it is full.
func (j *Journal) writeBatch(first uint64, batch []byte) (int64, error) {
	if len(batch) == 0 {
		return 0, nil
	}
	if j.fileSize > logHeaderSize && j.fileSize+int64(len(batch)) > j.opts.SegmentBytes {
		if err := j.rotate(first); err != nil {
			return 0, err
		}
	}
	n, err := j.file.Write(batch)
	j.fileSize += int64(n)
	if err != nil {
		// Cut the partial frame so the file ends on a whole record; Open
		// would cut it too, but the next batch must not follow garbage.
		if terr := j.file.Truncate(j.fileSize - int64(n)); terr == nil {
			j.fileSize -= int64(n)
		}
	}
	return int64(n), err
}

// rotate ends the current log file (synced: closeFile) and starts the
// next, whose first record is first. It takes the sync role meanwhile, so
// that nobody syncs a file being closed.
func (j *Journal) rotate(first uint64) error {
	j.mu.Lock()
	for j.syncing {
		j.cond.Wait()
	}
	j.syncing = true
	j.mu.Unlock()
	err := j.closeFile()
	if err == nil {
		err = j.startFile(first)
	}
	j.mu.Lock()
	j.syncing = false
	if err == nil {
		j.synced = max(j.synced, first-1) // the old file's records, all written, synced by closeFile
	}
	j.cond.Broadcast()
	j.mu.Unlock()
	return err
}

func appendFrame(buf, payload []byte) []byte {
	buf = binary.LittleEndian.AppendUint32(buf, uint32(len(payload)))
	buf = binary.LittleEndian.AppendUint32(buf, crc32.Checksum(payload, castagnoli))
	return append(buf, payload...)
}

// startFile creates the log file whose first record is first, synced with
// its directory entry, and makes it the current one.
func (j *Journal) startFile(first uint64) error {
	path := filepath.Join(j.opts.Dir, logName(first))
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	head := make([]byte, 0, logHeaderSize)
	head = append(head, logMagic...)
	head = binary.LittleEndian.AppendUint16(head, formatVersion)
	head = binary.LittleEndian.AppendUint64(head, first)
	if _, err := f.Write(head); err != nil {
		f.Close()
		os.Remove(path)
		return fmt.Errorf("journal: %w", err)
	}
	// Reserved up to the segment's size (see preallocate), the length and
	// block map synced here once rather than with every batch.
	preallocate(f, j.opts.SegmentBytes)
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("journal: %w", err)
	}
	if err := syncDir(j.opts.Dir); err != nil {
		f.Close()
		return err
	}
	j.mu.Lock()
	j.file, j.fileSize = f, logHeaderSize
	j.mu.Unlock()
	j.filesMu.Lock()
	if n := len(j.files); n > 0 && j.files[n-1].first == first {
		j.files[n-1].path = path // an empty file of the same name, replaced
	} else {
		j.files = append(j.files, logFile{first, path})
	}
	j.filesMu.Unlock()
	return nil
}

// closeFile ends the current log file at its last record: the reserved
// space after it goes (synced, so that a clean stop leaves no zeros for
// Open to read past), then the file is closed.
func (j *Journal) closeFile() error {
	err := j.file.Truncate(j.fileSize)
	if err == nil {
		err = j.file.Sync()
	}
	if cerr := j.file.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	return nil
}

// Snapshot stores state as including every record up to seq (see
// SnapshotWith).
func (j *Journal) Snapshot(seq uint64, state []byte) error {
	if uint64(len(state)) > MaxSnapshot {
		return ErrTooLarge
	}
	return j.SnapshotWith(seq, func(w io.Writer) error {
		_, err := w.Write(state)
		return err
	})
}

// Snapshot steps, for tests that stop a snapshot after one (as a crash
// would): the file written under its temporary name, synced, renamed into
// place, and the files it makes unnecessary deleted.
const (
	SnapWritten = iota + 1
	SnapSynced
	SnapRenamed
	SnapOldDropped
)

// SnapshotWith stores the state write writes as including every record up
// to seq, then deletes the snapshots and log files it makes unnecessary.
// The state streams into the file through a buffer, its checksum computed
// on the way, so no copy of it is ever whole in memory: it goes to a
// temporary name, is synced, renamed into place, and the directory synced.
// Records after seq may be in it too (the caller's fuzzy snapshot): the
// journal only needs the records up to seq to be (see the package doc).
// One SnapshotWith at a time (the caller's duty).
func (j *Journal) SnapshotWith(seq uint64, write func(io.Writer) error) error {
	if last := j.LastSeq(); seq > last {
		return fmt.Errorf("journal: snapshot at %d is past the last record %d", seq, last)
	}
	if err := writeSnapshotWith(j.opts.Dir, seq, write, j.snapStep); err != nil {
		return err
	}
	// Older snapshots go, and every log file all of whose records the
	// snapshot includes: those whose successor starts at or before seq+1.
	// The file being written always stays.
	snaps, _ := listSnapshots(j.opts.Dir) // not listDir: it deletes temporaries
	for _, s := range snaps {
		if s.seq < seq {
			os.Remove(s.path)
		}
	}
	j.filesMu.Lock()
	keep := 0
	for keep+1 < len(j.files) && j.files[keep+1].first <= seq+1 {
		os.Remove(j.files[keep].path)
		keep++
	}
	j.files = append([]logFile(nil), j.files[keep:]...)
	j.filesMu.Unlock()
	err := syncDir(j.opts.Dir)
	j.snapStep(SnapOldDropped)
	return err
}

// writeSnapshotWith writes the snapshot of record seq into dir from
// write's stream: to a temporary name, its checksum computed while
// writing and its header filled in after, synced, renamed into place,
// the directory synced; step sees each step done (tests stop there as a
// killed process would). The snapshot is whole or absent.
func writeSnapshotWith(dir string, seq uint64, write func(io.Writer) error, step func(int)) error {
	path := filepath.Join(dir, snapName(seq))
	tmp := path + ".tmp"
	// No defer: a test's crash (runtime.Goexit in a step hook) must leave
	// the files as a killed process would.
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("journal: snapshot: %w", err)
	}
	fail := func(err error) error {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("journal: snapshot: %w", err)
	}
	sw := &snapWriter{w: bufio.NewWriterSize(f, 1<<20)}
	if _, err := sw.w.Write(make([]byte, snapHeaderSize+4)); err != nil { // filled in below
		return fail(err)
	}
	if err := write(sw); err != nil {
		return fail(err)
	}
	if sw.err != nil {
		return fail(sw.err)
	}
	if err := sw.w.Flush(); err != nil {
		return fail(err)
	}
	head := make([]byte, 0, snapHeaderSize+4)
	head = append(head, snapMagic...)
	head = binary.LittleEndian.AppendUint16(head, formatVersion)
	head = binary.LittleEndian.AppendUint64(head, seq)
	head = binary.LittleEndian.AppendUint64(head, sw.n)
	head = binary.LittleEndian.AppendUint32(head, sw.crc)
	if _, err := f.WriteAt(head, 0); err != nil {
		return fail(err)
	}
	step(SnapWritten)
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	step(SnapSynced)
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("journal: snapshot: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("journal: snapshot: %w", err)
	}
	step(SnapRenamed)
	if err := syncDir(dir); err != nil {
		return err
	}
	return nil
}

func (j *Journal) snapStep(step int) {
	if j.afterSnapStep != nil {
		j.afterSnapStep(step)
	}
}

// snapWriter counts and checksums a snapshot's payload as it is written,
// and refuses one past MaxSnapshot.
type snapWriter struct {
	w   *bufio.Writer
	n   uint64
	crc uint32
	err error
}

func (sw *snapWriter) Write(b []byte) (int, error) {
	if sw.err != nil {
		return 0, sw.err
	}
	if sw.n+uint64(len(b)) > MaxSnapshot {
		sw.err = ErrTooLarge
		return 0, sw.err
	}
	n, err := sw.w.Write(b)
	sw.n += uint64(n)
	sw.crc = crc32.Update(sw.crc, castagnoli, b[:n])
	if err != nil {
		sw.err = err
	}
	return n, err
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("journal: sync %s: %w", dir, err)
	}
	return nil
}

func logName(first uint64) string { return fmt.Sprintf("log-%020d.wal", first) }
func snapName(seq uint64) string  { return fmt.Sprintf("snap-%020d.gsnap", seq) }
