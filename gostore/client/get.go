// get.go defines the read side: GetReplicas, transfers into caller buffers,
// and the existence, size and removal calls.

package client

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/gostore/gostore/gostore/rpc"
	"github.com/gostore/gostore/gostore/ssdtier"
	"github.com/gostore/gostore/gostore/transfer"
	"github.com/gostore/gostore/gostore/wire"
)

// Pending is a get whose replica lists are known but whose bytes have not
// moved yet; it lets Python size its buffers between the two halves.
type Pending struct {
	keys []string
	res  []wire.GetResult
	sent time.Time // when GetReplicas left: leases count from here
	read bool      // the master counts us as a reader of the found keys
	lent bool      // read into memory the client lends (GetBuffers)
	// byCaller[i]: object i is copied by the caller from its Place; with
	// no destination, GetFinish counts it read (nil: none is)
	byCaller []bool
}

// Sizes returns each object's size, or its negative code (-704 missing).
func (p *Pending) Sizes() []int64 {
	out := make([]int64, len(p.res))
	for i, r := range p.res {
		if r.Code != wire.OK {
			out[i] = int64(r.Code)
		} else {
			out[i] = int64(r.Size)
		}
	}
	return out
}

// Packed lays the objects p found out back to back, in key order, in a
// buffer of capacity bytes: object i starts at offsets[i] (a miss takes no
// room). fits is false when they need more than capacity.
func (p *Pending) Packed(capacity uint64) (offsets []uint64, fits bool) {
	offsets = make([]uint64, len(p.res))
	var next uint64
	for i, r := range p.res {
		offsets[i] = next
		if r.Code != wire.OK {
			continue
		}
		if r.Size > capacity-next {
			return nil, false
		}
		next += r.Size
	}
	return offsets, true
}

// GetStart asks the master for the keys' replicas in one RPC (granting
// leases) and registers this client as their reader until GetFinish or
// Abort. An error means the whole call failed.
func (c *Client) GetStart(keys []string) (*Pending, error) {
	return c.getStart(keys, true)
}

func (c *Client) getStart(keys []string, read bool) (*Pending, error) {
	return c.locate(keys, read, false)
}

// peek locates the keys' replicas without using the objects (no lease, no
// reader, no recency): how the SSD tier reads what it persists.
func (c *Client) peek(keys []string) (*Pending, error) {
	return c.locate(keys, false, true)
}

func (c *Client) locate(keys []string, read, peek bool) (*Pending, error) {
	if err := c.checkOpen(); err != nil {
		return nil, err
	}
	ctx, cancel := c.ctx()
	defer cancel()
	p := &Pending{keys: keys, res: make([]wire.GetResult, len(keys)), sent: time.Now(), read: read}
	var q []string
	var qi []int
	for i, k := range keys {
		if k == "" {
			p.res[i].Code = wire.ErrInvalidParams
			continue
		}
		q = append(q, k)
		qi = append(qi, i)
	}
	if len(q) == 0 {
		return p, nil
	}
	if read && c.laterReads.overlap(q) {
		// A key read again at once: its last ReadDone goes first, on its
		// own, so that its reader count drops to 0 between the two gets
		// (carried with this GetReplicas it would go to 0 and back to 1
		// in one breath, and a loop reading the key would keep other
		// clients' upserts busy for good).
		c.readDoneAlone.Add(1)
		if err := c.master.SendLater(ctx); err != nil {
			c.log.Debug("ReadDone not delivered", "err", err)
		}
	}
	var resp wire.GetReplicasResp
	if err := c.master.Call(ctx, wire.OpGetReplicas, &wire.KeysReq{ClientID: c.id, Keys: q, ForRead: read, Peek: peek}, &resp); err != nil {
		return nil, err
	}
	if len(resp.Results) != len(q) {
		return nil, wire.Errorf(wire.ErrRPCFail, "GetReplicas answered %d of %d keys", len(resp.Results), len(q))
	}
	for j, i := range qi {
		p.res[i] = resp.Results[j]
	}
	return p, nil
}

