// session.go defines Sessions, ranged writes and reads (Mooncake's put and get
// sessions, and get_into_ranges): a put session reserves objects with
// PutStart and leaves them invisible while the caller writes byte ranges
// of them, until PutEnd or PutRevoke; a get session looks objects up
// (holding their leases) and serves ranged reads of them until it ends,
// looking an object up again when a read finds its lease over.

package client

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/gostore/gostore/gostore/transfer"
	"github.com/gostore/gostore/gostore/wire"
)

// RangePart is one byte range of an object: Buf is written at (or read
// from) offset Off of the object.
type RangePart struct {
	Buf []byte
	Off uint64
}

// Sessions carries out ranged writes and reads: put sessions, get
// sessions and GetRanges. It owns the open sessions (sess, under
// sess.mu, which is never held across an RPC or a transfer); each call
// that touches memory holds core's inFlight read lock (enter) for its
// length. Lookups, replica reads and the ends of reads are Reads' and
// readEnds'.
type Sessions struct {
	*core
	reads *Reads
	ends  *readEnds
	sess  sessions // open put and get sessions
}

// sessions are this client's open put and get sessions, by key.
type sessions struct {
	mu   sync.Mutex
	puts map[string]putSession
	gets map[string]getSession
}

type putSession struct {
	epoch    uint64
	size     uint64
	replicas []wire.Replica
}

type getSession struct {
	res  wire.GetResult
	sent time.Time // when GetReplicas left: the lease counts from here
}

// PutSessionStart reserves each key's object of sizes[i] bytes (one
// PutStart for the batch); the objects stay invisible (-703 to readers)
// until PutSessionEnd. Result i: OK, -705 when the key exists, -600 for
// an empty key or size or a key whose session is already open, or the
// master's code.
func (c *Sessions) PutSessionStart(keys []string, sizes []uint64, cfg wire.ReplicaConfig) []wire.Code {
	out := make([]wire.Code, len(keys))
	if err := c.checkOpen(); err != nil {
		return wire.Fill(out, wire.CodeOf(err))
	}
	req := wire.PutStartReq{ClientID: c.id, Config: cfg, HostID: transfer.HostID()}
	var idx []int
	c.sess.mu.Lock()
	for i, k := range keys {
		_, open := c.sess.puts[k]
		if k == "" || i >= len(sizes) || sizes[i] == 0 || open {
			out[i] = wire.ErrInvalidParams
			continue
		}
		req.Keys, req.Sizes = append(req.Keys, k), append(req.Sizes, sizes[i])
		idx = append(idx, i)
	}
	c.sess.mu.Unlock()
	if len(idx) == 0 {
		return out
	}
	ctx, cancel := c.ctx()
	defer cancel()
	var resp wire.PutStartResp
	err := c.master.Call(ctx, wire.OpPutStart, &req, &resp)
	if err == nil && len(resp.Results) != len(idx) {
		err = wire.Errorf(wire.ErrRPCFail, "PutStart answered %d results for %d keys", len(resp.Results), len(idx))
	}
	if err != nil {
		for _, i := range idx {
			out[i] = wire.CodeOf(err)
		}
		return out
	}
	c.sess.mu.Lock()
	defer c.sess.mu.Unlock()
	if c.sess.puts == nil {
		c.sess.puts = map[string]putSession{}
	}
	for j, r := range resp.Results {
		i := idx[j]
		out[i] = r.Code
		if r.Code == wire.OK {
			c.sess.puts[keys[i]] = putSession{epoch: r.Epoch, size: req.Sizes[j], replicas: r.Replicas}
		}
	}
	return out
}

// PutSessionWrite writes each key's parts into every replica of its open
// put session. Result i is the bytes written for key i, or -600 when the
// key has no open session or a part falls outside its object (nothing of
// that key is written), or the transfer's code.
func (c *Sessions) PutSessionWrite(keys []string, parts [][]RangePart) []int64 {
	out := make([]int64, len(keys))
	leave, err := c.enter()
	if err != nil {
		return wire.Fill(out, int64(wire.CodeOf(err)))
	}
	defer leave()
	ctx, cancel := c.ctx()
	defer cancel()
	var ops []transfer.Op
	var opKey []int
	var ids []uint64
	found := make([]putSession, len(keys))
	c.sess.mu.Lock()
	for i, k := range keys {
		s, ok := c.sess.puts[k]
		if !ok || i >= len(parts) || !partsFit(parts[i], s.size) {
			out[i] = int64(wire.ErrInvalidParams)
			continue
		}
		found[i] = s
		for _, rep := range s.replicas {
			ids = append(ids, rep.SegID)
		}
	}
	c.sess.mu.Unlock()
	known, resolveErr := c.resolve(ctx, ids)
	for i := range keys {
		if out[i] != 0 {
			continue
		}
		for _, rep := range found[i].replicas {
			peer, ok := known[rep.SegID]
			if !ok {
				c.log.Warn("put session: replica on an unknown segment", "key", keys[i], "segment", rep.SegID, "err", resolveErr)
				out[i] = int64(wire.ErrSegmentNotFound)
				break
			}
			for _, p := range parts[i] {
				if len(p.Buf) > 0 {
					ops = append(ops, transfer.Op{Peer: peer, Offset: rep.Offset + p.Off, Bufs: [][]byte{p.Buf}, Write: true,
						Grant: rep.Grant})
					opKey = append(opKey, i)
				}
			}
		}
		if out[i] == 0 {
			for _, p := range parts[i] {
				out[i] += int64(len(p.Buf))
			}
		}
	}
	c.runOps(ctx, "put session", keys, ops, opKey, out)
	return out
}

