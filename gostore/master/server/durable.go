// The master's state directory: every durable change of the core goes to
// a journal before the RPC that made it is answered, snapshots fold the
// journal now and then, and Start restores from both.

package server

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gostore/gostore/gostore/auth"
	"github.com/gostore/gostore/gostore/journal"
	"github.com/gostore/gostore/gostore/master"
	"github.com/gostore/gostore/gostore/master/ha"
	"github.com/gostore/gostore/gostore/rpc"
	"github.com/gostore/gostore/gostore/wire"
)

// stateVersion is the version of the msgpack envelope that snapshots held
// before state version 2 (master.StateMagic: the journal's own records,
// streamed). Such a snapshot is still read; none is written any more. A
// master that finds another version refuses to start rather than misread it.
const stateVersion = 1

type snapshotEnvelope struct {
	Version int           `msgpack:"v"`
	State   *master.State `msgpack:"s"`
}

// changeLog is where durable changes go: a local journal, or the leader's
// log on etcd (ha.Log).
type changeLog interface {
	Enqueue(rec []byte) (uint64, error)
	Wait(seq uint64) error
	LastSeq() uint64
	Snapshot(seq uint64, state []byte) error
	Close() error
}

// streamingLog is a changeLog that takes a snapshot as a stream (the local
// journal): the state is never whole in memory.
type streamingLog interface {
	SnapshotWith(seq uint64, write func(io.Writer) error) error
}

// durability is a server's change log.
type durability struct {
	j   changeLog
	log *slog.Logger
	// snapMu: one snapshot at a time.
	snapMu sync.Mutex
	// lastSnap is what the last snapshot wrote (nil: none yet), for
	// /metrics.
	lastSnap  atomic.Pointer[snapshotDone]
	snapshots atomic.Int64
	// limit, when set (the log on etcd), bounds how long an RPC waits for
	// its change to be taken: etcd without a quorum takes nothing, and the
	// caller gets failCode instead of hanging (reads keep being served).
	limit    time.Duration
	failCode wire.Code
	// mustSync is the last record that is more than a hold or a write's
	// completion (see master.Change.OnlyHolds and Completes): writeOps
	// answer once it is synced and their own holds are only written. A
	// completion frees no range a write start could be handed, so
	// concurrent puts' starts do not wait for each other's ends' syncs.
	mustSync atomic.Uint64
	// copies: the log copies a record at Enqueue (the local journal), so
	// record encodes into a pooled buffer; the log on etcd keeps it.
	copies bool
	// fetched: snapshots this HA master fetched from a leader before it
	// led (none for a standby that kept up).
	fetched int
}

// encodeBufs are record's buffers (*[]byte) when the log copies.
var encodeBufs = sync.Pool{New: func() any { b := make([]byte, 0, 256); return &b }}

// savedState is a state to restore: whole (the log on etcd, a version-1
// snapshot, records without a snapshot), or a version-2 snapshot read
// from its file as the core restores it, with the changes after it (the
// local journal: the state of millions of objects is never whole in
// memory, see master.Core.RestoreFrom).
type savedState struct {
	st       *master.State
	snapshot *journal.Recovered // streamed: OpenSnapshot
	after    []master.Change
}

// restore installs the saved state into core.
func (s *savedState) restore(core *master.Core) (master.RestoreReport, error) {
	if s.snapshot == nil {
		return core.Restore(s.st), nil
	}
	r, err := s.snapshot.OpenSnapshot()
	if err != nil {
		return master.RestoreReport{}, err
	}
	defer r.Close()
	rep, err := core.RestoreFrom(r, s.after)
	if err != nil {
		return rep, fmt.Errorf("snapshot %d cannot be read: %w", s.snapshot.SnapshotSeq, err)
	}
	return rep, nil
}

