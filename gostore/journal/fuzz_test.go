// Fuzz targets for recovery: every byte of a log file or a snapshot comes
// from a disk, which a crash tears and a bad sector or an operator's
// mistake damages, so what Open reads must give records or ErrCorrupt,
// never a panic, and never an allocation a damaged length field makes up.
//
// Run one for a while with, e.g.:
//
//	go test -ldflags=-checklinkname=0 -run='^$' -fuzz='^FuzzRecoverLog$' -fuzztime=60s -parallel=1 ./gostore/journal

package journal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/gostore/gostore/gostore/internal/fuzzkit"
)

// fuzzRecords is how many records the writer-made seeds hold.
const fuzzRecords = 5

// writtenLog is a whole log file as the journal's own writer leaves it:
// its header and fuzzRecords frames, the first record being 1.
func writtenLog(f *testing.F) []byte {
	f.Helper()
	dir := f.TempDir()
	j, _, err := Open(Options{Dir: dir, BootID: "fuzz"})
	if err != nil {
		f.Fatal(err)
	}
	for i := 1; i <= fuzzRecords; i++ {
		if _, err := j.Append(rec(i)); err != nil {
			f.Fatal(err)
		}
	}
	if err := j.Close(); err != nil {
		f.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, logName(1)))
	if err != nil {
		f.Fatal(err)
	}
	return b
}

// writtenSnapshot is a snapshot file as Snapshot leaves it: the format the
// package doc gives, built here so a change to the writer that breaks it
// is seen.
func writtenSnapshot(f *testing.F, seq uint64, state []byte) []byte {
	f.Helper()
	buf := append([]byte(nil), snapMagic...)
	buf = binary.LittleEndian.AppendUint16(buf, formatVersion)
	buf = binary.LittleEndian.AppendUint64(buf, seq)
	buf = binary.LittleEndian.AppendUint64(buf, uint64(len(state)))
	buf = binary.LittleEndian.AppendUint32(buf, crc32.Checksum(state, castagnoli))
	return append(buf, state...)
}

// allocBound is what recovering files of total bytes may allocate: the
// records themselves (copied once or twice), a read buffer per log file,
// and slack for names and bookkeeping. A length field claiming more than
// the file holds must not count.
func allocBound(total int, logs int) uint64 {
	return uint64(3*total) + uint64(logs)*(1<<20+64<<10) + 512<<10
}

// frames is the reference reading of a log file's frames after its
// header: every whole, checksummed frame from the start, and whether
// they make up the whole file.
func frames(b []byte) (recs [][]byte, whole bool) {
	for len(b) >= frameHeader {
		n := binary.LittleEndian.Uint32(b)
		if n == 0 { // no frame: preallocated space, when only zeros follow
			return recs, bytes.Count(b, []byte{0}) == len(b)
		}
		if uint64(n) > uint64(len(b)-frameHeader) {
			return recs, false
		}
		p := b[frameHeader : frameHeader+int(n)]
		if crc32.Checksum(p, castagnoli) != binary.LittleEndian.Uint32(b[4:]) {
			return recs, false
		}
		recs = append(recs, p)
		b = b[frameHeader+int(n):]
	}
	return recs, len(b) == 0
}

func logHeader(first uint64) []byte {
	h := append([]byte(logMagic), 0, 0)
	binary.LittleEndian.PutUint16(h[6:], formatVersion)
	return binary.LittleEndian.AppendUint64(h, first)
}