// Abort ends a get without reading.
func (c *Client) Abort(p *Pending) { c.endReads(p) }

// endReads tells the master (in the background, batched) that this client
// no longer reads the objects p found.
func (c *Client) endReads(p *Pending) {
	if !p.read {
		return
	}
	p.read = false
	req := wire.KeysReq{ClientID: c.id}
	var bytes uint64
	for i, r := range p.res {
		if r.Code == wire.OK {
			req.Keys = append(req.Keys, p.keys[i])
			req.Epochs = append(req.Epochs, r.Epoch)
			bytes += r.Size
		}
	}
	if len(req.Keys) == 0 {
		return
	}
	// After a small read the ReadDone rides on this client's next call to
	// the master, in the same write (rpc.Client.NotifyLater), or goes on
	// its own after Config.ReadDoneWait when no call comes: no write of
	// its own on the reading thread, no thread woken. After a read of
	// more keys than laterReadMax, or when too many wait, the reading
	// thread writes it itself, without waiting for the answer; the
	// background sender takes the rest. (After a large read, the
	// master's handling of an immediate ReadDone landed in the next
	// read's copy: 16 MiB gets over shared memory lost 13-15 %, which a
	// woken sender, a moment later, did not cost.) After an error other
	// than ErrNotifyUnavailable the ReadDone may have been sent: it is not
	// sent again (a second one could end another reader's count), and the
	// master counts those readers until their leases end.
	if bytes > notifyReadBytes {
		c.addReadsDone(&req)
		return
	}
	ctx, cancel := c.ctx()
	var err error
	if wait := c.readDoneWait(); wait > 0 && c.laterReads.add(req.Keys) {
		err = c.master.NotifyLater(ctx, wire.OpReadDone, &req, wait)
	} else {
		err = c.master.Notify(ctx, wire.OpReadDone, &req)
	}
	cancel()
	if errors.Is(err, rpc.ErrNotifyUnavailable) {
		c.addReadsDone(&req)
	} else if err != nil {
		c.log.Debug("ReadDone not delivered", "keys", len(req.Keys), "err", err)
	}
}

// notifyReadBytes is the largest read whose ReadDone its own thread sends.
const notifyReadBytes = 1 << 20

// defaultReadDoneWait is Config.ReadDoneWait's default.
const defaultReadDoneWait = 500 * time.Microsecond

// readDoneWait is how long a small read's ReadDone waits for the next call
// to carry it (Config.ReadDoneWait); 0 or less: not at all.
func (c *Client) readDoneWait() time.Duration {
	if c.cfg.ReadDoneWait == 0 {
		return defaultReadDoneWait
	}
	return c.cfg.ReadDoneWait
}

// laterKeysMax bounds the keys whose ReadDone waits for the next call,
// and laterReadMax the keys of a read whose ReadDone may wait: past them,
// a ReadDone is written at once. They keep the check of each lookup's
// keys against those waiting short; a batch saves little by waiting.
const (
	laterKeysMax = 16
	laterReadMax = 4
)

// laterReads holds the keys whose ReadDone waits for the next call to the
// master (NotifyLater), for the next GetReplicas to check: it is emptied
// by each read's lookup, which carries them (so a key may stay here after
// another call carried its ReadDone: the check then sends nothing).
type laterReads struct {
	mu   sync.Mutex
	keys []string
}

// add records keys as waiting; false (nothing recorded) when they are
// more than laterReadMax or would pass laterKeysMax.
func (l *laterReads) add(keys []string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(keys) > laterReadMax || len(l.keys)+len(keys) > laterKeysMax {
		return false
	}
	l.keys = append(l.keys, keys...)
	return true
}

// overlap empties the set and reports whether it held one of keys.
func (l *laterReads) overlap(keys []string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.keys) == 0 {
		return false
	}
	hit := false
waiting:
	for _, w := range l.keys {
		for _, k := range keys {
			if k == w {
				hit = true
				break waiting
			}
		}
	}
	clear(l.keys)
	l.keys = l.keys[:0]
	return hit
}