// openState opens the state directory's journal and what it holds to
// restore; it sets opts.RestoreQuarantine for what it found.
func openState(opts *Options, log *slog.Logger) (*durability, *savedState, error) {
	dir := opts.StateDir
	j, rec, err := journal.Open(journal.Options{Dir: dir, AckBeforeSync: opts.AckBeforeSync, StreamSnapshot: true})
	if err != nil {
		return nil, nil, fmt.Errorf("--snapshot_backup_dir=%s: %w", dir, err)
	}
	saved, err := savedOf(rec)
	if err != nil {
		j.Close()
		return nil, nil, fmt.Errorf("--snapshot_backup_dir=%s: %w", dir, err)
	}
	log.Info("state directory read", "dir", dir, "snapshot", rec.SnapshotSeq, "records", len(rec.Records))
	if q := restoreQuarantine(*opts, rec.Rebooted, rec.LastWrite, time.Now()); q != opts.RestoreQuarantine {
		log.Warn("the machine restarted since the journal was last written: restored segments take no new "+
			"object for a while (writers answered before their ranges were synced may still be copying)",
			"last_write", rec.LastWrite.Format(time.RFC3339Nano), "quarantine", q)
		opts.RestoreQuarantine = q
	}
	return &durability{j: j, log: log, copies: true}, saved, nil
}

// savedOf is what rec holds to restore: a version-2 snapshot is streamed,
// a version-1 one (a msgpack envelope) read whole.
func savedOf(rec *journal.Recovered) (*savedState, error) {
	var snapshot []byte
	if rec.HasSnapshot() {
		r, err := rec.OpenSnapshot()
		if err != nil {
			return nil, err
		}
		defer r.Close()
		br := bufio.NewReader(r)
		if head, _ := br.Peek(len(master.StateMagic)); string(head) == master.StateMagic {
			saved := &savedState{snapshot: rec}
			for i, raw := range rec.Records {
				ch, err := master.DecodeChange(raw)
				if err != nil {
					return nil, fmt.Errorf("record %d cannot be read: %v", rec.SnapshotSeq+uint64(i)+1, err)
				}
				saved.after = append(saved.after, ch)
			}
			return saved, nil
		}
		if snapshot, err = io.ReadAll(br); err != nil {
			return nil, err
		}
	}
	st, err := stateOf(snapshot, rec.SnapshotSeq, rec.Records)
	return &savedState{st: st}, err
}

// restoreQuarantine is how long restored segments take no new object.
// After a crash of the process the journal holds every record it wrote,
// synced or not, and it is what opts asks (usually nothing). After a
// restart of the machine, records only written may be gone: the ranges
// of writes answered before their sync (writeOps; every change with
// --journal_ack_before_sync), whose writers on other hosts may still be
// copying. The segments then stay closed until PutStartDiscardTimeout
// after the journal's last write, when the master would take such a write
// over anyway; a writer still copying after that is the window left open.
func restoreQuarantine(opts Options, rebooted bool, lastWrite, now time.Time) time.Duration {
	if !rebooted {
		return opts.RestoreQuarantine
	}
	discard := opts.PutStartDiscardTimeout
	if discard <= 0 {
		discard = master.DefaultPutStartDiscardTimeout
	}
	return max(opts.RestoreQuarantine, lastWrite.Add(discard).Sub(now), 0)
}

