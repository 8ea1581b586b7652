// put.go defines Writes, the put pipeline: PutStart, transfers,
// PutEnd/PutRevoke.

package client

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gostore/gostore/gostore/internal/burstlog"
	"github.com/gostore/gostore/gostore/transfer"
	"github.com/gostore/gostore/gostore/wire"
)

// Writes carries out puts and upserts: PutStart (the master picks replica
// ranges), one transfer per replica from the caller's memory, then PutEnd,
// or PutRevoke when a transfer failed; a put refused for space waits for
// room in rounds (spaceWait). It owns the keys whose revoke may have come
// too late (unsure), the log of refusals for space and the count at which
// a wait for room last gave up. Locks: unsure.mu only inside its methods;
// each exported call holds core's inFlight read lock (enter) for its
// length. Before a write the master hears of this client's ended reads
// (ends), and what it wrote is remembered for the next get (reads' spots).
type Writes struct {
	*core
	reads   *Reads
	ends    *readEnds
	noSpace burstlog.Log // puts refused for space
	// spaceStalledAt is 1 + the master's progress count at which a write
	// last gave up waiting for room that did not come (0: none): later
	// writes seeing the same count do not wait again.
	spaceStalledAt atomic.Uint64
	unsure         unsureKeys // writes ended before their revoke
}

// PutItem is one object to store: the concatenation of Parts. Parts on a
// GPU are listed in Device (see transfer.Op), nil placeholders in Parts.
// The caller owns the memory and keeps it valid until PutBatch returns.
type PutItem struct {
	Key    string
	Parts  [][]byte
	Device []DevicePart
}

func (it PutItem) size() uint64 {
	n := capacity(it.Parts)
	for _, d := range it.Device {
		n += d.Size
	}
	return n
}

// PutBatch stores each item with one PutStart and one PutEnd for the whole
// batch. Result i is OK (also when the key already existed: put never
// overwrites) or the item's error code. Invalid items (empty key or value)
// get -600 and do not stop the others.
func (c *Writes) PutBatch(items []PutItem, cfg wire.ReplicaConfig) []wire.Code {
	return c.write(wire.OpPutStart, items, cfg)
}

// UpsertBatch inserts or replaces each item (see master.Core.UpsertStart):
// the same pipeline as PutBatch with UpsertStart as its first phase.
func (c *Writes) UpsertBatch(items []PutItem, cfg wire.ReplicaConfig) []wire.Code {
	return c.write(wire.OpUpsertStart, items, cfg)
}

// write runs the three-phase write pipeline with start (PutStart or
// UpsertStart) as its first phase. Items refused for room the master says is on its
// way are written again in a later round (see spaceWait); each round ends
// its own writes first, so nothing stays half-written while a round waits.
// A round that leaves items to wait for room ends its writes held
// (PutEndHold): the eviction that makes the room must not take this call's
// own objects, which have no disk copy, or the call would answer 0 for
// objects it had evicted itself. The holds end with the call (PutUnhold),
// a moment later when it ends with refusals (see unhold).
func (c *Writes) write(start wire.Op, items []PutItem, cfg wire.ReplicaConfig) []wire.Code {
	out := make([]wire.Code, len(items))
	if c.metrics != nil {
		defer c.noteWrite(start, items, out, time.Now())
	}
	leave, err := c.enter()
	if err != nil {
		return wire.Fill(out, wire.CodeOf(err))
	}
	defer leave()
	round := make([]int, 0, len(items))
	// A key named twice in one batch is written once, from its first
	// item, and every item naming it gets that result (Mooncake's batch
	// calls answer so). Written twice, an upsert would replace its own
	// unfinished first write and fail it.
	var firstOf map[string]int
	var repeats [][2]int // (item, the earlier item with its key)
	for i, it := range items {
		if size := it.size(); it.Key == "" || size == 0 {
			c.log.Warn("write rejected: empty key or value", "op", start.String(), "key", it.Key, "size", size)
			out[i] = wire.ErrInvalidParams
			continue
		}
		if len(items) > 1 {
			if firstOf == nil {
				firstOf = make(map[string]int, len(items))
			}
			if first, ok := firstOf[it.Key]; ok {
				repeats = append(repeats, [2]int{i, first})
				continue
			}
			firstOf[it.Key] = i
		}
		round = append(round, i)
	}
	defer func() {
		for _, r := range repeats {
			out[r[0]] = out[r[1]]
		}
	}()
	if len(round) == 0 {
		return out
	}
	if start == wire.OpUpsertStart {
		// This client's finished reads must not make its own upsert busy.
		c.ends.flushReadEnds()
	}
	wait := spaceWait{c: c}
	for len(round) > 0 {
		round = wait.again(c.writeRound(start, items, cfg, round, out, &wait))
	}
	wait.unhold()
	c.noteNoSpace(start, items, out, &wait)
	return out
}