// PutSessionEnd publishes the objects of keys' open put sessions (PutEnd):
// result i is the master's code, -600 for a key with no open session.
func (c *Sessions) PutSessionEnd(keys []string) []wire.Code {
	return c.endPutSessions(keys, wire.OpPutEnd)
}

// PutSessionRevoke drops the objects of keys' open put sessions
// (PutRevoke): result i is the master's code, -600 for a key with no
// open session.
func (c *Sessions) PutSessionRevoke(keys []string) []wire.Code {
	return c.endPutSessions(keys, wire.OpPutRevoke)
}

func (c *Sessions) endPutSessions(keys []string, op wire.Op) []wire.Code {
	out := make([]wire.Code, len(keys))
	if err := c.checkOpen(); err != nil {
		return wire.Fill(out, wire.CodeOf(err))
	}
	req := wire.KeysReq{ClientID: c.id}
	var idx []int
	c.sess.mu.Lock()
	for i, k := range keys {
		s, ok := c.sess.puts[k]
		if !ok {
			out[i] = wire.ErrInvalidParams
			continue
		}
		delete(c.sess.puts, k)
		req.Keys, req.Epochs = append(req.Keys, k), append(req.Epochs, s.epoch)
		idx = append(idx, i)
	}
	c.sess.mu.Unlock()
	if len(idx) == 0 {
		return out
	}
	ctx, cancel := c.ctx()
	defer cancel()
	var resp wire.CodesResp
	err := c.master.Call(ctx, op, &req, &resp)
	spreadCodes(out, idx, resp.Codes, err)
	return out
}

// GetSessionStart looks keys up (GetReplicas, holding their leases) for
// ranged reads by GetSessionRead, which looks a key up again once its
// lease is over. Result i: OK, or -704 for a key
// that is missing (or empty), or the master's code. A key already in a
// session is looked up again.
func (c *Sessions) GetSessionStart(keys []string) []wire.Code {
	out := make([]wire.Code, len(keys))
	var q []string
	var qi []int
	first := map[string]int{} // a key named twice is looked up (and read-counted) once
	for i, k := range keys {
		if k == "" {
			out[i] = wire.ErrObjectNotFound
			continue
		}
		if _, dup := first[k]; dup {
			continue
		}
		first[k] = i
		q, qi = append(q, k), append(qi, i)
	}
	if len(q) == 0 {
		return out
	}
	defer func() {
		for i, k := range keys {
			if j, ok := first[k]; ok && j != i {
				out[i] = out[j]
			}
		}
	}()
	p, err := c.reads.GetStart(q)
	if err != nil {
		for _, i := range qi {
			out[i] = wire.CodeOf(err)
		}
		return out
	}
	// The master counts this client as a reader once per lookup: a lookup
	// replaced here ends now, the others at GetSessionEnd.
	type read struct {
		key   string
		epoch uint64
	}
	var replaced []read
	c.sess.mu.Lock()
	if c.sess.gets == nil {
		c.sess.gets = map[string]getSession{}
	}
	for j, r := range p.res {
		out[qi[j]] = r.Code
		if r.Code != wire.OK {
			continue
		}
		if old, again := c.sess.gets[q[j]]; again {
			replaced = append(replaced, read{q[j], old.res.Epoch})
		}
		c.sess.gets[q[j]] = getSession{res: r, sent: p.sent}
	}
	c.sess.mu.Unlock()
	for _, r := range replaced {
		c.ends.readsDone.add(r.key, r.epoch)
	}
	return out
}