// campaign waits until this master leads the cluster on etcd, following
// the log meanwhile (a hot standby: its state keeps up with the leader's
// log), then reads the rest of the log and serves. Its state starts from
// its own newest snapshot in opts.StateDir; where the log on etcd no
// longer reaches back to it, from the leader's snapshot (fetched over the
// leader's HTTP port). A master that wins but cannot make its state meet
// the log (the leader that trimmed it is gone, its snapshot with it)
// gives the leadership back and campaigns again: it never serves a state
// with a gap.
func campaign(opts Options, addr string, guard *auth.Auth, log *slog.Logger) (*durability, *master.State, *ha.Leader, error) {
	hopts := ha.Options{Endpoints: opts.EtcdEndpoints, Prefix: "/gostore/" + opts.ClusterID + "/master/",
		ID: addr, TTL: opts.HALeaseTTL}
	if hopts.TTL <= 0 {
		hopts.TTL = 5 * time.Second
	}
	f, err := newFollower(hopts, opts, guard, log)
	if err != nil {
		return nil, nil, nil, err
	}
	log.Info("standby: campaigning for leadership", "etcd", opts.EtcdEndpoints, "advertise", addr,
		"own_snapshot", f.last)
	for {
		f.start()
		leader, err := ha.Campaign(context.Background(), hopts)
		if err != nil {
			f.finish(context.Background())
			return nil, nil, nil, fmt.Errorf("--enable_ha: campaign on --etcd_endpoints=%s: %w", strings.Join(opts.EtcdEndpoints, ";"), err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		behind, err := f.finish(ctx)
		cancel()
		if err == nil {
			log.Info("leading: state read from etcd", "term", leader.Term(), "last", f.last, "read_at_takeover", f.last-behind,
				"snapshots_fetched", f.fetched, "objects", len(f.st.Objects), "segments", len(f.st.Segments))
			// A write waits a third of the lease for etcd at most: long
			// enough for an etcd leader election, short enough for the
			// caller to retry.
			return &durability{j: newHALog(leader, f.last, opts.StateDir, opts.HATail, hopts.TTL, log), log: log,
				limit: max(hopts.TTL/3, time.Second), failCode: wire.ErrEtcdOperation, fetched: f.fetched}, f.st, leader, nil
		}
		log.Error("won the leadership but cannot serve the whole state: giving it back, campaigning again after a lease",
			"err", err, "last", f.last)
		leader.Resign(context.Background())
		time.Sleep(hopts.TTL) // another master (one that kept up) may take it meanwhile
	}
}

// follower keeps a standby's state up with the leader's log, and its own
// snapshot on disk within a snapshot interval of it.
type follower struct {
	hopts   ha.Options
	dir     string
	auth    *auth.Auth
	every   time.Duration // own snapshots at most this often
	log     *slog.Logger
	st      *master.State
	last    uint64 // the last record applied to st
	saved   uint64 // the record the newest snapshot on disk includes
	savedAt time.Time
	fetched int // snapshots fetched from the leader
	stop    chan struct{}
	done    chan struct{}
}

// newFollower starts from the newest snapshot in the state directory.
func newFollower(hopts ha.Options, opts Options, guard *auth.Auth, log *slog.Logger) (*follower, error) {
	seq, snap, err := journal.NewestSnapshot(opts.StateDir)
	if err != nil {
		return nil, fmt.Errorf("--snapshot_backup_dir=%s: %w", opts.StateDir, err)
	}
	st, err := stateOf(snap, seq, nil)
	if err != nil {
		return nil, fmt.Errorf("--snapshot_backup_dir=%s: %w", opts.StateDir, err)
	}
	every := opts.SnapshotInterval
	if every <= 0 {
		every = 10 * time.Minute
	}
	return &follower{hopts: hopts, dir: opts.StateDir, auth: guard, every: every, log: log, st: st, last: seq,
		saved: seq, savedAt: time.Now()}, nil
}

// start follows the log until finish.
func (f *follower) start() {
	f.stop, f.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(f.done)
		t := time.NewTicker(f.hopts.TTL / 2)
		defer t.Stop()
		for {
			ctx, cancel := context.WithTimeout(context.Background(), f.hopts.TTL)
			if err := f.catchUp(ctx); err != nil {
				f.log.Warn("standby: following the log", "err", err)
			}
			cancel()
			f.save()
			select {
			case <-f.stop:
				return
			case <-t.C:
			}
		}
	}()
}

// catchUp applies the records after f.last. Where the log on etcd no
// longer holds the next one (trimmed), it starts over from the leader's
// snapshot; from a snapshot in the old format on etcd where one is newer
// than f.last. Trimmed is read before the log: a trim meanwhile leaves
// ReadLog a gap at its start, and it then reads nothing.
func (f *follower) catchUp(ctx context.Context) error {
	trimmed, err := ha.Trimmed(ctx, f.hopts)
	if err != nil {
		return err
	}
	if f.last < trimmed {
		if err := f.fetch(ctx, trimmed); err != nil {
			return err
		}
	}
	recs, err := ha.ReadLog(ctx, f.hopts, f.last+1)
	if err != nil {
		return err
	}
	for _, raw := range recs {
		ch, err := master.DecodeChange(raw)
		if err != nil {
			return fmt.Errorf("record %d cannot be read: %v", f.last+1, err)
		}
		f.st.Apply(ch)
		f.last++ // per record: a later catch-up never applies one twice
	}
	snap, err := ha.SnapshotSeq(ctx, f.hopts)
	if err != nil || snap <= f.last {
		return err
	}
	rec, err := ha.Recover(ctx, f.hopts)
	if err != nil {
		return err
	}
	st, err := stateOf(rec.Snapshot, rec.SnapshotSeq, rec.Records)
	if err != nil {
		return err
	}
	f.log.Info("standby: read a snapshot in the old format from etcd", "seq", rec.SnapshotSeq, "bytes", len(rec.Snapshot))
	f.st, f.last = st, rec.LastSeq()
	return nil
}

// fetchTimeout bounds one snapshot transfer from the leader (hundreds of
// MB at 10^7 objects take seconds on a LAN).
const fetchTimeout = 10 * time.Minute

// fetch replaces f's state with the leader's newest snapshot, which must
// include record trimmed at least.
func (f *follower) fetch(ctx context.Context, trimmed uint64) error {
	url, err := ha.SnapshotSource(ctx, f.hopts)
	if err != nil {
		return err
	}
	if url == "" {
		return fmt.Errorf("this master's state ends at record %d, the log on etcd no longer holds records up to %d, "+
			"and no leader serves a snapshot", f.last, trimmed)
	}
	fctx, cancel := context.WithTimeout(context.Background(), fetchTimeout)
	defer cancel()
	start := time.Now()
	seq, st, err := fetchSnapshot(fctx, url, f.auth, f.dir)
	if err != nil {
		return err
	}
	if seq < trimmed {
		return fmt.Errorf("the leader's snapshot includes records up to %d, the log on etcd starts after %d", seq, trimmed)
	}
	f.st, f.last, f.saved, f.savedAt = st, seq, seq, time.Now()
	f.fetched++
	f.log.Info("standby: fetched the leader's snapshot", "seq", seq, "objects", len(st.Objects), "took", time.Since(start))
	return nil
}

// save writes f's state to its own disk when it moved on and the last
// save is an interval old: a restart then starts from there.
func (f *follower) save() {
	if f.last == f.saved || time.Since(f.savedAt) < f.every {
		return
	}
	err := journal.SaveSnapshotWith(f.dir, f.last, func(w io.Writer) error {
		_, err := f.st.WriteTo(w)
		return err
	})
	if err != nil {
		f.log.Warn("standby: snapshot of the followed state", "err", err)
		return
	}
	f.saved, f.savedAt = f.last, time.Now()
}

// finish stops following and catches up once more: the last record
// before that catch-up.
func (f *follower) finish(ctx context.Context) (before uint64, err error) {
	close(f.stop)
	<-f.done
	before = f.last
	return before, f.catchUp(ctx)
}

// stateOf is the state a snapshot and the records after it hold.
func stateOf(snapshot []byte, snapSeq uint64, records [][]byte) (*master.State, error) {
	st := master.NewState()
	if bytes.HasPrefix(snapshot, []byte(master.StateMagic)) {
		if err := master.ReadState(bytes.NewReader(snapshot), st); err != nil {
			return nil, fmt.Errorf("snapshot %d cannot be read: %v", snapSeq, err)
		}
	} else if snapshot != nil {
		var env snapshotEnvelope
		if err := wire.Unmarshal(snapshot, &env); err != nil || env.State == nil {
			return nil, fmt.Errorf("snapshot %d cannot be read: %v", snapSeq, err)
		}
		if env.Version != stateVersion {
			return nil, fmt.Errorf("snapshot version %d, this master reads %d", env.Version, stateVersion)
		}
		st = env.State
		fill(st)
	}
	for i, raw := range records {
		ch, err := master.DecodeChange(raw)
		if err != nil {
			return nil, fmt.Errorf("record %d cannot be read: %v", snapSeq+uint64(i)+1, err)
		}
		st.Apply(ch)
	}
	return st, nil
}

// fill makes a decoded State's nil maps empty.
func fill(st *master.State) {
	empty := master.NewState()
	if st.Segments == nil {
		st.Segments = empty.Segments
	}
	if st.Objects == nil {
		st.Objects = empty.Objects
	}
	if st.Drops == nil {
		st.Drops = empty.Drops
	}
}

// record is the core's OnChange: it runs under the core's locks, so it
// only encodes and enqueues; the RPC waits for the disk after (see
// durableOps).
func (d *durability) record(ch master.Change) {
	var buf *[]byte
	if d.copies {
		buf = encodeBufs.Get().(*[]byte)
	} else {
		b := make([]byte, 0, 64+len(ch.Key))
		buf = &b
	}
	b, err := master.EncodeChange((*buf)[:0], ch)
	var seq uint64
	if err == nil {
		seq, err = d.j.Enqueue(b)
	}
	if d.copies && cap(b) <= 64<<10 {
		*buf = b
		encodeBufs.Put(buf)
	}
	for !ch.OnlyHolds && !ch.Completes && err == nil {
		if last := d.mustSync.Load(); last >= seq || d.mustSync.CompareAndSwap(last, seq) {
			break
		}
	}
	if err != nil {
		// The journal has failed: every durable RPC now answers an error
		// (wait below), so nothing more is acknowledged.
		d.log.Error("journal", "err", err)
	}
}

// wait returns once every change up to seq is durable; an error code when
// the log cannot make it so (in time, for the log on etcd).
func (d *durability) wait(seq uint64) error {
	return d.await(d.j.Wait, seq)
}

// waitHeld returns once every change up to seq is durable, except that the
// holds and write completions after the last other change need only be
// written (a completion, lost in a crash, leaves its write's ranges held as
// its start recorded them, and frees nothing to hand out): they then
// survive a crash of the process, and one of the machine is covered by the
// quarantine after a reboot (see restoreQuarantine). The log on etcd has no
// such middle state: there it is wait.
func (d *durability) waitHeld(seq uint64) error {
	w, ok := d.j.(interface{ WaitWritten(uint64) error })
	if !ok {
		return d.wait(seq)
	}
	if err := d.wait(min(d.mustSync.Load(), seq)); err != nil {
		return err
	}
	return d.await(w.WaitWritten, seq)
}

func (d *durability) await(wait func(uint64) error, seq uint64) error {
	if d.limit <= 0 {
		if err := wait(seq); err != nil {
			return wire.Errorf(wire.ErrFileWriteFail, "the master's journal: %v", err)
		}
		return nil
	}
	done := make(chan error, 1)
	go func() { done <- wait(seq) }()
	t := time.NewTimer(d.limit)
	defer t.Stop()
	select {
	case err := <-done:
		if err != nil {
			return wire.Errorf(d.failCode, "the master's log: %v", err)
		}
		return nil
	case <-t.C:
		why := "no answer"
		if r, ok := d.j.(interface{ Retrying() error }); ok && r.Retrying() != nil {
			why = r.Retrying().Error()
		}
		return wire.Errorf(d.failCode, "the change was not logged within %v (%s): not acknowledged", d.limit, why)
	}
}

// snapshotDone is what one snapshot wrote and what it cost.
type snapshotDone struct {
	seq      uint64
	info     master.SnapshotInfo
	duration time.Duration
}

// snapshot folds the journal into a snapshot of core's state while the
// core serves (master.Core.WriteState: a fuzzy snapshot). The log's
// position is read first: the snapshot names it, and every record after
// it is replayed on top at the next start.
func (d *durability) snapshot(core *master.Core) error {
	d.snapMu.Lock()
	defer d.snapMu.Unlock()
	start := time.Now()
	seq := d.j.LastSeq()
	var info master.SnapshotInfo
	write := func(w io.Writer) error {
		var err error
		info, err = core.WriteState(w)
		return err
	}
	var err error
	if sl, ok := d.j.(streamingLog); ok {
		err = sl.SnapshotWith(seq, write)
	} else { // the log on etcd takes the state whole
		var buf bytes.Buffer
		if err = write(&buf); err == nil {
			err = d.j.Snapshot(seq, buf.Bytes())
		}
	}
	if err != nil {
		return err
	}
	done := &snapshotDone{seq: seq, info: info, duration: time.Since(start)}
	d.lastSnap.Store(done)
	d.snapshots.Add(1)
	d.log.Info("snapshot taken", "seq", seq, "objects", info.Objects, "segments", info.Segments,
		"holds", info.Holds, "drops", info.Drops, "bytes", info.Bytes, "duration", done.duration,
		"longest_lock_hold", info.LongestHold)
	return nil
}

// registerMetrics adds the snapshots' series to reg.
func (d *durability) registerMetrics(reg *prometheus.Registry) {
	last := func(f func(*snapshotDone) float64) func() float64 {
		return func() float64 {
			if s := d.lastSnap.Load(); s != nil {
				return f(s)
			}
			return 0
		}
	}
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "gostore_master_snapshot_total",
		Help: "Snapshots of the durable state taken."}, func() float64 { return float64(d.snapshots.Load()) }))
	for _, g := range []struct {
		name, help string
		f          func(*snapshotDone) float64
	}{
		{"gostore_master_snapshot_last_seq", "The journal record the last snapshot names.",
			func(s *snapshotDone) float64 { return float64(s.seq) }},
		{"gostore_master_snapshot_last_objects", "Objects in the last snapshot.",
			func(s *snapshotDone) float64 { return float64(s.info.Objects) }},
		{"gostore_master_snapshot_last_bytes", "Bytes of the last snapshot's state.",
			func(s *snapshotDone) float64 { return float64(s.info.Bytes) }},
		{"gostore_master_snapshot_last_seconds", "How long the last snapshot took, written and synced.",
			func(s *snapshotDone) float64 { return s.duration.Seconds() }},
		{"gostore_master_snapshot_last_lock_hold_seconds",
			"The longest the last snapshot held one of the core's locks (the most a call waited for it).",
			func(s *snapshotDone) float64 { return s.info.LongestHold.Seconds() }},
	} {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: g.name, Help: g.help}, last(g.f)))
	}
}

