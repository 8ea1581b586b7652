package journal

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// big is record i at about n bytes: frames that span disk sectors.
func big(i, n int) []byte {
	return append([]byte(fmt.Sprintf("big-%06d-", i)), bytes.Repeat([]byte{byte(i) | 1}, n)...)
}

// A log file is preallocated: what a crash leaves is the records, then
// zeros to the segment's size. Open reads that as the end of the log (not
// as empty records, nor as damage), cuts the zeros, and appends after.
func TestPreallocatedZerosAfterTheRecordsAreAnEmptyTail(t *testing.T) {
	dir := t.TempDir()
	const segment = 64 << 10
	j, _ := open(t, Options{Dir: dir, SegmentBytes: segment})
	for i := 1; i <= 20; i++ {
		if _, err := j.Append(rec(i)); err != nil {
			t.Fatal(err)
		}
	}
	// The file as a crash now would leave it (the journal still open).
	crashed := t.TempDir()
	b, err := os.ReadFile(filepath.Join(dir, logName(1)))
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != segment {
		t.Fatalf("an open log file of 20 records is %d bytes, not preallocated to %d", len(b), segment)
	}
	os.WriteFile(filepath.Join(crashed, logName(1)), b, 0o600)
	j.Close()
	if st, _ := os.Stat(filepath.Join(dir, logName(1))); st.Size() >= segment {
		t.Fatalf("a closed log file keeps its reserved space: %d bytes", st.Size())
	}
	j, r := open(t, Options{Dir: crashed, SegmentBytes: segment})
	wantRecords(t, r, 1, 20)
	if seq, err := j.Append(rec(21)); err != nil || seq != 21 {
		t.Fatalf("append after recovery: %d %v", seq, err)
	}
	j.Close()
	_, r = open(t, Options{Dir: crashed, SegmentBytes: segment})
	wantRecords(t, r, 1, 21)
}

// An unsynced batch reaches the disk in any order: a sector of it can be
// zeros while a later one was written. That is a torn tail in the last
// file (its records were never acknowledged), cut at the frame it hits;
// and a file before the last that kept its zeros (a crash before the
// rotation cut them) ends where they start.
func TestZeroSectorsAreTornWritesAndZeroTailsEndOlderFiles(t *testing.T) {
	var frames [][2]int // each frame's start and end in body
	body := logHeader(1)
	for i := 1; i <= 12; i++ {
		start := len(body)
		body = appendFrame(body, big(i, 300))
		frames = append(frames, [2]int{start, len(body)})
	}
	for name, c := range map[string]struct {
		zero int // offset in frame 8 (record 8) whose sector is zeroed
	}{"a sector of a payload": {150}, "a sector holding a frame header": {0}} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			b := append(append([]byte(nil), body...), make([]byte, 8192)...)
			at := frames[7][0] + c.zero
			sector := at / sectorSize * sectorSize
			copy(b[sector:sector+sectorSize], zeros[:sectorSize])
			os.WriteFile(filepath.Join(dir, logName(1)), b, 0o600)
			first := 8 // the first record the zeroed sector touches
			for k := range frames {
				if frames[k][1] > sector {
					first = k + 1
					break
				}
			}
			_, r := open(t, Options{Dir: dir})
			if len(r.Records) != first-1 {
				t.Fatalf("recovered %d records, want the %d before the zeroed sector", len(r.Records), first-1)
			}
			for k, got := range r.Records {
				if !bytes.Equal(got, big(k+1, 300)) {
					t.Fatalf("record %d: %q", k+1, got)
				}
			}
		})
	}
	t.Run("zeros after the records of an older file", func(t *testing.T) {
		dir := t.TempDir()
		older := append(append([]byte(nil), body[:frames[4][1]]...), make([]byte, 4096)...)
		os.WriteFile(filepath.Join(dir, logName(1)), older, 0o600)
		newer := logHeader(6)
		for i := 6; i <= 8; i++ {
			newer = appendFrame(newer, big(i, 300))
		}
		os.WriteFile(filepath.Join(dir, logName(6)), newer, 0o600)
		_, r := open(t, Options{Dir: dir})
		if len(r.Records) != 8 {
			t.Fatalf("recovered %d records, want 8", len(r.Records))
		}
		for k, got := range r.Records {
			if !bytes.Equal(got, big(k+1, 300)) {
				t.Fatalf("record %d: %q", k+1, got)
			}
		}
		// Written bytes after the zeros are no preallocation: damage.
		older[len(older)-1] = 1
		os.WriteFile(filepath.Join(dir, logName(1)), older, 0o600)
		if _, _, err := Open(Options{Dir: dir}); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("data after a zero frame in an older file: %v", err)
		}
	})
	j, _ := open(t, Options{Dir: t.TempDir()})
	if _, err := j.Append(nil); !errors.Is(err, ErrEmpty) {
		t.Fatalf("an empty record: %v", err)
	}
}

