package journal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"
)

func rec(i int) []byte {
	return []byte(fmt.Sprintf("record-%06d-%s", i, bytes.Repeat([]byte{byte(i)}, i%37)))
}

func open(t *testing.T, opts Options) (*Journal, *Recovered) {
	t.Helper()
	j, r, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	return j, r
}

func wantRecords(t *testing.T, r *Recovered, from, to int) {
	t.Helper()
	if len(r.Records) != to-from+1 {
		t.Fatalf("recovered %d records, want %d (%d..%d)", len(r.Records), to-from+1, from, to)
	}
	for k, got := range r.Records {
		if !bytes.Equal(got, rec(from+k)) {
			t.Fatalf("record %d: %q", from+k, got)
		}
	}
}

func TestAppendsSurviveReopenInOrder(t *testing.T) {
	dir := t.TempDir()
	j, r := open(t, Options{Dir: dir, SegmentBytes: 4096})
	if r.LastSeq() != 0 || r.Snapshot != nil {
		t.Fatalf("fresh directory recovered %+v", r)
	}
	for i := 1; i <= 500; i++ {
		seq, err := j.Append(rec(i))
		if err != nil || seq != uint64(i) {
			t.Fatalf("append %d: seq %d, %v", i, seq, err)
		}
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if logs, _ := filepath.Glob(filepath.Join(dir, "log-*.wal")); len(logs) < 3 {
		t.Fatalf("4 KiB segments did not rotate: %v", logs)
	}
	j, r = open(t, Options{Dir: dir, SegmentBytes: 4096})
	wantRecords(t, r, 1, 500)
	if seq, err := j.Append(rec(501)); err != nil || seq != 501 {
		t.Fatalf("append after reopen: %d %v", seq, err)
	}
	j.Close()
	_, r = open(t, Options{Dir: dir})
	wantRecords(t, r, 1, 501)
}

// Appends that arrive while the writer is busy go out in one write and
// one fsync.
func TestConcurrentAppendsShareOneSync(t *testing.T) {
	j, _ := open(t, Options{Dir: t.TempDir()})
	defer j.Close()
	gate := make(chan struct{})
	entered := make(chan struct{}, 1)
	j.beforeFlush = func() {
		select {
		case entered <- struct{}{}:
			<-gate // hold the writer until every append is queued
		default:
		}
	}
	const n = 32
	var wg sync.WaitGroup
	seqs := make([]uint64, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			seqs[i], _ = j.Append(rec(i))
		}(i)
	}
	<-entered
	for {
		j.mu.Lock()
		queued := j.pendingN
		j.mu.Unlock()
		if queued == n {
			break
		}
		runtime.Gosched()
	}
	close(gate)
	wg.Wait()
	st := j.Stats()
	if st.Records != n || st.Syncs != 1 || st.Batches != 1 {
		t.Fatalf("%d appends: %+v, want one batch and one sync", n, st)
	}
	seen := map[uint64]bool{}
	for _, s := range seqs {
		if s < 1 || s > n || seen[s] {
			t.Fatalf("sequence numbers %v", seqs)
		}
		seen[s] = true
	}
}

// A crash mid-write leaves a torn frame at the end of the last file: it is
// cut off and everything before it comes back.
func TestTornTailIsCutAndTheRestRecovered(t *testing.T) {
	for name, damage := range map[string]func([]byte) []byte{
		"half a frame header": func(b []byte) []byte { return append(b, 7, 0, 0) },
		"half a payload":      func(b []byte) []byte { return append(b, 200, 0, 0, 0, 1, 2, 3, 4, 'x', 'y') },
		"bad checksum":        func(b []byte) []byte { return append(b, 2, 0, 0, 0, 1, 2, 3, 4, 'x', 'y') },
		"absurd length":       func(b []byte) []byte { return append(b, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0) },
		"last record cut":     func(b []byte) []byte { return b[:len(b)-3] },
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			j, _ := open(t, Options{Dir: dir})
			for i := 1; i <= 20; i++ {
				j.Append(rec(i))
			}
			j.Close()
			logs, _ := filepath.Glob(filepath.Join(dir, "log-*.wal"))
			last := logs[len(logs)-1]
			b, _ := os.ReadFile(last)
			os.WriteFile(last, damage(b), 0o600)
			j, r := open(t, Options{Dir: dir})
			want := 20
			if name == "last record cut" {
				want = 19
			}
			wantRecords(t, r, 1, want)
			// The tail is gone for good: new records follow the good ones.
			if seq, err := j.Append(rec(want + 1)); err != nil || seq != uint64(want+1) {
				t.Fatalf("append after recovery: %d %v", seq, err)
			}
			j.Close()
			_, r = open(t, Options{Dir: dir})
			wantRecords(t, r, 1, want+1)
		})
	}
}