// refusal is an item refused for space, with the master's explanation.
type refusal struct {
	item    int
	noSpace *wire.NoSpace // nil from a master that gives none
}

// writeRound writes items[i] for each i in round, under one call timeout,
// setting out[i]; it returns the items refused for space.
func (c *Writes) writeRound(start wire.Op, items []PutItem, cfg wire.ReplicaConfig, round []int, out []wire.Code, wait *spaceWait) []refusal {
	ctx, cancel := c.ctx()
	defer cancel()

	// Phase 1: ask the master where to write.
	idx := round
	req := wire.PutStartReq{ClientID: c.id, Config: cfg, HostID: transfer.HostID(),
		Keys: make([]string, len(idx)), Sizes: make([]uint64, len(idx))}
	for j, i := range idx {
		req.Keys[j], req.Sizes[j] = items[i].Key, items[i].size()
		out[i] = wire.OK // a refusal of an earlier round no longer stands
	}
	if unsure := c.unsure.take(req.Keys); len(unsure) > 0 {
		c.revoke(ctx, &wire.KeysReq{ClientID: c.id, Keys: unsure})
	}
	var resp wire.PutStartResp
	err := c.master.Call(ctx, start, &req, &resp)
	if err == nil && len(resp.Results) != len(idx) {
		err = wire.Errorf(wire.ErrRPCFail, "%s answered %d results for %d keys", start, len(resp.Results), len(idx))
	}
	if err != nil {
		if !Quiet(err) { // a master that does not answer is logged once per burst
			c.log.Warn("write start failed", "op", start.String(), "keys", len(idx), "err", err)
		}
		for _, i := range idx {
			out[i] = wire.CodeOf(err)
		}
		// The master may have started the writes without answering (its
		// change log did not take them in time, say): revoke whatever of
		// ours it holds, or a retry would find the key taken by our own
		// unfinished write and answer "exists" without writing.
		if !errors.Is(err, ErrMasterGone) { // that one failed before sending anything
			c.revoke(ctx, &wire.KeysReq{ClientID: c.id, Keys: req.Keys})
		}
		return nil
	}
	var refused []refusal
	for j, r := range resp.Results {
		if r.Code == wire.ErrNoAvailableHandle {
			refused = append(refused, refusal{idx[j], r.NoSpace})
		}
	}

	// Phase 2: write every replica straight from the caller's memory; the
	// engine picks each replica's route.
	var ids []uint64
	for _, r := range resp.Results {
		for _, rep := range r.Replicas {
			ids = append(ids, rep.SegID)
		}
	}
	known, resolveErr := c.resolve(ctx, ids)
	ops := make([]transfer.Op, 0, len(ids))
	opItem := make([]int, 0, len(ids)) // ops[k] writes items[opItem[k]]
	writing := make([]bool, len(items))
	epochs := make([]uint64, len(items))
	for j, r := range resp.Results {
		i := idx[j]
		switch r.Code {
		case wire.OK:
		case wire.ErrObjectAlreadyExists:
			continue // put does not overwrite; the contract calls this success
		default:
			out[i] = r.Code
			continue
		}
		writing[i], epochs[i] = true, r.Epoch
		for _, rep := range r.Replicas {
			peer, ok := known[rep.SegID]
			if !ok {
				c.log.Warn("put: replica on an unknown segment", "key", items[i].Key, "segment", rep.SegID, "err", resolveErr)
				out[i] = wire.ErrSegmentNotFound
				continue
			}
			ops = append(ops, transfer.Op{Peer: peer, Offset: rep.Offset, Bufs: items[i].Parts, Device: items[i].Device,
				Write: true, Grant: rep.Grant})
			opItem = append(opItem, i)
		}
	}
	if len(ops) > 0 {
		write := func(ops []transfer.Op) []error { return c.timedWrite(ctx, ops, len(items)) }
		for k, err := range c.doRefreshing(ctx, ops, write) {
			if err != nil {
				i, seg := opItem[k], ops[k].Peer.SegID
				c.log.Warn("put: transfer failed", "key", items[i].Key, "segment", seg, "err", err)
				out[i] = wire.CodeOf(err)
				c.opFailed(&ops[k], err)
			}
		}
	}

	// Phase 3: publish what was written, revoke what was not.
	done := wire.KeysReq{ClientID: c.id}
	revoke := wire.KeysReq{ClientID: c.id}
	var doneIdx []int
	for i, w := range writing {
		switch {
		case !w:
		case out[i] == wire.OK:
			done.Keys, done.Epochs = append(done.Keys, items[i].Key), append(done.Epochs, epochs[i])
			doneIdx = append(doneIdx, i)
		default:
			revoke.Keys, revoke.Epochs = append(revoke.Keys, items[i].Key), append(revoke.Epochs, epochs[i])
		}
	}
	if len(refused) > 0 && len(done.Keys) > 0 {
		done.HoldMS = wait.holdMS()
	}
	c.finishWrites(ctx, &done, doneIdx, &revoke, out)
	for j, r := range resp.Results {
		if i := idx[j]; writing[i] && out[i] == wire.OK {
			c.reads.rememberWritten(items[i].Key, r.Replicas, items[i].size(), r.Epoch)
			if done.HoldMS > 0 {
				wait.held.Keys = append(wait.held.Keys, items[i].Key)
				wait.held.Epochs = append(wait.held.Epochs, r.Epoch)
			}
		}
	}
	return refused
}