func (c *Client) addReadsDone(req *wire.KeysReq) {
	for i, key := range req.Keys {
		c.readsDone.add(key, req.Epochs[i])
	}
}

// flushReadEnds returns once the master knows of every read this client
// ended: before its own upserts (its finished reads must not make them
// busy), the SSD tier's rewrites and Close.
func (c *Client) flushReadEnds() {
	ctx, cancel := c.ctx()
	if err := c.master.NotifyFlush(ctx); err != nil {
		c.log.Debug("ReadDone answers not read", "err", err)
	}
	c.readsDone.flush(ctx, c.master, c.id, c.log)
	cancel()
}

// GetFinish reads object i into dests[i] (a scatter list the caller owns;
// nil skips the object). Result i is the bytes written or a negative code:
// -600 when dests[i] is smaller than the object, -707 when the transfer
// ended after the object's lease (the memory may have been reused; the
// bytes must not be trusted).
func (c *Client) GetFinish(p *Pending, dests [][][]byte) []int64 {
	return c.GetFinishDevice(p, dests, nil)
}

// finish is GetFinish for a caller that has entered; dev[i] lists the
// device parts of dests[i] (dev nil when there are none).
func (c *Client) finish(p *Pending, dests [][][]byte, dev [][]DevicePart) []int64 {
	defer c.endReads(p)
	began := time.Now()
	// The caller's own copies (Places) ended before this call: their
	// leases are checked now, not after the reads below.
	var late []int
	for i, r := range p.res {
		if r.Code == wire.OK && p.leftToCaller(i, dests, dev) && expired(r, p.sent) {
			late = append(late, i)
		}
	}
	out := c.readInto(p, dests, dev)
	for i, r := range p.res {
		if out[i] > 0 && !p.leftToCaller(i, dests, dev) && expired(r, p.sent) {
			late = append(late, i)
		}
	}
	if len(late) > 0 {
		// Those bytes may be a newer object's (the range was free to
		// reuse once the lease ended).
		for _, i := range late {
			out[i] = int64(wire.ErrLeaseExpired)
		}
		c.readAgain(p, late, dests, dev, out, began)
	}
	c.noteRead(p, out, began)
	return out
}

// leaseTries bounds how often an object whose read outlived its lease is
// looked up and read again within one call.
const leaseTries = 3