// Damage before the last frame of the log is not a crash: Open refuses.
func TestDamageInsideTheLogIsRefused(t *testing.T) {
	dir := t.TempDir()
	j, _ := open(t, Options{Dir: dir, SegmentBytes: 2048})
	for i := 1; i <= 200; i++ {
		j.Append(rec(i))
	}
	j.Close()
	logs, _ := filepath.Glob(filepath.Join(dir, "log-*.wal"))
	b, _ := os.ReadFile(logs[0])
	b[logHeaderSize+frameHeader+2] ^= 0xff // the first record's payload
	os.WriteFile(logs[0], b, 0o600)
	if _, _, err := Open(Options{Dir: dir}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a bad record in %s: %v", logs[0], err)
	}
	// So is a bad checksum in the last file with whole records after it:
	// a torn write leaves its damage at the very end.
	dir3 := t.TempDir()
	j, _ = open(t, Options{Dir: dir3})
	for i := 1; i <= 20; i++ {
		j.Append(rec(i))
	}
	j.Close()
	logs, _ = filepath.Glob(filepath.Join(dir3, "log-*.wal"))
	b, _ = os.ReadFile(logs[len(logs)-1])
	b[logHeaderSize+frameHeader+2] ^= 0xff
	os.WriteFile(logs[len(logs)-1], b, 0o600)
	if _, _, err := Open(Options{Dir: dir3}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a bad record before good ones in the last file: %v", err)
	}
	// A missing file in the middle is a gap.
	dir2 := t.TempDir()
	j, _ = open(t, Options{Dir: dir2, SegmentBytes: 2048})
	for i := 1; i <= 200; i++ {
		j.Append(rec(i))
	}
	j.Close()
	logs, _ = filepath.Glob(filepath.Join(dir2, "log-*.wal"))
	os.Remove(logs[1])
	if _, _, err := Open(Options{Dir: dir2}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a gap: %v", err)
	}
}

func TestSnapshotLetsTheLogGo(t *testing.T) {
	dir := t.TempDir()
	j, _ := open(t, Options{Dir: dir, SegmentBytes: 2048})
	for i := 1; i <= 300; i++ {
		j.Append(rec(i))
	}
	before, _ := filepath.Glob(filepath.Join(dir, "log-*.wal"))
	if err := j.Snapshot(250, []byte("state after 250")); err != nil {
		t.Fatal(err)
	}
	if err := j.Snapshot(301, nil); err == nil {
		t.Fatal("a snapshot past the last record was taken")
	}
	after, _ := filepath.Glob(filepath.Join(dir, "log-*.wal"))
	if len(after) >= len(before) {
		t.Fatalf("log files %d before the snapshot, %d after", len(before), len(after))
	}
	for i := 301; i <= 320; i++ {
		j.Append(rec(i))
	}
	j.Close()
	j, r := open(t, Options{Dir: dir})
	if string(r.Snapshot) != "state after 250" || r.SnapshotSeq != 250 {
		t.Fatalf("snapshot %q at %d", r.Snapshot, r.SnapshotSeq)
	}
	wantRecords(t, r, 251, 320)
	// A newer snapshot replaces the old one; a stray temporary is ignored.
	if err := j.Snapshot(320, []byte("state after 320")); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, snapName(400)+".tmp"), []byte("half"), 0o600)
	j.Close()
	if snaps, _ := filepath.Glob(filepath.Join(dir, "snap-*")); len(snaps) != 2 {
		t.Fatalf("snapshot files %v", snaps)
	}
	_, r = open(t, Options{Dir: dir})
	if string(r.Snapshot) != "state after 320" || len(r.Records) != 0 {
		t.Fatalf("snapshot %q, %d records", r.Snapshot, len(r.Records))
	}
	if tmp, _ := filepath.Glob(filepath.Join(dir, "*.tmp")); len(tmp) != 0 {
		t.Fatalf("stray temporaries left: %v", tmp)
	}
	// A damaged snapshot the log no longer reaches behind is refused.
	snap := filepath.Join(dir, snapName(320))
	b, _ := os.ReadFile(snap)
	b[len(b)-1] ^= 1
	os.WriteFile(snap, b, 0o600)
	if _, _, err := Open(Options{Dir: dir}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("damaged snapshot: %v", err)
	}
}

