// The master's state directory: every durable change of the core goes to
// a journal before the RPC that made it is answered, snapshots fold the
// journal now and then, and Start restores from both.

package server

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/gostore/gostore/gostore/journal"
	"github.com/gostore/gostore/gostore/master"
	"github.com/gostore/gostore/gostore/rpc"
	"github.com/gostore/gostore/gostore/wire"
)

// stateVersion is written before every snapshot's state: a master that
// finds another refuses to start rather than misread it.
const stateVersion = 1

type snapshotEnvelope struct {
	Version int           `msgpack:"v"`
	State   *master.State `msgpack:"s"`
}

// durability is a server's journal.
type durability struct {
	j   *journal.Journal
	log *slog.Logger
}

// openState opens dir's journal and reads the state it holds.
func openState(dir string, ackBeforeSync bool, log *slog.Logger) (*durability, *master.State, error) {
	j, rec, err := journal.Open(journal.Options{Dir: dir, AckBeforeSync: ackBeforeSync})
	if err != nil {
		return nil, nil, fmt.Errorf("state directory %s: %w", dir, err)
	}
	st := master.NewState()
	if rec.Snapshot != nil {
		var env snapshotEnvelope
		if err := msgpack.Unmarshal(rec.Snapshot, &env); err != nil || env.State == nil {
			j.Close()
			return nil, nil, fmt.Errorf("state directory %s: snapshot %d cannot be read: %v", dir, rec.SnapshotSeq, err)
		}
		if env.Version != stateVersion {
			j.Close()
			return nil, nil, fmt.Errorf("state directory %s: snapshot version %d, this master reads %d", dir, env.Version, stateVersion)
		}
		st = env.State
		fill(st)
	}
	for i, raw := range rec.Records {
		ch, err := master.DecodeChange(raw)
		if err != nil {
			j.Close()
			return nil, nil, fmt.Errorf("state directory %s: record %d cannot be read: %v", dir, rec.SnapshotSeq+uint64(i)+1, err)
		}
		st.Apply(ch)
	}
	log.Info("state directory read", "dir", dir, "snapshot", rec.SnapshotSeq, "records", len(rec.Records),
		"objects", len(st.Objects), "segments", len(st.Segments))
	return &durability{j: j, log: log}, st, nil
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
	if err == nil {
		_, err = d.j.Enqueue(b)
	}
	if err != nil {
		// The journal has failed: every durable RPC now answers an error
		// (wait below), so nothing more is acknowledged.
		d.log.Error("journal", "err", err)
	}
}

// wait returns once every change up to seq is durable; an error code when
// the journal cannot make it so.
func (d *durability) wait(seq uint64) error {
	if err := d.j.Wait(seq); err != nil {
		return wire.Errorf(wire.ErrFileWriteFail, "the master's journal: %v", err)
	}
	return nil
}

// snapshot folds the journal into a snapshot of core's state.
func (d *durability) snapshot(core *master.Core) error {
	var seq uint64
	st := core.DurableState(func() { seq = d.j.LastSeq() })
	b, err := msgpack.Marshal(&snapshotEnvelope{Version: stateVersion, State: st})
	if err != nil {
		return err
	}
	return d.j.Snapshot(seq, b)
}

// durableOps are the RPCs whose answers wait for every change made so
// far to be on disk: those that change the durable state, and those that
// hand out ranges (the ranges are in the journal before the writer can
// copy into them, so a restart holds them instead of giving them away).
var durableOps = []wire.Op{
	wire.OpClientLeave, wire.OpMountSegment, wire.OpUnmountSegment, wire.OpUnmountLocalDisk,
	wire.OpPutStart, wire.OpPutEnd, wire.OpPutRevoke, wire.OpRemove, wire.OpReplicaClear,
	wire.OpRemoveByRegex, wire.OpRemoveAll, wire.OpUpsertStart, wire.OpCreateTask, wire.OpTaskDone,
	wire.OpOffloadHeartbeat, wire.OpNotifyOffloaded, wire.OpEvictUntil, wire.OpRecoverDisk,
	wire.OpEvictDiskReplicas,
}

// waitForDisk wraps the handlers of r that must wait for the journal.
func (d *durability) waitForDisk(r *rpc.Server) {
	for _, op := range durableOps {
		r.Wrap(op, func(h rpc.Handler) rpc.Handler {
			return func(body []byte) (any, error) {
				resp, err := h(body)
				if werr := d.wait(d.j.LastSeq()); werr != nil {
					return nil, werr
				}
				return resp, err
			}
		})
	}
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