// readAgain reads again the objects late of p whose read outlived its
// lease (out[i] -707): each is looked up again (a new lease, and the
// object as it is now) and read again into the same destination, in
// groups small enough for the read to end well inside the lease at the
// speed the reads so far went, up to leaseTries times or the call's
// bound. Every read API reaches it through finish.
//
// What then gives -707, logged once per object: an object the caller
// copies itself (Places: there is no destination here to read into; the
// caller looks it up again), an object whose size changed meanwhile (its
// destination was sized for the old one; a read of a changed object must
// not pass for the one asked), and an object whose every read outlived
// its lease. An object gone meanwhile gets the lookup's code (-704).
func (c *Client) readAgain(p *Pending, late []int, dests [][][]byte, dev [][]DevicePart, out []int64, began time.Time) {
	ctx, cancel := c.ctx()
	defer cancel()
	// The speed so far: every byte read, over the time the reads took
	// (from began, after the lookup: a lookup the master answered late,
	// through a pause, says nothing of how fast the bytes move).
	var done uint64
	for i, r := range p.res {
		if out[i] > 0 || out[i] == int64(wire.ErrLeaseExpired) {
			done += r.Size
		}
	}
	rate := float64(done) / max(time.Since(began).Seconds(), 1e-6) // bytes per second
	failed := func(i int, why string) {
		c.log.Warn("get: "+why+"; result discarded", "key", p.keys[i], "lease_ms", p.res[i].LeaseMS)
	}
	var todo []int
	for _, i := range late {
		if p.leftToCaller(i, dests, dev) {
			failed(i, "the caller's copy outlived the lease")
			continue
		}
		todo = append(todo, i)
	}
	for try := 1; len(todo) > 0; try++ {
		if try > leaseTries || ctx.Err() != nil {
			for _, i := range todo {
				failed(i, fmt.Sprintf("the read outlived the lease %d times", try-1))
			}
			return
		}
		var next []int
		for _, group := range leaseGroups(p, todo, rate) {
			again, err := c.locate(pick(p.keys, group), true, false)
			if err != nil {
				for _, i := range group {
					failed(i, "the lookup again failed: "+err.Error())
				}
				continue
			}
			gd := make([][][]byte, len(group))
			var gv [][]DevicePart
			if dev != nil {
				gv = make([][]DevicePart, len(group))
			}
			for j, i := range group {
				r := &again.res[j]
				switch {
				case r.Code != wire.OK:
					out[i] = int64(r.Code) // gone meanwhile: what the lookup says now
				case r.Size != p.res[i].Size:
					failed(i, "the object changed size during the read")
					r.Code = wire.ErrLeaseExpired // not read
				default:
					if i < len(dests) {
						gd[j] = dests[i]
					}
					if i < len(dev) {
						gv[j] = dev[i]
					}
				}
			}
			start := time.Now()
			got := c.readInto(again, gd, gv)
			var bytes uint64
			for j, i := range group {
				if again.res[j].Code != wire.OK {
					continue
				}
				bytes += again.res[j].Size
				out[i] = got[j]
				if got[j] > 0 && expired(again.res[j], again.sent) {
					out[i] = int64(wire.ErrLeaseExpired)
					next = append(next, i)
				}
			}
			c.endReads(again)
			rate = float64(bytes) / max(time.Since(start).Seconds(), 1e-6)
		}
		todo = next
	}
}

// readRangesAgain is readAgain for ranged reads (GetRanges, get
// sessions): the objects late, whose ranges were read past their lease,
// are looked up again and their ranges read again, up to leaseTries
// times; an object that changed size meanwhile, or whose every read
// outlived its lease, keeps -707 (logged), one gone meanwhile gets the
// lookup's code. keep, when not nil, is handed each lookup again (its
// objects are late's, in order) once its reads are done and takes its
// reads over (a get session keeps them until it ends); nil ends them.
func (c *Client) readRangesAgain(keys []string, res []wire.GetResult, parts [][]RangePart, late []int, out [][]int64,
	keep func(late []int, again *Pending)) {
	for try := 1; len(late) > 0; try++ {
		if try > leaseTries {
			for _, i := range late {
				c.log.Warn("get: every ranged read outlived the lease; result discarded", "key", keys[i], "tries", try, "lease_ms", res[i].LeaseMS)
			}
			return
		}
		again, err := c.locate(pick(keys, late), true, false)
		if err != nil {
			for _, i := range late {
				c.log.Warn("get: the lookup again of a ranged read failed; result discarded", "key", keys[i], "err", err)
			}
			return
		}
		gk, gp := pick(keys, late), make([][]RangePart, len(late))
		skip := make([]int64, len(late))
		for j, i := range late {
			gp[j] = parts[i]
			switch r := again.res[j]; {
			case r.Code != wire.OK:
				skip[j] = int64(r.Code)
				wire.Fill(out[i], int64(r.Code))
			case r.Size != res[i].Size:
				skip[j] = int64(wire.ErrLeaseExpired)
				c.log.Warn("get: the object changed size during the ranged read; result discarded", "key", keys[i])
			}
		}
		per := c.readRanges(gk, again.res, gp, skip)
		var next []int
		for j, i := range late {
			if skip[j] != 0 {
				continue
			}
			copy(out[i], per[j])
			if expireRanges(out[i], again.res[j], again.sent) {
				next = append(next, i)
			}
		}
		if keep != nil {
			keep(late, again)
		} else {
			c.endReads(again)
		}
		late = next
	}
}