func TestAckBeforeSyncStillKeepsEverythingOnClose(t *testing.T) {
	dir := t.TempDir()
	j, _ := open(t, Options{Dir: dir, AckBeforeSync: true})
	for i := 1; i <= 100; i++ {
		if _, err := j.Append(rec(i)); err != nil {
			t.Fatal(err)
		}
	}
	j.Close()
	if _, err := j.Append(rec(1)); !errors.Is(err, ErrClosed) {
		t.Fatalf("append after close: %v", err)
	}
	_, r := open(t, Options{Dir: dir})
	wantRecords(t, r, 1, 100)
}

func TestOversizedRecordIsRefused(t *testing.T) {
	j, _ := open(t, Options{Dir: t.TempDir()})
	defer j.Close()
	if _, err := j.Append(make([]byte, MaxRecord+1)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversized: %v", err)
	}
	if seq, err := j.Append(rec(1)); err != nil || seq != 1 {
		t.Fatalf("after a refusal: %d %v", seq, err)
	}
}

// On a full file system Append fails, the journal stays failed (nothing
// after an unknown record is acknowledged), and every acknowledged record
// comes back. Needs root for a small tmpfs.
func TestFullFileSystemFailsAppendsAndLosesNothingAcknowledged(t *testing.T) {
	dir := t.TempDir()
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs needs root")
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v %s", err, out)
	}
	defer exec.Command("umount", dir).Run()
	for _, segment := range []int64{0, 64 << 10} {
		// Default segments are too big to preallocate here (plain
		// appends meet the full disk); 64 KiB ones are preallocated
		// until a new one finds no room.
		t.Run(fmt.Sprintf("segments of %d", segment), func(t *testing.T) {
			sub := filepath.Join(dir, strconv.FormatInt(segment, 10))
			exec.Command("mount", "-o", "remount,size=256k", dir).Run()
			fillTheFileSystem(t, Options{Dir: sub, SegmentBytes: segment})
			os.RemoveAll(sub)
		})
	}
}

// fillTheFileSystem appends in opts.Dir, on a small tmpfs, until the disk
// is full, then makes room and checks what comes back.
func fillTheFileSystem(t *testing.T, opts Options) {
	dir := opts.Dir
	j, _ := open(t, opts)
	acked := 0
	var failure error
	for i := 1; i <= 100000; i++ {
		if _, err := j.Append(rec(i)); err != nil {
			failure = err
			break
		}
		acked = i
	}
	if failure == nil {
		t.Fatal("256 KiB took every record")
	}
	if _, err := j.Append([]byte("x")); err == nil {
		t.Fatal("an append after a failed write was acknowledged")
	}
	j.Close()
	// Room again (as an operator would make it), then reopen.
	exec.Command("mount", "-o", "remount,size=4m", filepath.Dir(dir)).Run()
	j, r := open(t, opts)
	defer j.Close() // before the unmount
	if len(r.Records) < acked {
		t.Fatalf("%d acknowledged, %d recovered", acked, len(r.Records))
	}
	wantRecords(t, r, 1, len(r.Records))
}