// FuzzRecoverLog: a log file of any bytes (whole, or the writer's header
// and some of its records followed by any bytes), the last file of the
// directory or one before another. Recovery returns records that are
// exactly a checksummed prefix of the file, or ErrCorrupt; it cuts a torn
// tail only in the last file and only past the records it returns; a
// second recovery finds the same; and it allocates in proportion to the
// file, whatever a frame's length field claims.
func FuzzRecoverLog(f *testing.F) {
	good := writtenLog(f)
	frameEnds := []int{logHeaderSize}
	for off := logHeaderSize; off < len(good); {
		off += frameHeader + int(binary.LittleEndian.Uint32(good[off:]))
		frameEnds = append(frameEnds, off)
	}
	// keep: 0 for data alone, k > 0 for the writer's header and k-1 of
	// its frames before data.
	f.Add(uint8(0), good, false)
	f.Add(uint8(0), good, true)
	f.Add(uint8(fuzzRecords+1), []byte{}, false)
	f.Add(uint8(3), []byte{}, true)
	f.Add(uint8(0), good[:logHeaderSize-3], false)
	f.Add(uint8(0), good[:len(good)-3], false)
	f.Add(uint8(1), []byte{7, 0, 0}, false)                                                // half a frame header
	f.Add(uint8(4), []byte{200, 0, 0, 0, 1, 2, 3, 4, 'x', 'y'}, false)                     // half a payload
	f.Add(uint8(4), []byte{2, 0, 0, 0, 1, 2, 3, 4, 'x', 'y'}, false)                       // bad checksum, last
	f.Add(uint8(2), append([]byte{2, 0, 0, 0, 1, 2, 3, 4, 'x', 'y'}, good[16:]...), false) // bad checksum, then records
	f.Add(uint8(4), []byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0}, false)                     // 4 GiB claimed
	f.Add(uint8(4), []byte{0, 0, 0, 3, 0, 0, 0, 0, 'x'}, false)                            // 48 MiB claimed, under MaxRecord
	f.Add(uint8(4), []byte{0, 0, 0, 3, 0, 0, 0, 0, 'x'}, true)
	f.Add(uint8(0), append(logHeader(9), good[16:]...), false) // header names another first record
	f.Add(uint8(fuzzRecords+1), make([]byte, 4096), false)     // preallocated space after the records
	f.Add(uint8(fuzzRecords+1), make([]byte, 4096), true)
	f.Add(uint8(3), append(make([]byte, 600), good[16:]...), false) // a zero sector, then written frames
	f.Fuzz(func(t *testing.T, keep uint8, data []byte, later bool) {
		var file []byte
		if keep > 0 {
			file = append(file, good[:frameEnds[min(int(keep)-1, len(frameEnds)-1)]]...)
		}
		file = append(file, data...)
		dir := t.TempDir()
		path := filepath.Join(dir, logName(1))
		if err := os.WriteFile(path, file, 0o600); err != nil {
			t.Fatal(err)
		}
		logs := 1
		if later { // an empty log after it: this file is no longer the last
			if err := os.WriteFile(filepath.Join(dir, logName(1<<40)), logHeader(1<<40), 0o600); err != nil {
				t.Fatal(err)
			}
			logs = 2
		}
		var r *Recovered
		var err error
		if n := fuzzkit.Allocated(func() { r, _, err = recoverDir(dir, false) }); n > allocBound(len(file), logs) {
			t.Fatalf("recovering a %d-byte log allocated %d bytes", len(file), n)
		}
		after, rerr := os.ReadFile(path)
		if rerr != nil {
			t.Fatal(rerr)
		}
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("not a corruption error: %v", err)
			}
			if !bytes.Equal(after, file) {
				t.Fatalf("a refused log was changed: %d bytes, now %d", len(file), len(after))
			}
			// Refusal is right only for damage: a header that is not this
			// file's, or a bad frame not at the tail of the last file.
			if len(file) >= logHeaderSize && bytes.Equal(file[:logHeaderSize], logHeader(1)) {
				if want, whole := frames(file[logHeaderSize:]); whole {
					t.Fatalf("a whole log of %d records was refused: %v", len(want), err)
				}
			}
			return
		}
		if r.Snapshot != nil || r.SnapshotSeq != 0 {
			t.Fatalf("a snapshot came out of a directory without one: %d", r.SnapshotSeq)
		}
		// What came back is exactly the file's first frames, and the file
		// now ends where they do (the last file) or is untouched.
		redo := logHeader(1)
		for _, p := range r.Records {
			redo = appendFrame(redo, p)
		}
		if len(file) < logHeaderSize {
			if len(r.Records) != 0 || later {
				t.Fatalf("a log without a whole header gave %d records (later %v)", len(r.Records), later)
			}
		} else if !bytes.HasPrefix(file, redo) {
			t.Fatalf("%d records recovered are not the file's first frames", len(r.Records))
		} else if later && !bytes.Equal(after, file) {
			t.Fatalf("a log file before the last was cut from %d to %d bytes", len(file), len(after))
		} else if !later && !bytes.Equal(after, redo) {
			t.Fatalf("the last log was left at %d bytes, its %d records end at %d", len(after), len(r.Records), len(redo))
		}
		if want, whole := frames(file[min(len(file), logHeaderSize):]); whole && len(want) != len(r.Records) {
			t.Fatalf("%d whole records, %d recovered", len(want), len(r.Records))
		}
		// Recovery is idempotent: the cut tail stays cut, nothing else goes.
		r2, _, err := recoverDir(dir, false)
		if err != nil {
			t.Fatalf("second recovery: %v", err)
		}
		if len(r2.Records) != len(r.Records) {
			t.Fatalf("second recovery: %d records, first %d", len(r2.Records), len(r.Records))
		}
		for i := range r.Records {
			if !bytes.Equal(r.Records[i], r2.Records[i]) {
				t.Fatalf("second recovery: record %d differs", i+1)
			}
		}
	})
}