// expireRanges marks -707 each range of got (bytes read of the object r
// describes, looked up at sent) read past r's lease, and reports whether
// any was: those bytes may be a newer object's.
func expireRanges(got []int64, r wire.GetResult, sent time.Time) bool {
	if !expired(r, sent) {
		return false
	}
	late := false
	for k, n := range got {
		if n > 0 {
			got[k], late = int64(wire.ErrLeaseExpired), true
		}
	}
	return late
}

// leaseGroups splits objects todo of p into groups to look up and read
// together: as many as rate (bytes per second) reads in a quarter of the
// shortest lease among them, at least one each. A lease that is not
// bounded (0) puts them all in one.
func leaseGroups(p *Pending, todo []int, rate float64) [][]int {
	var groups [][]int
	var cur []int
	var bytes float64
	budget := math.Inf(1)
	for _, i := range todo {
		lease := p.res[i].LeaseMS
		if lease > 0 {
			budget = min(budget, rate*float64(lease)/1000/4)
		}
		size := float64(p.res[i].Size)
		if len(cur) > 0 && bytes+size > budget {
			groups = append(groups, cur)
			cur, bytes = nil, 0
		}
		cur = append(cur, i)
		bytes += size
	}
	return append(groups, cur)
}

// pick returns keys[i] for each i of idx.
func pick(keys []string, idx []int) []string {
	out := make([]string, len(idx))
	for j, i := range idx {
		out[j] = keys[i]
	}
	return out
}

// readWant is one object, or one range of it, still to read, with the
// replicas left to try.
type readWant struct {
	item     int                   // where its result goes
	key      string                // for the log
	off      uint64                // of the range in the object (0: from its start)
	size     uint64                // bytes to read
	bufs     [][]byte              // the destination's host parts, trimmed to size
	dev      []transfer.DevicePart // and its device parts
	replicas []wire.Replica
	disk     string // the SSD tier holding a disk copy, "" for none
}

// readInto reads the objects p found into dests: each from its cheapest
// memory replica first, then the others, then its disk copy.
func (c *Client) readInto(p *Pending, dests [][][]byte, dev [][]DevicePart) []int64 {
	out := p.Sizes()
	ctx, cancel := c.ctx()
	defer cancel()
	slab := make([]readWant, 0, len(p.res)) // one allocation; never grows, so &slab[k] stays valid
	var wants []*readWant
	var ids []uint64
	var disk map[string][]*readWant // by the endpoint of the SSD tier holding them
	toDisk := func(w *readWant, endpoint string) {
		if disk == nil {
			disk = map[string][]*readWant{}
		}
		disk[endpoint] = append(disk[endpoint], w)
	}
	defer func() {
		for endpoint, ws := range disk {
			c.readDisk(ctx, p.keys, endpoint, ws, out)
		}
	}()
	for i, r := range p.res {
		if r.Code != wire.OK {
			continue
		}
		if p.leftToCaller(i, dests, dev) {
			continue // the caller read it from its Place: out[i] is its size
		}
		if i >= len(dests) || dests[i] == nil {
			out[i] = int64(wire.ErrInvalidParams) // found, but nowhere to put it
			continue
		}
		var d []DevicePart
		if i < len(dev) {
			d = dev[i]
		}
		bufs, d, err := transfer.Trim(dests[i], d, r.Size)
		if err != nil {
			c.log.Warn("get: destination rejected", "key", p.keys[i], "size", r.Size, "err", err)
			out[i] = int64(wire.ErrInvalidParams)
			continue
		}
		slab = append(slab, readWant{item: i, key: p.keys[i], size: r.Size, bufs: bufs, dev: d, replicas: r.Replicas, disk: r.Disk})
		w := &slab[len(slab)-1]
		if len(r.Replicas) == 0 {
			if r.Disk != "" {
				toDisk(w, r.Disk)
			} else {
				out[i] = int64(wire.ErrReplicaIsGone)
			}
			continue
		}
		wants = append(wants, w)
		for _, rep := range r.Replicas {
			ids = append(ids, rep.SegID)
		}
	}
	for _, w := range c.readReplicas(ctx, wants, ids, out) {
		toDisk(w, w.disk)
	}
	return out
}