func TestWrittenRecordsShareTheNextWaitedSync(t *testing.T) {
	dir := t.TempDir()
	j, _ := open(t, Options{Dir: dir, SyncInterval: time.Hour})
	held, err := j.Enqueue(rec(1))
	if err != nil {
		t.Fatal(err)
	}
	if err := j.WaitWritten(held); err != nil {
		t.Fatal(err)
	}
	if st := j.Stats(); st.Syncs != 0 || st.Batches != 1 {
		t.Fatalf("a record only written was synced, or not written: %+v", st)
	}
	seq, err := j.Append(rec(2)) // waits for its sync, which carries record 1
	if err != nil || seq != 2 {
		t.Fatal(seq, err)
	}
	if st := j.Stats(); st.Syncs != 1 || st.Batches != 2 {
		t.Fatalf("want one sync for both records: %+v", st)
	}
	if err := j.Wait(held); err != nil { // synced already: no second sync
		t.Fatal(err)
	}
	if st := j.Stats(); st.Syncs != 1 {
		t.Fatalf("%+v", st)
	}
	j.Close()
	_, r := open(t, Options{Dir: dir})
	wantRecords(t, r, 1, 2)
}

func TestARecordNobodyWaitsForIsSyncedWithinTheInterval(t *testing.T) {
	j, _ := open(t, Options{Dir: t.TempDir(), SyncInterval: time.Millisecond})
	synced := make(chan struct{})
	var once sync.Once
	j.beforeSync = func() { once.Do(func() { close(synced) }) }
	if _, err := j.Enqueue(rec(1)); err != nil {
		t.Fatal(err)
	}
	<-synced // the ticker's sync, with no Wait asking
}

func TestOpenTellsAProcessCrashFromAReboot(t *testing.T) {
	dir := t.TempDir()
	j, r := open(t, Options{Dir: dir, BootID: "boot-a"})
	if r.Rebooted {
		t.Fatal("an empty directory counts as rebooted")
	}
	if _, err := j.Append(rec(1)); err != nil {
		t.Fatal(err)
	}
	j.Close()
	for _, c := range []struct {
		boot     string
		rebooted bool
	}{
		{"boot-a", false}, // the same boot: the process restarted
		{"boot-b", true},  // another boot: the machine restarted
		{"boot-b", false}, // and now this boot is the directory's
		{"boot-a", true},
	} {
		j, r := open(t, Options{Dir: dir, BootID: c.boot})
		if r.Rebooted != c.rebooted || r.LastWrite.IsZero() {
			t.Fatalf("boot %s: rebooted %v (want %v), last write %v", c.boot, r.Rebooted, c.rebooted, r.LastWrite)
		}
		wantRecords(t, r, 1, 1)
		j.Close()
	}
	// A directory whose boot file is gone (an older gostore, or damage)
	// cannot tell: it counts as rebooted.
	os.Remove(filepath.Join(dir, bootFile))
	j, r = open(t, Options{Dir: dir, BootID: "boot-a"})
	if !r.Rebooted {
		t.Fatal("no boot file, yet not counted as rebooted")
	}
	j.Close()
	if got, _ := os.ReadFile(filepath.Join(dir, bootFile)); string(got) != "boot-a" {
		t.Fatalf("boot file holds %q", got)
	}
}