// FuzzRecoverSnapshot: a snapshot file of any bytes named for any record,
// beside (or not) an older good snapshot and a good log from record 1.
// Recovery uses the newest snapshot that is whole (its header names its
// file's record, its length is the file's, its checksum holds) and the
// records after it; a damaged one is passed over while the log reaches
// back past it, and refused with ErrCorrupt when nothing can replace it.
// A length field claiming more than the file holds allocates nothing.
func FuzzRecoverSnapshot(f *testing.F) {
	good := writtenLog(f)
	const olderSeq = 2
	older := writtenSnapshot(f, olderSeq, []byte("older state"))
	for _, seq := range []uint64{0, 1, 3, fuzzRecords, fuzzRecords + 10, math.MaxUint64} {
		snap := writtenSnapshot(f, seq, []byte("state after some records"))
		f.Add(snap, seq, false, false)
		f.Add(snap, seq, true, false)
		f.Add(snap, seq, true, true)
	}
	snap := writtenSnapshot(f, 4, []byte("state"))
	f.Add(writtenSnapshot(f, 4, nil), uint64(4), false, true)
	f.Add(snap[:snapHeaderSize+2], uint64(4), false, false) // short header
	f.Add(snap[:len(snap)-1], uint64(4), true, false)       // cut payload
	f.Add(append(snap, 'x'), uint64(4), false, true)        // a byte too many
	f.Add(snap, uint64(5), true, true)                      // header names another record
	bad := bytes.Clone(snap)
	bad[len(bad)-1] ^= 1
	f.Add(bad, uint64(4), true, true) // checksum
	huge := bytes.Clone(snap)
	binary.LittleEndian.PutUint64(huge[16:], 4<<30) // 4 GiB claimed
	f.Add(huge, uint64(4), false, false)
	binary.LittleEndian.PutUint64(huge[16:], math.MaxUint64)
	f.Add(huge, uint64(4), true, false)
	f.Fuzz(func(t *testing.T, data []byte, seq uint64, withLog, withOlder bool) {
		if seq == olderSeq {
			withOlder = false // one file name
		}
		dir := t.TempDir()
		write := func(name string, b []byte) {
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		write(snapName(seq), data)
		total, logs := len(data), 0
		if withOlder {
			write(snapName(olderSeq), older)
			total += len(older)
		}
		if withLog {
			write(logName(1), good)
			total, logs = total+len(good), 1
		}
		var r *Recovered
		var err error
		if n := fuzzkit.Allocated(func() { r, _, err = recoverDir(dir, false) }); n > allocBound(total, logs) {
			t.Fatalf("recovering %d bytes of files allocated %d bytes", total, n)
		}
		// The reference: which snapshot is whole, which one wins.
		valid := len(data) >= snapHeaderSize+4 && string(data[:6]) == snapMagic &&
			binary.LittleEndian.Uint16(data[6:]) == formatVersion && binary.LittleEndian.Uint64(data[8:]) == seq &&
			binary.LittleEndian.Uint64(data[16:]) == uint64(len(data)-snapHeaderSize-4) &&
			crc32.Checksum(data[snapHeaderSize+4:], castagnoli) == binary.LittleEndian.Uint32(data[snapHeaderSize:])
		var wantSnap []byte
		var wantSeq uint64
		switch {
		case valid && (!withOlder || seq > olderSeq):
			wantSnap, wantSeq = data[snapHeaderSize+4:], seq
		case withOlder:
			wantSnap, wantSeq = older[snapHeaderSize+4:], olderSeq
		}
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("not a corruption error: %v", err)
			}
			switch {
			case wantSnap == nil && !withLog: // nothing to recover from
			case wantSeq == math.MaxUint64 && withLog: // record 2^64 cannot follow it
			default:
				t.Fatalf("refused (snapshot %d whole %v, older %v, log %v): %v", seq, valid, withOlder, withLog, err)
			}
			return
		}
		if wantSnap == nil && !withLog {
			t.Fatalf("a damaged snapshot with no log to replace it was accepted: %d bytes at %d", len(r.Snapshot), r.SnapshotSeq)
		}
		if !bytes.Equal(r.Snapshot, wantSnap) || (wantSnap == nil) != (r.Snapshot == nil) || r.SnapshotSeq != wantSeq {
			t.Fatalf("recovered snapshot %d (%d bytes), want %d (%d bytes)", r.SnapshotSeq, len(r.Snapshot), wantSeq, len(wantSnap))
		}
		// Streamed, the same snapshot is chosen, and reads back the same.
		sr, _, err := recoverDir(dir, true)
		if err != nil || sr.Snapshot != nil || sr.HasSnapshot() != (wantSnap != nil) || sr.SnapshotSeq != wantSeq {
			t.Fatalf("streamed: snapshot %d (found %v), %v; want %d (%v)", sr.SnapshotSeq, sr.HasSnapshot(), err, wantSeq, wantSnap != nil)
		}
		if wantSnap != nil {
			rc, err := sr.OpenSnapshot()
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(rc)
			rc.Close()
			if err != nil || !bytes.Equal(got, wantSnap) {
				t.Fatalf("streamed snapshot: %d bytes, %v; want %d", len(got), err, len(wantSnap))
			}
		}
		wantRecs := 0
		if withLog && wantSeq < fuzzRecords {
			wantRecs = fuzzRecords - int(wantSeq)
		}
		if len(r.Records) != wantRecs {
			t.Fatalf("snapshot at %d: %d records after it, want %d", wantSeq, len(r.Records), wantRecs)
		}
		for k, got := range r.Records {
			if !bytes.Equal(got, rec(int(wantSeq)+1+k)) {
				t.Fatalf("record %d: %q", int(wantSeq)+1+k, got)
			}
		}
	})
}
