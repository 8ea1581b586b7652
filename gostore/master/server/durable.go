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
	// mustSync is the last record that is more than a hold (see
	// master.Change.OnlyHolds): writeOps answer once it is synced and
	// their own holds are only written.
	mustSync atomic.Uint64
}

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
	return &durability{j: j, log: log}, saved, nil
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
// log), then reads the rest of the log and serves.
func campaign(opts Options, addr string, log *slog.Logger) (*durability, *master.State, *ha.Leader, error) {
	hopts := ha.Options{Endpoints: opts.EtcdEndpoints, Prefix: "/gostore/" + opts.ClusterID + "/master/",
		ID: addr, TTL: opts.HALeaseTTL}
	if hopts.TTL <= 0 {
		hopts.TTL = 5 * time.Second
	}
	log.Info("standby: campaigning for leadership", "etcd", opts.EtcdEndpoints, "advertise", addr)
	f := follow(hopts, log)
	leader, err := ha.Campaign(context.Background(), hopts)
	if err != nil {
		f.finish(context.Background())
		return nil, nil, nil, fmt.Errorf("--enable_ha: campaign on --etcd_endpoints=%s: %w", strings.Join(opts.EtcdEndpoints, ";"), err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, behind, last, err := f.finish(ctx)
	if err != nil {
		leader.Resign(context.Background())
		return nil, nil, nil, fmt.Errorf("reading the log on etcd: %w", err)
	}
	log.Info("leading: state read from etcd", "term", leader.Term(), "last", last, "read_at_takeover", last-behind,
		"objects", len(st.Objects), "segments", len(st.Segments))
	// A write waits a third of the lease for etcd at most: long enough for
	// an etcd leader election, short enough for the caller to retry.
	return &durability{j: ha.OpenLog(leader, last), log: log, limit: max(hopts.TTL/3, time.Second),
		failCode: wire.ErrEtcdOperation}, st, leader, nil
}

// follower keeps a standby's state up with the leader's log.
type follower struct {
	hopts ha.Options
	log   *slog.Logger
	st    *master.State
	last  uint64 // the last record applied to st
	stop  chan struct{}
	done  chan struct{}
}

func follow(hopts ha.Options, log *slog.Logger) *follower {
	f := &follower{hopts: hopts, log: log, st: master.NewState(), stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(f.done)
		t := time.NewTicker(hopts.TTL / 2)
		defer t.Stop()
		for {
			ctx, cancel := context.WithTimeout(context.Background(), hopts.TTL)
			if err := f.catchUp(ctx); err != nil {
				log.Warn("standby: following the log", "err", err)
			}
			cancel()
			select {
			case <-f.stop:
				return
			case <-t.C:
			}
		}
	}()
	return f
}

// catchUp applies the records after f.last; when a snapshot has folded
// records it never read (they are gone from the log), it starts over from
// that snapshot. The snapshot's head is read after the tail: a snapshot
// taken meanwhile is seen.
func (f *follower) catchUp(ctx context.Context) error {
	recs, err := ha.ReadLog(ctx, f.hopts, f.last+1)
	if err != nil {
		return err
	}
	for i, raw := range recs {
		ch, err := master.DecodeChange(raw)
		if err != nil {
			return fmt.Errorf("record %d cannot be read: %v", f.last+uint64(i)+1, err)
		}
		f.st.Apply(ch)
	}
	f.last += uint64(len(recs))
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
	f.st, f.last = st, rec.LastSeq()
	return nil
}

// finish stops following and catches up once more: the state to lead
// with, and the last record before and after that catch-up.
func (f *follower) finish(ctx context.Context) (st *master.State, before, last uint64, err error) {
	close(f.stop)
	<-f.done
	before = f.last
	err = f.catchUp(ctx)
	return f.st, before, f.last, err
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
	b, err := master.EncodeChange(make([]byte, 0, 64+len(ch.Key)), ch)
	var seq uint64
	if err == nil {
		seq, err = d.j.Enqueue(b)
	}
	for !ch.OnlyHolds && err == nil {
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
// holds after the last other change need only be written: they then
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
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			if err := s.state.snapshot(s.core); err != nil {
				s.log.Error("snapshot failed", "err", err)
			}
		}
	}
}
