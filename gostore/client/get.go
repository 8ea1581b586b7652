// get.go defines Reads, the read side: GetReplicas, and transfers into
// caller buffers from the cheapest replica, the others, then the disk copy.

package client

import (
	"context"
	"sort"
	"sync/atomic"
	"time"

	"github.com/gostore/gostore/gostore/ssdtier"
	"github.com/gostore/gostore/gostore/transfer"
	"github.com/gostore/gostore/gostore/wire"
)

// Reads carries out gets: the lookup (GetReplicas, granting leases),
// the transfers into the caller's memory (readInto: the cheapest memory
// replica first, the others in rounds, the disk copy last), the read
// again of what outlived its lease (readAgain), reads of one object from
// where it was last found (spots.go) and in place (places.go). It owns
// the spots, the counters of reads from them and of disk reads, and the
// SSD reader; ends tells the master when each read is over. Locks: spots.mu
// only inside spots' methods; a call that touches memory holds core's
// inFlight read lock (enter) for its length, taken by the exported call.
type Reads struct {
	*core
	ends  *readEnds
	spots spots // where single-key gets last found their objects (spots.go)
	// specReads counts reads from a spot, specHits those the master's
	// answer confirmed (for tests and metrics).
	specReads, specHits atomic.Uint64
	diskReads           atomic.Int64    // batches read from SSD tiers (DiskReads)
	disk                *ssdtier.Reader // reads disk copies, ours or other clients'
}

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
func (c *Reads) GetStart(keys []string) (*Pending, error) {
	return c.getStart(keys, true)
}

func (c *Reads) getStart(keys []string, read bool) (*Pending, error) {
	return c.locate(keys, read, false)
}

// peek locates the keys' replicas without using the objects (no lease, no
// reader, no recency): how the SSD tier reads what it persists.
func (c *Reads) peek(keys []string) (*Pending, error) {
	return c.locateAs(keys, false, true, false)
}

// peekStored is peek of stored keys (the SSD tier's: wire.KeysReq.Stored).
func (c *Reads) peekStored(keys []string) (*Pending, error) {
	return c.locateAs(keys, false, true, true)
}

func (c *Reads) locate(keys []string, read, peek bool) (*Pending, error) {
	return c.locateAs(keys, read, peek, false)
}

func (c *Reads) locateAs(keys []string, read, peek, stored bool) (*Pending, error) {
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
	if read && c.ends.laterReads.overlap(q) {
		// A key read again at once: its last ReadDone goes first, on its
		// own, so that its reader count drops to 0 between the two gets
		// (carried with this GetReplicas it would go to 0 and back to 1
		// in one breath, and a loop reading the key would keep other
		// clients' upserts busy for good).
		c.ends.readDoneAlone.Add(1)
		if err := c.master.SendLater(ctx); err != nil {
			c.log.Debug("ReadDone not delivered", "err", err)
		}
	}
	var resp wire.GetReplicasResp
	if err := c.master.Call(ctx, wire.OpGetReplicas, &wire.KeysReq{ClientID: c.id, Keys: q, ForRead: read, Peek: peek, Stored: stored}, &resp); err != nil {
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
func (c *Reads) Abort(p *Pending) { c.ends.endReads(p) }

// GetFinish reads object i into dests[i] (a scatter list the caller owns;
// nil skips the object). Result i is the bytes written or a negative code:
// -600 when dests[i] is smaller than the object, -707 when the transfer
// ended after the object's lease (the memory may have been reused; the
// bytes must not be trusted).
func (c *Reads) GetFinish(p *Pending, dests [][][]byte) []int64 {
	return c.GetFinishDevice(p, dests, nil)
}

// finish is GetFinish for a caller that has entered; dev[i] lists the
// device parts of dests[i] (dev nil when there are none).
func (c *Reads) finish(p *Pending, dests [][][]byte, dev [][]DevicePart) []int64 {
	defer c.ends.endReads(p)
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
func (c *Reads) readInto(p *Pending, dests [][][]byte, dev [][]DevicePart) []int64 {
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
func (c *Reads) readReplicas(ctx context.Context, wants []*readWant, ids []uint64, out []int64) (toDisk []*readWant) {
	if len(wants) == 0 {
		return nil
	}
	known, _ := c.resolve(ctx, ids) // unresolved replicas are skipped below
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
			peer, ok := known[rep.SegID]
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
			for j, err := range c.doRefreshing(ctx, ops, nil) {
				w := opWant[j]
				if err == nil {
					out[w.item] = int64(w.size)
					continue
				}
				seg := ops[j].Peer.SegID
				c.log.Warn("get: transfer failed; trying another replica", "key", w.key, "segment", seg, "err", err)
				out[w.item] = int64(wire.CodeOf(err))
				c.opFailed(&ops[j], err)
				next = append(next, w)
			}
		}
		wants = next
	}
	return toDisk
}

// readDisk reads objects from the SSD tier at endpoint, their device parts
// staged through pinned memory by the engine.
func (c *Reads) readDisk(ctx context.Context, keys []string, endpoint string, ws []*readWant, out []int64) {
	c.diskReads.Add(1)
	// SSD tiers hold the stored keys, which a master that separates
	// tenants scopes (wire.ScopeKey; a default tenant's key too when it
	// holds a NUL): the master's last ping says whether it does.
	diskKeys := keys
	if c.tenanted.Load() {
		diskKeys = make([]string, len(keys))
		for _, w := range ws {
			diskKeys[w.item] = wire.ScopeKey(c.cfg.TenantID, keys[w.item])
		}
	}
	ops := make([]transfer.Op, len(ws))
	for j, w := range ws {
		ops[j] = transfer.Op{Bufs: w.bufs, Device: w.dev}
	}
	errs := c.engine.Staged(ops, func(host []transfer.Op) []error {
		dw := make([]ssdtier.Want, len(host))
		for k, op := range host {
			dw[k] = ssdtier.Want{Item: ws[k].item, Size: ws[k].size, Bufs: op.Bufs}
		}
		c.disk.Read(ctx, diskKeys, endpoint, dw, out) // this client's own tier directly, another's through its staging
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
func (c *Reads) orderReplicas(reps []wire.Replica) {
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
func (c *Reads) GetInto(keys []string, dests [][][]byte) []int64 {
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
func (c *Reads) GetBuffers(keys []string) (bufs [][]byte, codes []int64) {
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
func (c *Reads) FreeBuffer(addr uintptr) error { return c.staging.put(addr) }

// DiskReads counts the batches of objects this client has read from an
// SSD tier (its own or another client's): one per holder per get call.
// Mooncake reports it as get_offload_rpc_read_count.
func (c *Reads) DiskReads() int64 { return c.diskReads.Load() }