// readReplicas reads each want from its memory replicas, cheapest first,
// setting out[w.item] to the bytes read or the last error; ids are the
// replicas' segments, resolved first. It returns the wants every replica
// failed for that have a disk copy, for the caller to read from there.
func (c *Client) readReplicas(ctx context.Context, wants []*readWant, ids []uint64, out []int64) (toDisk []*readWant) {
	if len(wants) == 0 {
		return nil
	}
	_ = c.resolve(ctx, ids) // unresolved replicas are skipped below
	for _, w := range wants {
		c.orderReplicas(w.replicas)
	}
	// Round r tries every still-unread want's r-th replica, all in one
	// engine batch, so a failed replica costs one more round, not a stall.
	for round := 0; len(wants) > 0; round++ {
		ops := make([]transfer.Op, 0, len(wants))
		opWant := make([]*readWant, 0, len(wants))
		var next []*readWant
		for _, w := range wants {
			if round >= len(w.replicas) {
				// Every memory replica failed: the disk copy, if any, is
				// the last resort. Otherwise out keeps the last error.
				if w.disk != "" {
					toDisk = append(toDisk, w)
				}
				continue
			}
			rep := w.replicas[round]
			peer, ok := c.peers.get(rep.SegID)
			if !ok {
				out[w.item] = int64(wire.ErrReplicaIsGone)
				next = append(next, w)
				continue
			}
			// The grant covers the whole replica: a range of it reads under it too.
			ops = append(ops, transfer.Op{Peer: peer, Offset: rep.Offset + w.off, Bufs: w.bufs, Device: w.dev, Grant: rep.Grant})
			opWant = append(opWant, w)
		}
		if len(ops) > 0 {
			for j, err := range c.engine.Do(ctx, ops) {
				w := opWant[j]
				if err == nil {
					out[w.item] = int64(w.size)
					continue
				}
				seg := ops[j].Peer.SegID
				c.log.Warn("get: transfer failed; trying another replica", "key", w.key, "segment", seg, "err", err)
				out[w.item] = int64(wire.CodeOf(err))
				c.opFailed(seg, err)
				next = append(next, w)
			}
		}
		wants = next
	}
	return toDisk
}

// readDisk reads objects from the SSD tier at endpoint, their device parts
// staged through pinned memory by the engine.
func (c *Client) readDisk(ctx context.Context, keys []string, endpoint string, ws []*readWant, out []int64) {
	c.diskReads.Add(1)
	ops := make([]transfer.Op, len(ws))
	for j, w := range ws {
		ops[j] = transfer.Op{Bufs: w.bufs, Device: w.dev}
	}
	errs := c.engine.Staged(ops, func(host []transfer.Op) []error {
		dw := make([]ssdtier.Want, len(host))
		for k, op := range host {
			dw[k] = ssdtier.Want{Item: ws[k].item, Size: ws[k].size, Bufs: op.Bufs}
		}
		c.disk.Read(ctx, keys, endpoint, dw, out) // this client's own tier directly, another's through its staging
		errs := make([]error, len(host))
		for k := range host {
			if n := out[ws[k].item]; n < 0 {
				errs[k] = wire.Errorf(wire.Code(n), "disk read")
			}
		}
		return errs
	})
	for j, err := range errs {
		if err != nil {
			out[ws[j].item] = int64(wire.CodeOf(err))
		}
	}
}

// capacity is the bytes a scatter list holds.
func capacity(bufs [][]byte) uint64 {
	var n uint64
	for _, b := range bufs {
		n += uint64(len(b))
	}
	return n
}

// orderReplicas puts the cheapest replica first, as the engine would
// route it: own segment, then a same-host mapping, then UCX, then TCP;
// replicas on segments not resolved last.
func (c *Client) orderReplicas(reps []wire.Replica) {
	if len(reps) < 2 {
		return
	}
	cost := func(r wire.Replica) int {
		if p, ok := c.peers.get(r.SegID); ok {
			return c.engine.Route(p).Cost()
		}
		return transfer.RouteTCP.Cost() + 1
	}
	sort.SliceStable(reps, func(i, j int) bool { return cost(reps[i]) < cost(reps[j]) })
}