// crashChildEnv names the directory a child process appends to until it is
// killed (TestKill9KeepsEveryAcknowledgedRecord).
const crashChildEnv = "GOSTORE_JOURNAL_CRASH_CHILD"

func TestMain(m *testing.M) {
	if dir := os.Getenv(crashChildEnv); dir != "" {
		j, _, err := Open(Options{Dir: dir, SegmentBytes: 16 << 10})
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		for i := 1; ; i++ {
			seq, err := j.Append(rec(i))
			if err != nil {
				fmt.Println("error", err)
				os.Exit(1)
			}
			fmt.Println(seq) // acknowledged
		}
	}
	os.Exit(m.Run())
}

// kill -9 of a process appending (preallocated segments, rotating): every
// record it acknowledged comes back, byte for byte, and nothing else.
func TestKill9KeepsEveryAcknowledgedRecord(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	acked := 0
	lines := bufio.NewScanner(out)
	deadline := time.Now().Add(30 * time.Second)
	for acked < 1500 && time.Now().Before(deadline) && lines.Scan() {
		n, err := strconv.Atoi(lines.Text())
		if err != nil {
			t.Fatalf("child: %s", lines.Text())
		}
		acked = n
	}
	cmd.Process.Kill()
	cmd.Wait()
	if acked < 100 {
		t.Fatalf("the child acknowledged only %d records", acked)
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "log-*.wal"))
	st, _ := os.Stat(logs[len(logs)-1])
	if len(logs) < 3 || st.Size() != 16<<10 {
		t.Fatalf("%d log files, the last of %d bytes: not rotating preallocated segments", len(logs), st.Size())
	}
	_, r := open(t, Options{Dir: dir})
	if len(r.Records) < acked {
		t.Fatalf("%d acknowledged, %d recovered", acked, len(r.Records))
	}
	wantRecords(t, r, 1, len(r.Records))
}

// Recovered.LastWrite (which sets the quarantine after a reboot) is the
// newest log file's time from before recovery cut its torn tail, not the
// time of the cut.
func TestLastWriteIsTakenBeforeATornTailIsCut(t *testing.T) {
	dir := t.TempDir()
	j, _ := open(t, Options{Dir: dir})
	for i := 1; i <= 5; i++ {
		j.Append(rec(i))
	}
	j.Close()
	path := filepath.Join(dir, logName(1))
	b, _ := os.ReadFile(path)
	os.WriteFile(path, append(b, 7, 0, 0), 0o600) // half a frame header: torn
	then := time.Now().Add(-time.Hour).Truncate(time.Second)
	if err := os.Chtimes(path, then, then); err != nil {
		t.Fatal(err)
	}
	_, r := open(t, Options{Dir: dir})
	wantRecords(t, r, 1, 5)
	if r.LastWrite.Before(then) || r.LastWrite.After(then.Add(mtimeLag)) {
		t.Fatalf("last write %v, the file was last written at %v", r.LastWrite, then)
	}
}

// A data sync does not store the file's time: at least once a second a
// sync is a full one, which does (mtimeLag).
func TestASyncStoresTheFileTimeOnceASecond(t *testing.T) {
	j, _ := open(t, Options{Dir: t.TempDir(), SyncInterval: time.Hour})
	for i := 1; i <= 3; i++ {
		j.Append(rec(i))
	}
	j.mu.Lock()
	full, syncs := j.fullSyncs, j.stats.Syncs
	j.fullSyncAt = time.Now().Add(-2 * mtimeLag) // as if the last full sync were long ago
	j.mu.Unlock()
	if syncs != 3 || full != 1 {
		t.Fatalf("3 syncs in a row: %d, %d of them full; want the first full, the others data only", syncs, full)
	}
	j.Append(rec(4))
	j.mu.Lock()
	full = j.fullSyncs
	j.mu.Unlock()
	if full != 2 {
		t.Fatalf("a sync %v after the last full one was not full", 2*mtimeLag)
	}
}
