// hastate.go: an HA master's own state directory. The change log is on
// etcd (ha.Log); snapshots are files in --snapshot_backup_dir, the
// leader's served to standbys over its HTTP port (/ha/snapshot), and the
// log on etcd is trimmed to a bounded tail after each.

package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gostore/gostore/gostore/auth"
	"github.com/gostore/gostore/gostore/journal"
	"github.com/gostore/gostore/gostore/master"
	"github.com/gostore/gostore/gostore/master/ha"
)

// snapshotPath is where a leader serves its newest snapshot file.
const snapshotPath = "/ha/snapshot"

// snapshotSeqHeader names the record the served snapshot includes.
const snapshotSeqHeader = "Gostore-Snapshot-Seq"

// earlyFactor: the log since the last snapshot that brings the next one
// early, in tails. A snapshot costs the whole state (seconds at 10^7
// objects); one per tail's worth of writes would take them back to back
// under a heavy write load.
const earlyFactor = 4

// haLog is the HA leader's changeLog: records on etcd, each snapshot a
// file on its own disk, after which the log on etcd is trimmed.
type haLog struct {
	*ha.Log
	leader *ha.Leader
	dir    string
	tail   ha.Tail
	ttl    time.Duration
	log    *slog.Logger
	// full is signalled when the log since the last snapshot reaches
	// earlyFactor times the tail's bound: a snapshot then keeps etcd
	// within about earlyFactor+1 times it, however fast the writes come.
	full   chan struct{}
	since  atomic.Uint64 // records enqueued since the last snapshot
	sinceB atomic.Int64  // their bytes
	snapMu sync.Mutex    // one snapshot at a time (the loop's, an early one's, the stop's)
}

func newHALog(leader *ha.Leader, last uint64, dir string, tail ha.Tail, ttl time.Duration, log *slog.Logger) *haLog {
	if tail.Records == 0 {
		tail.Records = ha.DefaultTail.Records
	}
	if tail.Bytes == 0 {
		tail.Bytes = ha.DefaultTail.Bytes
	}
	return &haLog{Log: ha.OpenLog(leader, last), leader: leader, dir: dir, tail: tail, ttl: ttl, log: log,
		full: make(chan struct{}, 1)}
}

func (h *haLog) Enqueue(rec []byte) (uint64, error) {
	seq, err := h.Log.Enqueue(rec)
	if err == nil {
		n, b := h.since.Add(1), h.sinceB.Add(int64(len(rec)+4))
		if n >= earlyFactor*h.tail.Records || b >= earlyFactor*h.tail.Bytes {
			select {
			case h.full <- struct{}{}:
			default:
			}
		}
	}
	return seq, err
}

// SnapshotWith writes the state to the leader's own disk, then trims the log on
// etcd to what a standby needs beyond it. The trim is fenced: a deposed
// leader's fails with ErrDeposed (and its Lost closes).
func (h *haLog) SnapshotWith(seq uint64, write func(io.Writer) error) error {
	h.snapMu.Lock()
	defer h.snapMu.Unlock()
	h.since.Store(h.Log.LastSeq() - seq)
	h.sinceB.Store(0)
	// Every record the state includes is in etcd first: a snapshot on disk
	// then only ever holds the cluster's history, never a change a deposed
	// leader made that no log kept (its restart starts from this file).
	if err := h.Log.Wait(seq); err != nil {
		return fmt.Errorf("snapshot %d: its records are not all on etcd: %w", seq, err)
	}
	if err := journal.SaveSnapshotWith(h.dir, seq, write); err != nil {
		return fmt.Errorf("--snapshot_backup_dir=%s: %w", h.dir, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*h.ttl)
	defer cancel()
	if err := h.leader.Trim(ctx, seq, h.tail); err != nil {
		return fmt.Errorf("trimming the log on etcd after snapshot %d: %w", seq, err)
	}
	return nil
}

// Snapshot is SnapshotWith for a state in bytes.
func (h *haLog) Snapshot(seq uint64, state []byte) error {
	return h.SnapshotWith(seq, func(w io.Writer) error {
		_, err := w.Write(state)
		return err
	})
}

// serveSnapshot answers GET /ha/snapshot with the newest snapshot file of
// dir, as it is on disk (ReceiveSnapshot's input).
func serveSnapshot(dir string, log *slog.Logger) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			w.Header().Set("Allow", http.MethodGet)
			http.Error(w, snapshotPath+" answers GET only", http.StatusMethodNotAllowed)
			return
		}
		seq, f, size, err := journal.OpenNewestSnapshot(dir)
		if err != nil {
			http.Error(w, "no snapshot to serve: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		defer f.Close()
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
		w.Header().Set(snapshotSeqHeader, strconv.FormatUint(seq, 10))
		start := time.Now()
		n, err := io.Copy(w, f)
		if err != nil {
			log.Warn("ha: sending a snapshot to a standby broke off", "remote", r.RemoteAddr, "seq", seq,
				"sent", n, "of", size, "err", err)
			return
		}
		log.Info("ha: snapshot sent to a standby", "remote", r.RemoteAddr, "seq", seq, "bytes", n,
			"took", time.Since(start))
	}
}

// fetchSnapshot gets the leader's newest snapshot from url into dir (see
// journal.ReceiveSnapshot): the record it includes and the state it holds.
// A snapshot whose state does not decode is refused before it is
// installed.
func fetchSnapshot(ctx context.Context, url string, a *auth.Auth, dir string) (uint64, *master.State, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, fmt.Errorf("the leader's snapshot at %q: %w", url, err)
	}
	a.Authorize(req)
	c := a.HTTPClient()
	defer c.CloseIdleConnections()
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("the leader's snapshot: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return 0, nil, fmt.Errorf("the leader's snapshot at %s: %s: %q", url, resp.Status, msg)
	}
	// The file's own header says which record it includes; the HTTP
	// header is for people looking on.
	var st *master.State
	seq, _, err := journal.ReceiveSnapshot(dir, resp.Body, func(seq uint64, state []byte) (err error) {
		st, err = stateOf(state, seq, nil)
		return err
	})
	if err != nil {
		return 0, nil, fmt.Errorf("the leader's snapshot at %s: %w", url, err)
	}
	return seq, st, nil
}