// GetInto is GetStart and GetFinish in one call.
func (c *Client) GetInto(keys []string, dests [][][]byte) []int64 {
	leave, err := c.enter()
	if err != nil {
		return wire.Fill(make([]int64, len(keys)), int64(wire.CodeOf(err)))
	}
	defer leave()
	p, err := c.GetStart(keys)
	if err != nil {
		return wire.Fill(make([]int64, len(keys)), int64(wire.CodeOf(err)))
	}
	return c.finish(p, dests, nil)
}

// GetBuffers reads each object into memory the client lends (see
// FreeBuffer). bufs[i] is nil when codes[i] is negative.
func (c *Client) GetBuffers(keys []string) (bufs [][]byte, codes []int64) {
	bufs = make([][]byte, len(keys))
	leave, err := c.enter()
	if err != nil {
		return bufs, wire.Fill(make([]int64, len(keys)), int64(wire.CodeOf(err)))
	}
	defer leave()
	p, err := c.GetStart(keys)
	if err != nil {
		return bufs, wire.Fill(make([]int64, len(keys)), int64(wire.CodeOf(err)))
	}
	p.lent = true
	dests := make([][][]byte, len(keys))
	sizes := p.Sizes()
	for i, n := range sizes {
		if n <= 0 {
			continue
		}
		b, err := c.staging.get(uint64(n))
		if err != nil {
			c.log.Error("get_buffer: no memory to read the object into", "key", keys[i], "size", n, "err", err)
			sizes[i] = int64(wire.CodeOf(err))
			p.res[i].Code = wire.CodeOf(err)
			continue
		}
		bufs[i] = b
		dests[i] = [][]byte{b}
	}
	codes = c.finish(p, dests, nil)
	for i, code := range codes {
		if code < 0 && bufs[i] != nil {
			c.staging.put(addrOf(bufs[i]))
			bufs[i] = nil
		}
	}
	return bufs, codes
}

// FreeBuffer returns memory lent by GetBuffers.
func (c *Client) FreeBuffer(addr uintptr) error { return c.staging.put(addr) }

// Exist returns 1 (exists, lease granted), 0 (missing) or a negative code.
func (c *Client) Exist(keys []string) []int32 {
	out := make([]int32, len(keys))
	if err := c.checkOpen(); err != nil {
		return wire.Fill(out, int32(wire.CodeOf(err)))
	}
	ctx, cancel := c.ctx()
	defer cancel()
	var resp wire.CodesResp
	if err := c.master.Call(ctx, wire.OpExist, &wire.KeysReq{ClientID: c.id, Keys: keys}, &resp); err != nil || len(resp.Codes) != len(keys) {
		code := wire.CodeOf(err)
		if err == nil {
			code = wire.ErrRPCFail
		}
		return wire.Fill(out, int32(code))
	}
	for i, code := range resp.Codes {
		switch code {
		case wire.OK:
			out[i] = 1
		case wire.ErrObjectNotFound:
			out[i] = 0
		default:
			out[i] = int32(code)
		}
	}
	return out
}

// GetSize returns the object's size (granting a lease) or a negative code.
func (c *Client) GetSize(key string) int64 {
	p, err := c.getStart([]string{key}, false)
	if err != nil {
		return int64(wire.CodeOf(err))
	}
	return p.Sizes()[0]
}

// Remove deletes keys; see master.Core.Remove for the codes.
func (c *Client) Remove(keys []string, force bool) []wire.Code {
	out := make([]wire.Code, len(keys))
	if err := c.checkOpen(); err != nil {
		return wire.Fill(out, wire.CodeOf(err))
	}
	ctx, cancel := c.ctx()
	defer cancel()
	var resp wire.CodesResp
	if err := c.master.Call(ctx, wire.OpRemove, &wire.RemoveReq{Keys: keys, Force: force}, &resp); err != nil || len(resp.Codes) != len(keys) {
		code := wire.CodeOf(err)
		if err == nil {
			code = wire.ErrRPCFail
		}
		return wire.Fill(out, code)
	}
	return resp.Codes
}