// revoke sends PutRevoke for req within ctx. Once ctx ended (the call was
// interrupted or closed, or the master is gone) a revoke sent now would be
// refused at once, and one sent in the background could overtake the
// PutStart still unread on the master's side: the keys are kept, and the
// next write of any of them revokes them first (unsure).
func (c *Writes) revoke(ctx context.Context, req *wire.KeysReq) {
	if ctx.Err() != nil {
		c.unsure.add(req.Keys)
		return
	}
	var r wire.CodesResp
	if err := c.master.Call(ctx, wire.OpPutRevoke, req, &r); err != nil {
		if ctx.Err() != nil {
			c.unsure.add(req.Keys)
		} else if !Quiet(err) {
			c.log.Warn("PutRevoke failed; the master reclaims the space later", "keys", len(req.Keys), "err", err)
		}
	}
}

// unsureKeys are keys whose write this client started and may not have
// revoked (its call ended first): the master may hold them as ours and
// unfinished, and would answer our next write of them "exists" without
// writing. That write revokes them first.
type unsureKeys struct {
	n    atomic.Int32 // len(keys), read without the lock on every write
	mu   sync.Mutex
	keys map[string]struct{}
}

func (u *unsureKeys) add(keys []string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.keys == nil {
		u.keys = make(map[string]struct{})
	}
	for _, k := range keys {
		if len(u.keys) >= maxUnsure {
			break // the master reclaims the rest after put_start_discard_timeout_sec
		}
		u.keys[k] = struct{}{}
	}
	u.n.Store(int32(len(u.keys)))
}

