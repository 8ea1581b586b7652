// promote.go runs the master's promotions (--promotion_on_hit): this
// tier's disk copies that reads want back in memory are loaded into the
// ranges of the client's own segment the master allocated for them.

package ssdtier

import (
	"time"

	"github.com/gostore/gostore/gostore/grant"
	"github.com/gostore/gostore/gostore/wire"
)

// promote runs each task: load the copy straight into the target range
// (checksum verified: a corrupt copy is dropped, never promoted), then end
// the task with the outcome, which makes the range a replica on OK.
func (t *Tier) promote(tasks []wire.PromotionTask) {
	for _, p := range tasks {
		code := wire.OK
		seg := t.host.OwnSegment(p.Target.SegID)
		switch {
		case seg == nil || p.Target.Offset > uint64(len(seg)) || p.Size > uint64(len(seg))-p.Target.Offset:
			// Not our host memory, or not a range of it: the master's
			// view differs from ours (a remount); nothing is written.
			code = wire.ErrInvalidParams
			t.log.Warn("promotion target is not a range of this client's host-memory segment",
				"key", p.Key, "seg", p.Target.SegID, "offset", p.Target.Offset, "size", p.Size)
		case grantExpired(p.Target.Grant):
			// The master has ended the task by now and quarantined the
			// range: this load would write into memory it no longer
			// reserves for us.
			code = wire.ErrLeaseExpired
			t.log.Warn("promotion ran after its write grant expired; nothing written", "key", p.Key, "task", p.ID)
		default:
			dst := seg[p.Target.Offset : p.Target.Offset+p.Size]
			code = t.loadLocal([]string{p.Key}, []uint64{p.Size}, [][][]byte{{dst}})[0]
		}
		if code == wire.OK {
			t.stats.promoted.Add(1)
		} else {
			t.stats.promoteFailed.Add(1)
		}
		ctx, cancel := t.host.CallContext()
		err := t.host.CallMaster(ctx, wire.OpTaskDone, &wire.TaskDoneReq{ClientID: t.host.ClientID(), ID: p.ID, Code: code}, nil)
		cancel()
		if err != nil {
			// The master expires the task with its write grant and
			// quarantines the range.
			t.log.Debug("promotion report not delivered", "key", p.Key, "task", p.ID, "err", err)
		}
	}
}

// grantExpired reports a target grant past its expiry on this host's
// clock. The grant is the master's, for our own segment: its fields are
// read, not verified (no grant: a segment without a key, nothing to check).
func grantExpired(tok []byte) bool {
	f, err := grant.Decode(tok)
	return err == nil && time.Now().UnixNano() >= f.Expiry
}
