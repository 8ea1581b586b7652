// Package journal keeps the master's metadata changes durable in a local
// directory: an append-only log of records and, now and then, a snapshot
// that lets the log before it go.
//
// # What it owns
//
// A Journal owns its directory: log files (log-<first seq>.wal) and
// snapshot files (snap-<seq>.gsnap), and the boot file (boot: the boot of
// the machine that last opened it), nothing else. Records and snapshots
// are opaque bytes here; what they mean is the master's business. Every
// record gets the next sequence number (1, 2, ...); a snapshot names the
// last sequence number it includes.
//
// # Formats
//
// A log file starts with a 16-byte header (magic "GSWAL\x00", version u16,
// the sequence number of its first record u64), then frames:
//
//	u32 payload length | u32 CRC-32C of the payload | payload
//
// A log file is preallocated to Options.SegmentBytes when it is started
// (so that a sync, fdatasync, writes no new length) and cut to its last
// frame when it is closed. At least once a second a sync is a full
// fsync, so that the file's modification time on disk lags its last
// synced write by at most that (Recovered.LastWrite adds the second). No record is empty: a frame length of 0 is
// space not yet written, and zeros from there to the end of the file
// end its records.
//
// A snapshot file is a 24-byte header (magic "GSSNAP", version u16, the
// sequence number it covers u64, payload length u64), the payload's
// CRC-32C (u32), then the payload; it is written to a temporary name,
// synced and renamed into place, so a snapshot is either whole or absent.
// SnapshotWith streams the payload into the file (the checksum computed
// on the way, the header's length and checksum filled in last), so a
// state is never whole in memory; the files it writes are the same. With
// Options.StreamSnapshot the way back is streamed too: Open checks the
// newest snapshot's checksum in one pass through a small buffer, and
// Recovered.OpenSnapshot reads it from its file, checking it again.
//
// # Invariants
//
//   - Append returns only once its record is on disk (written and synced):
//     a change the caller acknowledges after Append survives a crash.
//     Concurrent Appends share one write and one sync (group commit). The
//     waiters do the writing and syncing themselves (the first to find
//     its record unwritten writes every pending record in one call; one
//     that finds it written and unsynced syncs), one write and one sync
//     at a time, a write while a sync runs; no goroutine hand-off.
//   - With Options.AckBeforeSync, Append returns once the record is
//     written, and the writer syncs at least every Options.SyncInterval:
//     a crash loses at most that window.
//   - WaitWritten returns once a record is written, before its sync: it
//     survives a crash of the process, not necessarily of the machine.
//     Records only written share the next waited record's sync; records
//     nobody waits for are written and synced within SyncInterval.
//     Open says which may have happened (Recovered.Rebooted: another boot
//     id than the one that last opened the directory).
//   - Open recovers the newest valid snapshot and every record after it,
//     in order, with no gap. A torn tail of the last log file (a crash
//     mid-write: a short frame, a frame of length 0, a bad frame with a
//     zero sector in it or only zeros after it) is cut off; a bad frame
//     anywhere else, or a gap, is corruption and Open refuses with
//     ErrCorrupt rather than serve a state that never existed.
//   - Nothing read from disk is trusted: lengths are bounded (MaxRecord)
//     before anything is allocated.
//   - Once a write or sync fails, the journal is failed: every later
//     Append returns the error (a record whose fate is unknown must not be
//     followed by acknowledged ones).
//
// # The caller's duties
//
// A directory of snapshots alone (an HA master's: its log is on etcd) is
// kept with SaveSnapshot and NewestSnapshot, without Open; a snapshot file
// moves between machines whole with OpenNewestSnapshot (the sender) and
// ReceiveSnapshot (the receiver, which checks every byte, holds none in
// memory until they prove whole, and installs nothing otherwise).
//
// Call Open once per directory (Open takes no lock against a second
// process: the master's own lock on the state directory does that), apply
// what it recovered, then Append each change before acknowledging it.
// Call Snapshot (or SnapshotWith) with a state that includes at least the
// records up to the sequence number given, and of the records after it
// only changes that replaying them again leaves as they are (each record
// sets the whole state of what it names): recovery replays every record
// after that number on top of the snapshot. The master's fuzzy snapshot
// reads the number first and the state after, while records are
// appended. One snapshot at a time. Close when done.
package journal