// RemoveByRegex removes the keys pattern matches (search semantics).
func (c *Client) RemoveByRegex(pattern string, force bool) (int64, error) {
	return c.count(wire.OpRemoveByRegex, &wire.RemoveByRegexReq{Pattern: pattern, Force: force})
}

// RemoveAll removes every removable object.
func (c *Client) RemoveAll(force bool) (int64, error) {
	return c.count(wire.OpRemoveAll, &wire.RemoveAllReq{Force: force})
}

func (c *Client) count(op wire.Op, req any) (int64, error) {
	if err := c.checkOpen(); err != nil {
		return 0, err
	}
	ctx, cancel := c.ctx()
	defer cancel()
	var resp wire.CountResp
	if err := c.master.Call(ctx, op, req, &resp); err != nil {
		return 0, err
	}
	return resp.N, nil
}

// DiskReads counts the batches of objects this client has read from an
// SSD tier (its own or another client's): one per holder per get call.
// Mooncake reports it as get_offload_rpc_read_count.
func (c *Client) DiskReads() int64 { return c.diskReads.Load() }

// ReplicaDesc is one replica of an object as Mooncake's replica
// descriptors report it.
type ReplicaDesc struct {
	// Disk: a copy on a client's SSD tier (Endpoint is the tier's);
	// otherwise a memory replica Size bytes at Address in the memory of
	// the client whose segment is named Endpoint.
	Disk     bool   `json:"disk"`
	Address  uint64 `json:"address"`
	Size     uint64 `json:"size"`
	Endpoint string `json:"endpoint"`
}

// ReplicaDescs describes each key's replicas, memory ones first (one
// lookup for the batch, granting leases as a get does). codes[i] is OK or
// the lookup's code for key i (-704 missing).
func (c *Client) ReplicaDescs(keys []string) (descs [][]ReplicaDesc, codes []wire.Code) {
	descs, codes = make([][]ReplicaDesc, len(keys)), make([]wire.Code, len(keys))
	p, err := c.getStart(keys, false)
	if err != nil {
		return descs, wire.Fill(codes, wire.CodeOf(err))
	}
	var ids []uint64
	for _, r := range p.res {
		for _, rep := range r.Replicas {
			ids = append(ids, rep.SegID)
		}
	}
	ctx, cancel := c.ctx()
	defer cancel()
	_ = c.resolve(ctx, ids) // a segment the master forgot meanwhile is left out
	for i, r := range p.res {
		codes[i] = r.Code
		if r.Code != wire.OK {
			continue
		}
		for _, rep := range r.Replicas {
			if d, ok := c.peers.desc(rep.SegID); ok {
				descs[i] = append(descs[i], ReplicaDesc{Address: d.Base + rep.Offset, Size: r.Size, Endpoint: d.Name})
			}
		}
		if r.Disk != "" {
			descs[i] = append(descs[i], ReplicaDesc{Disk: true, Size: r.Size, Endpoint: r.Disk})
		}
	}
	return descs, codes
}

// ReplicaClear drops replicas of objects this client wrote: each whole
// (segment "") or those on the named segment; the keys cleared. Objects
// with a running lease, still being written, or written by another client
// are left alone (see master.Core.ReplicaClear).
func (c *Client) ReplicaClear(keys []string, segment string) ([]string, error) {
	if err := c.checkOpen(); err != nil {
		return nil, err
	}
	ctx, cancel := c.ctx()
	defer cancel()
	var resp wire.KeysResp
	if err := c.master.Call(ctx, wire.OpReplicaClear, &wire.ReplicaClearReq{ClientID: c.id, Keys: keys, Segment: segment}, &resp); err != nil {
		return nil, err
	}
	return resp.Keys, nil
}