// A snapshot stopped at any step, as a killed process stops (the
// goroutine ends there, nothing cleans up): half-way through writing its
// payload, written, synced, renamed, old files dropped. Open then recovers
// the previous snapshot or the new one, whole, and every record after it
// with no gap; records appended while the snapshot was written are kept.
func TestASnapshotKilledAtAnyStepRecoversWhole(t *testing.T) {
	const midWrite = 0
	for _, step := range []int{midWrite, SnapWritten, SnapSynced, SnapRenamed, SnapOldDropped} {
		t.Run(fmt.Sprint(step), func(t *testing.T) {
			dir := t.TempDir()
			j, _, err := Open(Options{Dir: dir, SegmentBytes: 2048})
			if err != nil {
				t.Fatal(err)
			}
			for i := 1; i <= 200; i++ {
				j.Append(rec(i))
			}
			if err := j.Snapshot(150, []byte("state after 150")); err != nil {
				t.Fatal(err)
			}
			for i := 201; i <= 300; i++ {
				j.Append(rec(i))
			}
			big := bytes.Repeat([]byte("state after 280 "), 1<<16) // past the 1 MiB buffer: a partial file
			j.afterSnapStep = func(s int) {
				if s == step {
					runtime.Goexit()
				}
			}
			done := make(chan struct{})
			go func() {
				defer close(done)
				j.SnapshotWith(280, func(w io.Writer) error {
					w.Write(big[:len(big)/2])
					// Records go on being appended while the state streams.
					for i := 301; i <= 310; i++ {
						j.Append(rec(i))
					}
					if step == midWrite {
						runtime.Goexit()
					}
					_, err := w.Write(big[len(big)/2:])
					return err
				})
			}()
			<-done
			j.Close() // the records were written before the "kill": the kernel holds them
			j, r := open(t, Options{Dir: dir})
			wantSnap, wantSeq := "state after 150", uint64(150)
			if step >= SnapRenamed {
				wantSnap, wantSeq = string(big), 280
			}
			if string(r.Snapshot) != wantSnap || r.SnapshotSeq != wantSeq {
				t.Fatalf("killed after step %d: snapshot of %d bytes at %d, want %d bytes at %d", step, len(r.Snapshot), r.SnapshotSeq, len(wantSnap), wantSeq)
			}
			wantRecords(t, r, int(wantSeq)+1, 310)
			if tmp, _ := filepath.Glob(filepath.Join(dir, "*.tmp")); len(tmp) != 0 {
				t.Fatalf("stray temporaries left: %v", tmp)
			}
			// The journal goes on: a new snapshot and records after it.
			j.Append(rec(311))
			if err := j.Snapshot(311, []byte("state after 311")); err != nil {
				t.Fatal(err)
			}
			j.Close()
			_, r = open(t, Options{Dir: dir})
			if string(r.Snapshot) != "state after 311" || len(r.Records) != 0 {
				t.Fatalf("after the next snapshot: %q at %d, %d records", r.Snapshot, r.SnapshotSeq, len(r.Records))
			}
		})
	}
}