// maxUnsure bounds the keys kept for a revoke (interrupted writes are few).
const maxUnsure = 1 << 16

// take removes and returns those of keys that are unsure (one atomic load
// when none is).
func (u *unsureKeys) take(keys []string) []string {
	if u.n.Load() == 0 {
		return nil
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	var out []string
	for _, k := range keys {
		if _, ok := u.keys[k]; ok {
			out = append(out, k)
			delete(u.keys, k)
		}
	}
	u.n.Store(int32(len(u.keys)))
	return out
}

// finishWrites sends PutEnd and PutRevoke concurrently.
func (c *Writes) finishWrites(ctx context.Context, done *wire.KeysReq, doneIdx []int, revoke *wire.KeysReq, out []wire.Code) {
	var wg sync.WaitGroup
	if len(revoke.Keys) > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.revoke(ctx, revoke)
		}()
	}
	if len(done.Keys) > 0 {
		var r wire.CodesResp
		err := c.master.Call(ctx, wire.OpPutEnd, done, &r)
		spreadCodes(out, doneIdx, r.Codes, err)
	}
	wg.Wait()
}

// spreadCodes sets out[idx[k]] to the k-th code of a batch call's answer,
// the call's code when it failed, or ErrRPCFail for a code the master did
// not send.
func spreadCodes(out []wire.Code, idx []int, codes []wire.Code, err error) {
	for k, i := range idx {
		switch {
		case err != nil:
			out[i] = wire.CodeOf(err)
		case k < len(codes):
			out[i] = codes[k]
		default:
			out[i] = wire.ErrRPCFail
		}
	}
}

// Backoff between the rounds of a write waiting for room: the first comes
// soon (a refusal starts an eviction pass at once), later ones no faster
// than a master tick.
const (
	spaceRetryFirst = 2 * time.Millisecond
	spaceRetryMax   = 100 * time.Millisecond
)

// spaceStall is how long room said to be coming may show no progress at
// the master (nothing evicted, offloaded, removed or revoked) before a
// write stops waiting for it: a disk that refuses every offload keeps
// objects "waiting for their disk copy" forever.
const spaceStall = 2 * time.Second

// spaceWait decides, round after round, which refused items of one write
// to try again, and waits before the next round. Items told room is coming
// are tried until Config.PutSpaceWait passes or the master stalls; items
// refused before an eviction pass looked, until one has.
type spaceWait struct {
	c       *Writes
	began   time.Time // the first refusal
	backoff time.Duration
	// firstPass is the master's pass count at the first round's refusals.
	// Every later round retries items refused in the first, so an item
	// still refused "unknown" at this count has seen no pass yet.
	firstPass  uint64
	progress   uint64       // the master's progress count last seen
	progressAt time.Time    // when it last changed
	last       []refusal    // the refusals that stand, once again returns nil
	held       wire.KeysReq // objects ended held (PutEndHold) by this write
}

// spaceHoldSlack is added to the wait left for a hold's length (the last
// round comes after the wait), and is the grace a write that ends with
// refusals leaves its holds: those refusals asked the master for an
// eviction pass, a tick after the write, which must not take the objects
// the write has just answered 0 for.
const spaceHoldSlack = time.Second

// holdMS is how long a round that leaves items without room holds its
// objects: the wait left to the write, plus spaceHoldSlack.
func (w *spaceWait) holdMS() uint64 {
	c := w.c
	left := max(c.cfg.PutSpaceWait, 0)
	if !w.began.IsZero() {
		left = max(w.began.Add(c.cfg.PutSpaceWait).Sub(time.Now()), 0)
	}
	return uint64((left + spaceHoldSlack) / time.Millisecond)
}