// GetSessionRead reads each key's parts (Off: offset in the object) from
// its open get session. Result i is the bytes read for key i, -600 when
// the key has no open session or a part falls outside its object (nothing
// of that key is read), or the transfer's code.
//
// A session's lookup holds its leases for the lease's length only: a key
// whose lease is over before the read (a session older than the lease)
// is looked up again instead of read, and one whose read ended after it
// is looked up and read again (readRangesAgain, as GetRanges: bytes read
// after the lease may be a newer object's). Either way the session's entry
// becomes the new lookup (replicas, lease, epoch), so later reads use it.
// Result i is then what the reads again give: the bytes (the object as it
// is now: an object upserted meanwhile gives its new bytes), the lookup's
// code for an object gone (-704), or -707, logged, when the object
// changed size or every read again outlived its lease.
func (c *Sessions) GetSessionRead(keys []string, parts [][]RangePart) []int64 {
	out := make([]int64, len(keys))
	leave, err := c.enter()
	if err != nil {
		return wire.Fill(out, int64(wire.CodeOf(err)))
	}
	defer leave()
	found := make([]getSession, len(keys))
	c.sess.mu.Lock()
	for i, k := range keys {
		s, ok := c.sess.gets[k]
		if !ok || i >= len(parts) || !partsFit(parts[i], s.res.Size) {
			out[i] = int64(wire.ErrInvalidParams)
			continue
		}
		found[i] = s
	}
	c.sess.mu.Unlock()
	results := make([]wire.GetResult, len(keys))
	skip := slices.Clone(out)
	var late []int
	for i := range keys {
		results[i] = found[i].res
		if out[i] == 0 && len(parts[i]) > 0 && expired(results[i], found[i].sent) {
			skip[i] = int64(wire.ErrLeaseExpired) // not worth reading: looked up again below
			late = append(late, i)
		}
	}
	per := c.readRanges(keys, results, parts, skip)
	for i := range keys {
		switch {
		case out[i] != 0:
		case skip[i] != 0:
			wire.Fill(per[i], int64(wire.ErrLeaseExpired))
		case expireRanges(per[i], results[i], found[i].sent):
			late = append(late, i)
		}
	}
	c.readRangesAgain(keys, results, parts, late, per, func(late []int, again *Pending) {
		c.renewGetSessions(keys, found, late, again)
	})
	for i := range keys {
		if out[i] == 0 {
			out[i] = sumOrFirstError(per[i])
		}
	}
	return out
}

// renewGetSessions makes again, the lookup again of keys[late[j]] (whose
// sessions were found[late[j]]), those keys' get sessions, and ends the
// reads of the lookups they replace: the master then counts this client
// as a reader of the object as it is now until GetSessionEnd. A session
// that changed meanwhile (ended, started again, or renewed for the same
// key named twice) is left as it is, and this lookup's read ends.
func (c *Sessions) renewGetSessions(keys []string, found []getSession, late []int, again *Pending) {
	var ended []getSession
	var endedKeys []string
	c.sess.mu.Lock()
	for j, i := range late {
		r := again.res[j]
		if r.Code != wire.OK {
			continue // no read counted; the session keeps its entry and reads of it look it up again
		}
		fresh := getSession{res: r, sent: again.sent}
		s, ok := c.sess.gets[keys[i]]
		if ok && s.res.Epoch == found[i].res.Epoch && s.sent.Equal(found[i].sent) {
			c.sess.gets[keys[i]] = fresh
			ended, endedKeys = append(ended, s), append(endedKeys, keys[i])
			found[i] = fresh
		} else {
			ended, endedKeys = append(ended, fresh), append(endedKeys, keys[i])
		}
	}
	c.sess.mu.Unlock()
	again.read = false // its reads are the sessions' now, or ended below
	for j, s := range ended {
		c.ends.readsDone.add(endedKeys[j], s.res.Epoch)
	}
}

// GetSessionEnd ends keys' get sessions (their reads end at the master);
// keys without one are ignored.
func (c *Sessions) GetSessionEnd(keys []string) {
	c.sess.mu.Lock()
	var ended []getSession
	var endedKeys []string
	for _, k := range keys {
		if s, ok := c.sess.gets[k]; ok {
			ended, endedKeys = append(ended, s), append(endedKeys, k)
			delete(c.sess.gets, k)
		}
	}
	c.sess.mu.Unlock()
	for j, s := range ended {
		c.ends.readsDone.add(endedKeys[j], s.res.Epoch)
	}
}