// durableOps are the RPCs whose answers wait for every change made so
// far to be on disk: those that change the durable state, and those that
// hand out ranges (the ranges are in the journal before the writer can
// copy into them, so a restart holds them instead of giving them away).
var durableOps = []wire.Op{
	wire.OpClientLeave, wire.OpMountSegment, wire.OpUnmountSegment, wire.OpUnmountLocalDisk,
	wire.OpPutEnd, wire.OpPutRevoke, wire.OpRemove, wire.OpReplicaClear,
	wire.OpRemoveByRegex, wire.OpRemoveAll, wire.OpCreateTask, wire.OpTaskDone,
	wire.OpOffloadHeartbeat, wire.OpNotifyOffloaded, wire.OpEvictUntil, wire.OpRecoverDisk,
	wire.OpEvictDiskReplicas,
}

// writeOps start writes: their answers wait for the disk as durableOps'
// do, except that the new writes' ranges need only be written (waitHeld).
// The sync then happens while the writer copies, and a put costs one
// fsync (its end's), not two.
var writeOps = []wire.Op{wire.OpPutStart, wire.OpUpsertStart}

// waitForDisk wraps the handlers of r that must wait for the journal.
func (d *durability) waitForDisk(r *rpc.Server) {
	wrap := func(ops []wire.Op, wait func(uint64) error) {
		for _, op := range ops {
			r.Wrap(op, func(h rpc.Handler) rpc.Handler {
				return func(body []byte) (any, error) {
					resp, err := h(body)
					if werr := wait(d.j.LastSeq()); werr != nil {
						return nil, werr
					}
					return resp, err
				}
			})
		}
	}
	wrap(durableOps, d.wait)
	wrap(writeOps, d.waitHeld)
}

// snapshotLoop takes a snapshot every interval until stop closes, then a
// last one.
func (s *Server) snapshotLoop(interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	var full chan struct{} // under HA: the log on etcd since the last snapshot reached its bound
	if h, ok := s.state.j.(*haLog); ok {
		full = h.full
	}
	for {
		select {
		case <-s.stop:
			return
		case <-full:
			if err := s.state.snapshot(s.core); err != nil {
				s.log.Error("snapshot failed", "err", err)
			}
		case <-t.C:
			if err := s.state.snapshot(s.core); err != nil {
				s.log.Error("snapshot failed", "err", err)
			}
		}
	}
}