// SnapshotWith writes the file format the package doc gives, which Open
// reads back.
func TestSnapshotWithStreamsTheDocumentedFormat(t *testing.T) {
	dir := t.TempDir()
	j, _ := open(t, Options{Dir: dir})
	j.Append(rec(1))
	state := bytes.Repeat([]byte("0123456789"), 300_000) // 3 MB in pieces
	if err := j.SnapshotWith(1, func(w io.Writer) error {
		for i := 0; i < len(state); i += 4096 {
			if _, err := w.Write(state[i:min(i+4096, len(state))]); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, snapName(1)))
	if err != nil {
		t.Fatal(err)
	}
	want := append([]byte(snapMagic), 1, 0, 1, 0, 0, 0, 0, 0, 0, 0)
	want = binary.LittleEndian.AppendUint64(want, uint64(len(state)))
	want = binary.LittleEndian.AppendUint32(want, crc32.Checksum(state, castagnoli))
	if !bytes.Equal(b, append(want, state...)) {
		t.Fatalf("file of %d bytes, header % x; want %d bytes, header % x", len(b), b[:min(len(b), 28)], len(want)+len(state), want)
	}
	j.Close()
	_, r := open(t, Options{Dir: dir})
	if !bytes.Equal(r.Snapshot, state) || r.SnapshotSeq != 1 {
		t.Fatalf("read back %d bytes at %d", len(r.Snapshot), r.SnapshotSeq)
	}
}

// A waiter that needs its record only written does not wait for a sync in
// progress: the next batch goes to the file meanwhile.
func TestARecordIsWrittenWhileASyncRuns(t *testing.T) {
	dir := t.TempDir()
	j, _ := open(t, Options{Dir: dir, SyncInterval: time.Hour})
	entered, gate := make(chan struct{}), make(chan struct{})
	var once sync.Once
	j.beforeSync = func() {
		once.Do(func() { close(entered); <-gate })
	}
	synced := make(chan error, 1)
	go func() {
		_, err := j.Append(rec(1))
		synced <- err
	}()
	<-entered // record 1 is being synced, and the sync holds
	seq, err := j.Enqueue(rec(2))
	if err != nil {
		t.Fatal(err)
	}
	written := make(chan error, 1)
	go func() { written <- j.WaitWritten(seq) }()
	select {
	case err := <-written:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		close(gate)
		t.Fatal("writing record 2 waited for the sync of record 1")
	}
	close(gate)
	if err := <-synced; err != nil {
		t.Fatal(err)
	}
	j.Close()
	_, r := open(t, Options{Dir: dir})
	wantRecords(t, r, 1, 2)
}

// Enqueue copies its record: the caller's buffer is free at once.
func TestEnqueueCopiesTheRecord(t *testing.T) {
	dir := t.TempDir()
	j, _ := open(t, Options{Dir: dir})
	buf := append([]byte(nil), rec(1)...)
	seq, err := j.Enqueue(buf)
	if err != nil {
		t.Fatal(err)
	}
	copy(buf, "overwritten")
	if err := j.Wait(seq); err != nil {
		t.Fatal(err)
	}
	j.Close()
	_, r := open(t, Options{Dir: dir})
	wantRecords(t, r, 1, 1)
}

// Many writers at once, some waiting for the sync and some only for the
// write, over small segments (a rotation every few batches): every record
// comes back under the sequence number it was given, and nothing else.
func TestConcurrentWaitersAcrossRotations(t *testing.T) {
	dir := t.TempDir()
	j, _ := open(t, Options{Dir: dir, SegmentBytes: 4096, SyncInterval: 5 * time.Millisecond})
	const writers, each = 8, 300
	var mu sync.Mutex
	bySeq := map[uint64][]byte{}
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				payload := []byte(fmt.Sprintf("w%d-%d-%s", w, i, bytes.Repeat([]byte{'x'}, i%50)))
				seq, err := j.Enqueue(payload)
				if err == nil {
					switch i % 3 {
					case 0:
						err = j.Wait(seq)
					case 1:
						err = j.WaitWritten(seq)
					} // 2: nobody waits (the ticker or a later wait writes it)
				}
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				bySeq[seq] = payload
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if logs, _ := filepath.Glob(filepath.Join(dir, "log-*.wal")); len(logs) < 10 {
		t.Fatalf("only %d log files: the segments did not rotate", len(logs))
	}
	_, r := open(t, Options{Dir: dir, SegmentBytes: 4096})
	if len(r.Records) != writers*each {
		t.Fatalf("recovered %d records, want %d", len(r.Records), writers*each)
	}
	for i, got := range r.Records {
		if want := bySeq[uint64(i+1)]; !bytes.Equal(got, want) {
			t.Fatalf("record %d is %q, was appended as %q", i+1, got, want)
		}
	}
}

// A streamed snapshot is never whole in memory: Open checks it, and
// OpenSnapshot reads it from its file, checking it again, so a file
// changed after Open ends in corruption, not in a short or wrong state.
func TestStreamedSnapshotIsCheckedAsItIsRead(t *testing.T) {
	dir := t.TempDir()
	j, _ := open(t, Options{Dir: dir})
	for i := 1; i <= 10; i++ {
		j.Append(rec(i))
	}
	state := bytes.Repeat([]byte("state after 8 "), 10000)
	if err := j.Snapshot(8, state); err != nil {
		t.Fatal(err)
	}
	j.Close()
	readBack := func() ([]byte, error) {
		j, r := open(t, Options{Dir: dir, StreamSnapshot: true})
		defer j.Close()
		if r.Snapshot != nil || !r.HasSnapshot() || r.SnapshotSeq != 8 {
			t.Fatalf("streamed: %d bytes kept, found %v at %d", len(r.Snapshot), r.HasSnapshot(), r.SnapshotSeq)
		}
		wantRecords(t, r, 9, 10)
		rc, err := r.OpenSnapshot()
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		path := filepath.Join(dir, snapName(8))
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		b[len(b)-5] ^= 1 // changed after Open
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(rc)
		b[len(b)-5] ^= 1
		os.WriteFile(path, b, 0o600)
		return got, err
	}
	got, err := readBack()
	if !errors.Is(err, ErrCorrupt) || len(got) != len(state) {
		t.Fatalf("a snapshot changed while read: %d bytes, %v", len(got), err)
	}
	// Unchanged, it reads back whole.
	j, r := open(t, Options{Dir: dir, StreamSnapshot: true})
	defer j.Close()
	rc, err := r.OpenSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if got, err := io.ReadAll(rc); err != nil || !bytes.Equal(got, state) {
		t.Fatalf("streamed snapshot: %d bytes, %v", len(got), err)
	}
}
