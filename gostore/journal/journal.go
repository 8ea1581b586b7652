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
	// LastWrite is when the newest log file was last written (zero when
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

	mu      sync.Mutex
	cond    *sync.Cond
	next    uint64   // sequence number the next Append gets
	pending [][]byte // appended, not yet written; the first is seq written+1
	written uint64   // last sequence number written to the file
	synced  uint64   // last sequence number synced
	// wanted: the last sequence number a Wait needs synced. The writer
	// syncs on demand, so records only written (WaitWritten) share the
	// sync of the next record someone waits for.
	wanted uint64
	err    error // the first write or sync failure: the journal is failed
	closed bool
	stats  Stats

	wake    chan struct{}
	stop    chan struct{}
	stopped chan struct{}

	// Owned by the writer goroutine (and by Close after it ends).
	file     *os.File
	fileSize int64
	dirty    bool // written since the last sync

	filesMu sync.Mutex
	files   []logFile // oldest first; the last is the one written

	beforeFlush func() // tests: runs in the writer before it takes a batch
	beforeSync  func() // tests: runs in the writer before it syncs
	// afterSnapStep (tests) runs after each step of SnapshotWith.
	afterSnapStep func(step int)
}

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
	rec, files, err := recoverDir(opts.Dir, opts.StreamSnapshot)
	if err != nil {
		return nil, nil, err
	}
	if err := checkBoot(opts, rec, files); err != nil {
		return nil, nil, err
	}
	j := &Journal{opts: opts, files: files, wake: make(chan struct{}, 1), stop: make(chan struct{}),
		stopped: make(chan struct{})}
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
// locks enqueues, and Waits after releasing them.
func (j *Journal) Enqueue(rec []byte) (uint64, error) {
	if len(rec) > MaxRecord {
		return 0, ErrTooLarge
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
	j.pending = append(j.pending, rec)
	j.stats.Records++
	j.wakeWriter()
	return seq, nil
}

func (j *Journal) wakeWriter() {
	select {
	case j.wake <- struct{}{}:
	default:
	}
}

// Wait returns once every record up to seq is durable (see
// Options.AckBeforeSync), or the error that stopped the journal.
func (j *Journal) Wait(seq uint64) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if seq > j.wanted && seq > j.synced && !j.opts.AckBeforeSync {
		j.wanted = seq
		if j.written >= seq { // nothing left to write: wake the writer to sync
			j.wakeWriter()
		}
	}
	for j.err == nil && !j.done(seq) && seq < j.next { // Close's last flush writes all enqueued
		j.cond.Wait()
	}
	if j.done(seq) {
		return nil
	}
	if j.err != nil {
		return j.err
	}
	return ErrClosed
}

// WaitWritten returns once every record up to seq is written to its file,
// synced or not: such a record survives a crash of the process (the
// kernel holds it) but maybe not of the machine (see Recovered.Rebooted).
func (j *Journal) WaitWritten(seq uint64) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	for j.err == nil && j.written < seq && seq < j.next {
		j.cond.Wait()
	}
	if j.written >= seq {
		return nil
	}
	if j.err != nil {
		return j.err
	}
	return ErrClosed
}

// done reports whether record seq is as durable as Append promises; j.mu
// is held.
func (j *Journal) done(seq uint64) bool {
	return j.written >= seq && (j.opts.AckBeforeSync || j.synced >= seq)
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
	err := j.file.Close()
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.err != nil {
		return j.err
	}
	return err
}

func (j *Journal) run() {
	defer close(j.stopped)
	t := time.NewTicker(j.opts.SyncInterval) // records nobody waits for are synced too
	defer t.Stop()
	tick := t.C
	for {
		select {
		case <-j.wake:
			j.flush(false)
		case <-tick:
			j.flush(true)
		case <-j.stop:
			j.flush(true)
			return
		}
	}
}