// GetRanges reads byte ranges of objects without a session: one lookup
// for the batch, the ranges, and the reads end. Result [i][k] is the
// bytes read into parts[i][k], or -704 when key i is missing, -600 when
// that range falls outside the object, -707 past the lease, or the
// transfer's code.
func (c *Sessions) GetRanges(keys []string, parts [][]RangePart) [][]int64 {
	out := make([][]int64, len(keys))
	for i := range out {
		if i < len(parts) {
			out[i] = make([]int64, len(parts[i]))
		}
	}
	fill := func(code wire.Code) [][]int64 {
		for i := range out {
			wire.Fill(out[i], int64(code))
		}
		return out
	}
	leave, err := c.enter()
	if err != nil {
		return fill(wire.CodeOf(err))
	}
	defer leave()
	p, err := c.reads.GetStart(keys)
	if err != nil {
		return fill(wire.CodeOf(err))
	}
	defer c.ends.endReads(p)
	status := make([]int64, len(keys))
	for i, r := range p.res {
		if r.Code != wire.OK {
			status[i] = int64(r.Code)
		}
	}
	per := c.readRanges(keys, p.res, parts, status)
	var late []int
	for i := range keys {
		if i >= len(parts) {
			continue
		}
		if status[i] != 0 {
			wire.Fill(out[i], status[i])
			continue
		}
		copy(out[i], per[i])
		if expireRanges(out[i], p.res[i], p.sent) {
			late = append(late, i)
		}
	}
	c.readRangesAgain(keys, p.res, parts, late, out, nil)
	return out
}

// readRanges reads parts[i] of object i (located in res[i]) for every i
// whose skip[i] is 0, each range from its own replicas in turn. Result
// [i][k]: bytes read into parts[i][k], -600 for a range outside the
// object, or the transfer's code. Disk copies serve whole objects only:
// a range of an object with no memory replica left gets -712.
func (c *Sessions) readRanges(keys []string, res []wire.GetResult, parts [][]RangePart, skip []int64) [][]int64 {
	per := make([][]int64, len(keys))
	var n int
	for i := range keys {
		if i < len(parts) {
			per[i] = make([]int64, len(parts[i]))
			n += len(parts[i])
		}
	}
	flat := make([]int64, n)
	slab := make([]readWant, 0, n)
	var wants []*readWant
	var ids []uint64
	base := 0
	for i := range keys {
		if i >= len(parts) {
			continue
		}
		for k, p := range parts[i] {
			slot := base + k
			r := res[i]
			switch {
			case skip[i] != 0:
			case !inObject(p, r.Size):
				flat[slot] = int64(wire.ErrInvalidParams)
			case len(p.Buf) == 0:
			case len(r.Replicas) == 0:
				flat[slot] = int64(wire.ErrReplicaIsGone)
			default:
				slab = append(slab, readWant{item: slot, key: keys[i], off: p.Off, size: uint64(len(p.Buf)),
					bufs: [][]byte{p.Buf}, replicas: append([]wire.Replica(nil), r.Replicas...)})
				wants = append(wants, &slab[len(slab)-1])
				for _, rep := range r.Replicas {
					ids = append(ids, rep.SegID)
				}
			}
		}
		base += len(parts[i])
	}
	if len(wants) > 0 {
		ctx, cancel := c.ctx()
		c.reads.readReplicas(ctx, wants, ids, flat) // ranges carry no disk copy: none comes back for the disk
		cancel()
	}
	base = 0
	for i := range keys {
		if i < len(parts) {
			copy(per[i], flat[base:base+len(parts[i])])
			base += len(parts[i])
		}
	}
	return per
}

// partsFit reports whether every part lies inside an object of size bytes.
func partsFit(parts []RangePart, size uint64) bool {
	for _, p := range parts {
		if !inObject(p, size) {
			return false
		}
	}
	return true
}

func inObject(p RangePart, size uint64) bool {
	n := uint64(len(p.Buf))
	return p.Off <= size && n <= size-p.Off
}

// sumOrFirstError is the total of results, or the first negative one.
func sumOrFirstError(results []int64) int64 {
	var total int64
	for _, r := range results {
		if r < 0 {
			return r
		}
		total += r
	}
	return total
}

// expired reports whether r's lease, granted when its lookup left at sent,
// has ended: bytes read after it must not be trusted.
func expired(r wire.GetResult, sent time.Time) bool {
	return r.LeaseMS > 0 && time.Now().After(sent.Add(time.Duration(r.LeaseMS)*time.Millisecond))
}

// runOps runs ops (ops[k] belongs to key opKey[k]) and records the first
// failure of each key in out.
func (c *Sessions) runOps(ctx context.Context, what string, keys []string, ops []transfer.Op, opKey []int, out []int64) {
	if len(ops) == 0 {
		return
	}
	for k, err := range c.doRefreshing(ctx, ops, nil) {
		if err == nil {
			continue
		}
		i, seg := opKey[k], ops[k].Peer.SegID
		c.log.Warn(what+": transfer failed", "key", keys[i], "segment", seg, "err", err)
		if out[i] >= 0 {
			out[i] = int64(wire.CodeOf(err))
		}
		c.opFailed(&ops[k], err)
	}
}