// unhold ends the holds of the write's rounds: at once when every item
// found room, after spaceHoldSlack when some did not (one message,
// unanswered: a lost one leaves the holds to run out).
func (w *spaceWait) unhold() {
	if len(w.held.Keys) == 0 {
		return
	}
	c := w.c
	w.held.ClientID = c.id
	if len(w.last) > 0 {
		w.held.HoldMS = uint64(spaceHoldSlack / time.Millisecond)
	}
	ctx, cancel := c.ctx()
	defer cancel()
	if err := c.master.Notify(ctx, wire.OpPutUnhold, &w.held); err != nil {
		c.log.Debug("PutUnhold failed; the holds end on their own", "keys", len(w.held.Keys), "err", err)
	}
}

// again takes a round's refusals and returns the items of the next round
// after waiting for it, or nil when the write is done.
func (w *spaceWait) again(refused []refusal) []int {
	w.last = refused
	c := w.c
	if len(refused) == 0 || c.cfg.PutSpaceWait <= 0 {
		return nil
	}
	now := time.Now()
	first := w.began.IsZero()
	if first {
		w.began, w.progressAt, w.backoff = now, now, spaceRetryFirst
	}
	stalledAt := c.spaceStalledAt.Load()
	stalled := false
	var unknown, coming []int
	for _, r := range refused {
		ns := r.noSpace
		if ns == nil {
			continue
		}
		if first {
			w.firstPass, first = ns.Passes, false
		}
		if ns.Progress != w.progress {
			w.progress, w.progressAt = ns.Progress, now
		}
		// Another write already waited in vain at this very progress count.
		stalled = stalled || stalledAt == ns.Progress+1
		switch {
		case ns.Space == wire.SpaceUnknown && ns.Passes == w.firstPass:
			unknown = append(unknown, r.item)
		case ns.Space == wire.SpaceComing:
			coming = append(coming, r.item)
		}
	}
	if len(coming) > 0 && now.Sub(w.progressAt) > spaceStall {
		c.log.Debug("room said to be coming made no progress; not waiting for it", "for", now.Sub(w.progressAt))
		c.spaceStalledAt.Store(w.progress + 1)
		stalled = true
	}
	next := unknown
	if !stalled {
		next = append(next, coming...)
	}
	left := w.began.Add(c.cfg.PutSpaceWait).Sub(now)
	if len(next) == 0 || left <= 0 {
		return nil
	}
	if c.ssd != nil {
		// Room may wait for this client's own tier to persist objects:
		// run its offload heartbeat now, not at the next ping.
		c.ssd.Kick()
	}
	t := time.NewTimer(min(w.backoff, left))
	select {
	case <-t.C:
	case <-c.stop:
	}
	t.Stop()
	if c.closed.Load() {
		return nil
	}
	w.backoff = min(2*w.backoff, spaceRetryMax)
	return next
}

// waited is how long the write waited for room.
func (w *spaceWait) waited() time.Duration {
	if w.began.IsZero() {
		return 0
	}
	return time.Since(w.began)
}

// noteNoSpace logs the first write of a burst that ends refused for space,
// with the master's reason, and ends the burst when a write stores keys.
func (c *Writes) noteNoSpace(op wire.Op, items []PutItem, out []wire.Code, w *spaceWait) {
	if len(w.last) == 0 {
		// The common write: nothing refused and no burst to end.
		if c.noSpace.On() && slices.Contains(out, wire.OK) {
			c.noSpace.OK(func(more int) { c.log.Info("puts find space again", "refused_since_logged", more) })
		}
		return
	}
	c.noSpace.Fail(len(w.last), func(others int) {
		r := w.last[0]
		it := items[r.item]
		reason := "the master gave none"
		if r.noSpace != nil {
			reason = r.noSpace.Why
		}
		c.log.Warn("no space for a put (-200 NO_AVAILABLE_HANDLE); later refusals are counted, not logged, until a put finds space",
			"op", op.String(), "key", it.Key, "size", it.size(), "reason", reason,
			"waited", w.waited().Round(time.Millisecond), "refused_in_batch", others+1)
	})
}