// flush writes the pending records as one batch and syncs them when a
// Wait needs it or forceSync (the ticker, Close) asks.
func (j *Journal) flush(forceSync bool) {
	if j.beforeFlush != nil {
		j.beforeFlush()
	}
	j.mu.Lock()
	batch, first, failed := j.pending, j.written+1, j.err != nil
	j.pending = nil
	j.mu.Unlock()
	if failed {
		return
	}
	var n int64
	var err error
	if len(batch) > 0 {
		n, err = j.writeBatch(first, batch)
	}
	// Written records are published before the sync: WaitWritten's callers
	// go on while the disk works. A Wait that comes after this sees them
	// written and wakes the writer to sync.
	j.mu.Lock()
	j.stats.Bytes += uint64(n)
	if err != nil {
		j.fail(err)
		j.mu.Unlock()
		return
	}
	if len(batch) > 0 {
		j.stats.Batches++
		j.written += uint64(len(batch))
		j.cond.Broadcast()
	}
	needSync := j.dirty && (forceSync || j.wanted > j.synced)
	j.mu.Unlock()
	if !needSync {
		return
	}
	if j.beforeSync != nil {
		j.beforeSync()
	}
	err = j.file.Sync()
	j.mu.Lock()
	defer j.mu.Unlock()
	if err != nil {
		j.fail(err)
		return
	}
	j.dirty = false
	j.stats.Syncs++
	j.synced = j.written // only this goroutine writes: nothing unsynced since
	j.cond.Broadcast()
}

// fail stops the journal with err; j.mu is held.
func (j *Journal) fail(err error) {
	j.err = fmt.Errorf("journal: %w", err)
	j.cond.Broadcast()
}

// writeBatch appends the frames of records first, first+1, ... to the
// current log file, starting a new one first when it is full.
func (j *Journal) writeBatch(first uint64, batch [][]byte) (int64, error) {
	size := 0
	for _, r := range batch {
		size += frameHeader + len(r)
	}
	if j.fileSize > logHeaderSize && j.fileSize+int64(size) > j.opts.SegmentBytes {
		if err := j.file.Sync(); err != nil {
			return 0, err
		}
		j.dirty = false
		if err := j.file.Close(); err != nil {
			return 0, err
		}
		if err := j.startFile(first); err != nil {
			return 0, err
		}
	}
	buf := make([]byte, 0, size)
	for _, r := range batch {
		buf = appendFrame(buf, r)
	}
	n, err := j.file.Write(buf)
	j.fileSize += int64(n)
	if n > 0 {
		j.dirty = true
	}
	if err != nil {
		// Cut the partial frame so the file ends on a whole record; Open
		// would cut it too, but the next batch must not follow garbage.
		if terr := j.file.Truncate(j.fileSize - int64(n)); terr == nil {
			j.fileSize -= int64(n)
		}
	}
	return int64(n), err
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
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("journal: %w", err)
	}
	if err := syncDir(j.opts.Dir); err != nil {
		f.Close()
		return err
	}
	j.file, j.fileSize, j.dirty = f, logHeaderSize, false
	j.filesMu.Lock()
	if n := len(j.files); n > 0 && j.files[n-1].first == first {
		j.files[n-1].path = path // an empty file of the same name, replaced
	} else {
		j.files = append(j.files, logFile{first, path})
	}
	j.filesMu.Unlock()
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
	path := filepath.Join(j.opts.Dir, snapName(seq))
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
	j.snapStep(SnapWritten)
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	j.snapStep(SnapSynced)
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("journal: snapshot: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("journal: snapshot: %w", err)
	}
	j.snapStep(SnapRenamed)
	if err := syncDir(j.opts.Dir); err != nil {
		return err
	}
	// Older snapshots go, and every log file all of whose records the
	// snapshot includes: those whose successor starts at or before seq+1.
	// The file being written always stays.
	snaps, _ := listDir(j.opts.Dir)
	for _, s := range snaps.snaps {
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
	err = syncDir(j.opts.Dir)
	j.snapStep(SnapOldDropped)
	return err
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
