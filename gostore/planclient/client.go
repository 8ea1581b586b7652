// client.go defines Client: members and routing, write plans (open,
// write, commit, remove), reads (locate, read, one-hop read) and eviction.

package planclient

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/gostore/gostore/gostore/plan"
	"github.com/gostore/gostore/gostore/transfer"
	"github.com/gostore/gostore/gostore/wire"
)

// WritePlan is where a producer writes an object (the seed's fields).
type WritePlan struct {
	Key       string
	KeyHash   uint64
	DstRank   int // -1 when the owner is not a plan member
	SegID     uint64
	HeaderOff uint64 // in the owner's segment
	Payload   uint64 // offset of page 0 in the owner's segment
	PageBytes uint32
	NPages    uint32
	Bytes     uint64
	Epoch     uint64
	mem       []byte // the owner's segment, mapped here (nil: over TCP)
	peer      transfer.Peer
	// Over TCP: the grant to write the object (header and payload) and
	// the header as this producer last wrote it. The grant allows no
	// read, so header changes are made to the copy, then written.
	grant []byte
	hdr   headerScratch
}

// ObjMeta locates a READY object for readers (the seed's fields).
type ObjMeta struct {
	KeyHash    uint64
	OwnerRank  int // -1 when the owner is not a plan member
	SegID      uint64
	HeaderOff  uint64
	PayloadOff uint64
	Bytes      uint64
	PageBytes  uint32
	NPages     uint32
	Epoch      uint64
	// Grant lets a reader on another host read the object over TCP (the
	// master's read grant, good for the lease plus slack); nil where none
	// came (the owner is mapped here, or the meta was made by hand).
	Grant []byte
}

// Stats are the plan API's counters in this process (seed §11).
type Stats struct {
	Opened, Committed, Aborted, Reads, ReadMisses, Removed    atomic.Int64
	BytesWritten, BytesRead                                   atomic.Int64
	StaleReads, NotReady, CASFailures, NoRoom, CommitFailures atomic.Int64
	Evictions                                                 atomic.Int64 // objects evicted on this process's behalf
}

// Client is one store client's side of the plan API. Its methods are safe
// for concurrent use.
type Client struct {
	host Host
	log  *slog.Logger

	mu      sync.Mutex
	open    map[string]*WritePlan // plans this process opened and has not committed
	members []wire.PlanMember     // cached; refreshed when routing misses
	rank    int
	joined  bool
	stats   Stats
}

// New makes the plan API of the store client behind host; log is that
// client's logger.
func New(host Host, log *slog.Logger) *Client {
	return &Client{host: host, log: log}
}

// Errors of the plan API; each carries its contract code.
var (
	ErrNotReady = wire.Errorf(wire.ErrReplicaIsNotReady, "plan object is not READY")
	ErrUnknown  = wire.Errorf(wire.ErrObjectNotFound, "no such plan object")
)

// guarded runs fn as a call that may touch memory (admitted by the host's
// Enter) with the host's call timeout.
func guarded[T any](c *Client, fn func(ctx context.Context) (T, error)) (T, error) {
	leave, err := c.host.Enter()
	if err != nil {
		var zero T
		return zero, err
	}
	defer leave()
	ctx, cancel := c.host.CallContext()
	defer cancel()
	return fn(ctx)
}

// Join makes the client's segment a plan member and returns its rank.
func (c *Client) Join() (int, error) {
	if !c.host.HasHostSegment() {
		return 0, wire.Errorf(wire.ErrInvalidParams, "a plan member needs a segment of host memory (heap_bytes > 0; GPU heaps are not supported)")
	}
	ctx, cancel := c.host.CallContext()
	defer cancel()
	var resp wire.PlanJoinResp
	if err := c.host.CallMaster(ctx, wire.OpPlanJoin, &wire.PlanJoinReq{ClientID: c.host.ClientID(), Segment: c.host.SegmentName()}, &resp); err != nil {
		return 0, err
	}
	c.mu.Lock()
	c.rank, c.joined = resp.Rank, true
	c.mu.Unlock()
	return resp.Rank, nil
}

// Members returns the live plan members by rank (asking the master when
// refresh is set or nothing is cached).
func (c *Client) Members(refresh bool) ([]wire.PlanMember, error) {
	c.mu.Lock()
	cached := c.members
	c.mu.Unlock()
	if cached != nil && !refresh {
		return cached, nil
	}
	ctx, cancel := c.host.CallContext()
	defer cancel()
	var resp wire.PlanMembersResp
	if err := c.host.CallMaster(ctx, wire.OpPlanMembers, &wire.PlanMembersReq{}, &resp); err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.members = resp.Members
	c.mu.Unlock()
	return resp.Members, nil
}

// Owner resolves where a key's plan object goes: the member of rank
// preferRank (>= 0), the segment named preferSeg, or hash(key) % world.
func (c *Client) Owner(key string, preferRank int, preferSeg string) (wire.PlanMember, error) {
	for refresh := false; ; refresh = true {
		members, err := c.Members(refresh)
		if err != nil {
			return wire.PlanMember{}, err
		}
		switch {
		case preferSeg != "":
			for _, m := range members {
				if m.Seg.Name == preferSeg {
					return m, nil
				}
			}
		case preferRank >= 0:
			for _, m := range members {
				if m.Rank == preferRank {
					return m, nil
				}
			}
		case len(members) > 0:
			return members[plan.KeyHash(key)%uint64(len(members))], nil
		}
		if refresh {
			what := fmt.Sprintf("rank %d", preferRank)
			if preferSeg != "" {
				what = fmt.Sprintf("segment %q", preferSeg)
			} else if preferRank < 0 {
				what = "any member"
			}
			return wire.PlanMember{}, wire.Errorf(wire.ErrSegmentNotFound, "no plan member: %s", what)
		}
	}
}

// OpenForWrite allocates key's object (header and bytes of payload) on
// owner, writes its header in state WRITING and returns the plan. The
// object stays invisible (-703) until Commit. When the pool has no room
// and lowWatermark > 0, it evicts until usage is below lowWatermark and
// tries once more (the seed's high/low watermarks: the master's eviction
// threshold is the high one).
func (c *Client) OpenForWrite(key string, bytes uint64, pageBytes uint32, owner wire.PlanMember, lowWatermark float64) (*WritePlan, error) {
	p, err := c.openForWrite(key, bytes, pageBytes, owner)
	if wire.CodeOf(err) == wire.ErrNoAvailableHandle && lowWatermark > 0 {
		if _, _, eerr := c.EvictUntil(lowWatermark); eerr == nil {
			p, err = c.openForWrite(key, bytes, pageBytes, owner)
		}
	}
	return p, err
}

func (c *Client) openForWrite(key string, bytes uint64, pageBytes uint32, owner wire.PlanMember) (*WritePlan, error) {
	leave, err := c.host.Enter()
	if err != nil {
		return nil, err
	}
	defer leave()
	if key == "" || bytes == 0 || pageBytes == 0 {
		return nil, wire.Errorf(wire.ErrInvalidParams, "open_for_write needs a key, bytes_total > 0 and page_bytes > 0")
	}
	if bytes > owner.Seg.Size {
		return nil, wire.Errorf(wire.ErrInvalidParams, "%d bytes do not fit the owner's %d-byte heap", bytes, owner.Seg.Size)
	}
	ctx, cancel := c.host.CallContext()
	defer cancel()
	var resp wire.PutStartResp
	req := wire.PutStartReq{ClientID: c.host.ClientID(), Keys: []string{key}, Sizes: []uint64{plan.HeaderSize + bytes},
		Config: wire.ReplicaConfig{ReplicaNum: 1, Preferred: []string{owner.Seg.Name}}, HostID: transfer.HostID()}
	if err := c.host.CallMaster(ctx, wire.OpPutStart, &req, &resp); err != nil {
		return nil, err
	}
	if len(resp.Results) != 1 {
		return nil, wire.Errorf(wire.ErrRPCFail, "PutStart answered %d results", len(resp.Results))
	}
	r := resp.Results[0]
	if r.Code != wire.OK {
		if r.Code == wire.ErrNoAvailableHandle {
			c.stats.NoRoom.Add(1)
		}
		return nil, wire.Errorf(r.Code, "open_for_write %q", key)
	}
	rep := r.Replicas[0]
	p := &WritePlan{Key: key, KeyHash: plan.KeyHash(key), DstRank: -1, SegID: rep.SegID, HeaderOff: rep.Offset,
		Payload: rep.Offset + plan.HeaderSize, PageBytes: pageBytes, NPages: plan.Pages(bytes, pageBytes),
		Bytes: bytes, Epoch: r.Epoch, grant: rep.Grant}
	if rep.SegID == owner.Seg.ID {
		p.DstRank = owner.Rank
	}
	abort := func(err error) (*WritePlan, error) {
		var codes wire.CodesResp
		c.host.CallMaster(ctx, wire.OpPutRevoke, &wire.KeysReq{ClientID: c.host.ClientID(), Keys: []string{key}, Epochs: []uint64{r.Epoch}}, &codes)
		c.stats.Aborted.Add(1)
		return nil, err
	}
	if p.mem, p.peer, err = c.host.SegmentMemory(ctx, rep.SegID); err != nil {
		return abort(err)
	}
	h := plan.Header{KeyHash: p.KeyHash, NPages: p.NPages, PageSize: pageBytes, PayloadOff: p.Payload,
		Bytes: bytes, Epoch: uint32(p.Epoch), LastAccess: uint64(time.Now().UnixNano())}
	if err := c.writeHeader(ctx, p, func(b []byte) error { return plan.Reserve(b, h) }); err != nil {
		return abort(err)
	}
	c.mu.Lock()
	if c.open == nil {
		c.open = make(map[string]*WritePlan)
	}
	c.open[key] = p
	c.mu.Unlock()
	c.stats.Opened.Add(1)
	return p, nil
}

// writeHeader applies op to the plan's header: in place where the owner's
// memory is mapped here, else on the producer's copy of it, which is then
// written over TCP (for a TCP owner a remote CAS is not possible; the
// producer is the only writer of a header it reserved, so a plain write
// is enough, and the copy, the header as it last wrote it, spares a read
// back). The copy changes only once the write landed.
func (c *Client) writeHeader(ctx context.Context, p *WritePlan, op func([]byte) error) error {
	if p.mem != nil {
		h, err := c.headerAt(ctx, p.mem, p.peer, p.HeaderOff, nil, nil)
		if err != nil {
			return err
		}
		return op(h)
	}
	next := p.hdr
	h := next.view()
	if err := op(h); err != nil {
		return err
	}
	if err := c.host.Transfer(ctx, transfer.Op{Peer: p.peer, Offset: p.HeaderOff, Bufs: [][]byte{h}, Write: true, Grant: p.grant}); err != nil {
		return err
	}
	p.hdr = next
	return nil
}

// headerScratch holds a header read or written over TCP: 64 bytes, 8-byte
// aligned as words always are (plan's atomics need the alignment), so a
// copy of one is aligned too.
type headerScratch [plan.HeaderSize / 8]uint64

// view returns the header's 64 bytes.
func (s *headerScratch) view() []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), plan.HeaderSize)
}

// headerAt returns the plan header at off in a segment: a view of mem
// where the segment is mapped here, else a copy read over TCP (with
// grant, the reader's) into scratch.
func (c *Client) headerAt(ctx context.Context, mem []byte, peer transfer.Peer, off uint64, grant []byte, scratch *headerScratch) ([]byte, error) {
	if mem != nil {
		if off > uint64(len(mem)) || uint64(len(mem))-off < plan.HeaderSize {
			return nil, wire.Errorf(wire.ErrInvalidParams, "plan header at %d outside its %d-byte segment", off, len(mem))
		}
		return mem[off : off+plan.HeaderSize : off+plan.HeaderSize], nil
	}
	buf := scratch.view()
	return buf, c.host.Transfer(ctx, transfer.Op{Peer: peer, Offset: off, Bufs: [][]byte{buf}, Grant: grant})
}

// OpenPlan is this process's open (uncommitted) plan for key, or nil.
func (c *Client) OpenPlan(key string) *WritePlan {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.open[key]
}

// Writable is the plan's payload in this process's memory (the owner's
// segment mapped here), or nil when the owner is reachable over TCP only
// (write with Client.Write). It stays valid while the owner lives.
func (p *WritePlan) Writable() []byte {
	if p.mem == nil {
		return nil
	}
	return p.mem[p.Payload : p.Payload+p.Bytes : p.Payload+p.Bytes]
}

// Write copies data into the plan's payload at off (any transport).
func (c *Client) Write(p *WritePlan, off uint64, data []byte) error {
	if off > p.Bytes || uint64(len(data)) > p.Bytes-off {
		return wire.Errorf(wire.ErrInvalidParams, "write of %d bytes at %d is outside the %d-byte payload", len(data), off, p.Bytes)
	}
	leave, err := c.host.Enter()
	if err != nil {
		return err
	}
	defer leave()
	if w := p.Writable(); w != nil {
		copy(w[off:], data)
	} else {
		ctx, cancel := c.host.CallContext()
		defer cancel()
		if err := c.host.Transfer(ctx, transfer.Op{Peer: p.peer, Offset: p.Payload + off, Bufs: [][]byte{data}, Write: true, Grant: p.grant}); err != nil {
			return err
		}
	}
	return nil
}

// Commit publishes key's plan: its header turns READY with a release
// store, and from that moment every reader finds it (readers check the
// header; the master's index follows). The master learns in the
// background, batched with other commits (FlushCommits waits for that),
// so a commit costs no round trip. Only the process that opened the plan
// commits it; -704 for a key it has no open plan for.
func (c *Client) Commit(key string) error {
	c.mu.Lock()
	p := c.open[key]
	c.mu.Unlock()
	if p == nil {
		return wire.Errorf(wire.ErrObjectNotFound, "commit of %q: no open plan in this process", key)
	}
	leave, err := c.host.Enter()
	if err != nil {
		return err
	}
	defer leave()
	publish := func(b []byte) error { return plan.Publish(b, uint32(p.Epoch)) }
	if p.mem != nil {
		err = publish(p.mem[p.HeaderOff : p.HeaderOff+plan.HeaderSize]) // the hot path: one CAS
	} else {
		ctx, cancel := c.host.CallContext()
		err = c.writeHeader(ctx, p, publish)
		cancel()
	}
	if err != nil {
		c.stats.CASFailures.Add(1)
		return wire.Errorf(wire.ErrInvalidWrite, "commit of %q: %v", key, err)
	}
	c.mu.Lock()
	delete(c.open, key)
	c.mu.Unlock()
	c.host.QueueCommitEnd(key, p.Epoch)
	c.stats.Committed.Add(1)
	c.stats.BytesWritten.Add(int64(p.Bytes)) // what producers wrote, by whatever path
	return nil
}

// CommitEndDelay is how long a commit's PutEnd waits to be sent (with the
// other commits of that moment): readers find a committed plan by its
// header meanwhile; only the regular API waits for the master. The host
// batches QueueCommitEnd's keys with it.
const CommitEndDelay = 200 * time.Microsecond

// FlushCommits returns once the master has every commit made so far.
func (c *Client) FlushCommits() { c.host.FlushCommitEnds() }

// CommitsEnded hears the master's answer to a batch of commits (the host
// calls it for each batch of QueueCommitEnd's keys it sent): a plan the
// master no longer held (reclaimed or removed meanwhile) is counted and
// logged.
func (c *Client) CommitsEnded(req *wire.KeysReq, codes []wire.Code, err error) {
	if err != nil {
		c.stats.CommitFailures.Add(int64(len(req.Keys)))
		c.log.Warn("the master did not hear of committed plans; their objects stay unfinished until reclaimed",
			"keys", len(req.Keys), "err", err)
		return
	}
	for i, code := range codes {
		if code != wire.OK && i < len(req.Keys) {
			c.stats.CommitFailures.Add(1)
			c.log.Warn("a committed plan was gone at the master (removed or reclaimed meanwhile)", "key", req.Keys[i], "code", code)
		}
	}
}

// Locate returns the ObjMeta of key's READY object (granting a read lease).
func (c *Client) Locate(key string) (*ObjMeta, error) {
	return guarded(c, func(ctx context.Context) (*ObjMeta, error) {
		meta, found, err := c.locatePlan(ctx, key, false)
		if err == nil {
			found.EndRead()
			meta.OwnerRank = c.rankOf(meta.SegID) // readers of Read need no rank
		}
		return meta, err
	})
}

// locatePlan finds key's object and checks its header: the ObjMeta and
// the lookup (the caller ends its read), or ErrNotReady, ErrUnknown or a
// staleness error.
func (c *Client) locatePlan(ctx context.Context, key string, read bool) (*ObjMeta, Found, error) {
	found, err := c.host.Lookup(key, read)
	if err != nil {
		return nil, Found{}, err
	}
	r := found.Result
	fail := func(err error) (*ObjMeta, Found, error) {
		found.EndRead()
		return nil, Found{}, err
	}
	switch {
	case r.Code == wire.ErrReplicaIsNotReady && len(r.Replicas) > 0 && r.Size > plan.HeaderSize:
		// Committed in its header, perhaps, with the master not told
		// yet: the header decides (below).
	case r.Code == wire.ErrReplicaIsNotReady:
		c.stats.NotReady.Add(1)
		return fail(ErrNotReady)
	case r.Code == wire.ErrObjectNotFound:
		return fail(ErrUnknown)
	case r.Code != wire.OK:
		return fail(wire.Errorf(r.Code, "locate %q", key))
	case len(r.Replicas) == 0 || r.Size <= plan.HeaderSize:
		return fail(wire.Errorf(wire.ErrInvalidReplica, "%q is not a plan object in memory", key))
	}
	rep := r.Replicas[0]
	mem, peer, err := c.host.SegmentMemory(ctx, rep.SegID)
	if err != nil {
		return fail(err)
	}
	meta := &ObjMeta{KeyHash: plan.KeyHash(key), OwnerRank: -1, SegID: rep.SegID, HeaderOff: rep.Offset,
		PayloadOff: rep.Offset + plan.HeaderSize, Bytes: r.Size - plan.HeaderSize, Epoch: r.Epoch, Grant: rep.Grant}
	var scratch headerScratch
	var h plan.Header
	hb, err := c.headerAt(ctx, mem, peer, rep.Offset, meta.Grant, &scratch)
	if err == nil {
		h, err = plan.Load(hb)
	}
	if err == nil {
		err = h.Expect(meta.KeyHash, uint32(meta.Epoch), meta.Bytes)
	}
	if err != nil {
		if !errors.Is(err, plan.ErrNotReady) {
			c.stats.StaleReads.Add(1)
			return fail(wire.Errorf(wire.ErrInvalidReplica, "locate %q: %v", key, err))
		}
		c.stats.NotReady.Add(1)
		return fail(ErrNotReady)
	}
	meta.PageBytes, meta.NPages = h.PageSize, h.NPages
	return meta, found, nil
}

// rankOf is a segment's plan member rank (-1 when it is not one), asking
// the master once when the cache does not know it.
func (c *Client) rankOf(segID uint64) int {
	for refresh := false; ; refresh = true {
		members, err := c.Members(refresh)
		if err != nil {
			return -1
		}
		for _, m := range members {
			if m.Seg.ID == segID {
				return m.Rank
			}
		}
		if refresh {
			return -1
		}
	}
}

// Read copies key's READY payload into dst (at least its size) and
// returns the bytes copied. The copy is checked against the header before
// and after (a seqlock): a slot reclaimed meanwhile gives an error, never
// another object's bytes.
func (c *Client) Read(key string, dst []byte) (int, error) {
	return guarded(c, func(ctx context.Context) (int, error) { return c.read(ctx, key, dst) })
}

func (c *Client) read(ctx context.Context, key string, dst []byte) (int, error) {
	meta, found, err := c.locatePlan(ctx, key, true)
	if err != nil {
		if errors.Is(err, ErrUnknown) || errors.Is(err, ErrNotReady) {
			c.stats.ReadMisses.Add(1)
		}
		return 0, err
	}
	defer found.EndRead()
	// locatePlan checked the header: what is left is the copy and the
	// check after it.
	n, err := c.copyPayload(ctx, meta, dst)
	if err == nil {
		if leaseMS := found.Result.LeaseMS; leaseMS > 0 && time.Since(found.Sent) > time.Duration(leaseMS)*time.Millisecond {
			return 0, wire.Errorf(wire.ErrLeaseExpired, "read of %q outlived its lease", key)
		}
	}
	return n, err
}

// ReadAt reads the object meta describes straight from its owner's
// memory, without asking the master (the seed's one-hop load): the header
// must still be READY with meta's epoch before and after the copy, so a
// slot removed, reclaimed or reused since the meta was taken is refused.
func (c *Client) ReadAt(meta *ObjMeta, dst []byte) (int, error) {
	return guarded(c, func(ctx context.Context) (int, error) { return c.readPayload(ctx, meta, dst) })
}

// readPayload is ReadAt's checked copy: the header must match meta before
// the copy, and copyPayload checks it after.
func (c *Client) readPayload(ctx context.Context, meta *ObjMeta, dst []byte) (int, error) {
	mem, peer, err := c.host.SegmentMemory(ctx, meta.SegID)
	if err != nil {
		return 0, err
	}
	var scratch headerScratch
	h, err := c.headerAt(ctx, mem, peer, meta.HeaderOff, meta.Grant, &scratch)
	if err != nil {
		return 0, err
	}
	if hd, err := plan.Load(h); err != nil || hd.Expect(meta.KeyHash, uint32(meta.Epoch), meta.Bytes) != nil {
		return 0, c.staleRead(meta)
	}
	return c.copyPayload(ctx, meta, dst)
}

// copyPayload copies the payload meta describes into dst, then checks that
// the header is still READY with meta's epoch (the end of the seqlock
// whose start the caller checked): a slot reclaimed during the copy
// clears dst and fails.
func (c *Client) copyPayload(ctx context.Context, meta *ObjMeta, dst []byte) (int, error) {
	if uint64(len(dst)) < meta.Bytes {
		return 0, wire.Errorf(wire.ErrInvalidParams, "destination of %d bytes for a %d-byte object", len(dst), meta.Bytes)
	}
	dst = dst[:meta.Bytes]
	mem, peer, err := c.host.SegmentMemory(ctx, meta.SegID)
	if err != nil {
		return 0, err
	}
	if mem != nil {
		if meta.PayloadOff > uint64(len(mem)) || uint64(len(mem))-meta.PayloadOff < meta.Bytes {
			return 0, wire.Errorf(wire.ErrInvalidParams, "object outside its segment")
		}
		copy(dst, mem[meta.PayloadOff:meta.PayloadOff+meta.Bytes])
	} else if err := c.host.Transfer(ctx, transfer.Op{Peer: peer, Offset: meta.PayloadOff, Bufs: [][]byte{dst}, Grant: meta.Grant}); err != nil {
		return 0, err
	}
	var scratch headerScratch
	h, err := c.headerAt(ctx, mem, peer, meta.HeaderOff, meta.Grant, &scratch)
	if err != nil {
		return 0, err
	}
	if !plan.Still(h, plan.Ready, uint32(meta.Epoch)) {
		clear(dst)
		return 0, c.staleRead(meta)
	}
	if mem != nil {
		plan.Touch(h, uint64(time.Now().UnixNano()))
	}
	c.stats.Reads.Add(1)
	c.stats.BytesRead.Add(int64(meta.Bytes))
	return int(meta.Bytes), nil
}

// staleRead counts and describes a read whose slot was reclaimed or
// replaced.
func (c *Client) staleRead(meta *ObjMeta) error {
	c.stats.StaleReads.Add(1)
	return wire.Errorf(wire.ErrInvalidReplica, "the object at %d/%d was reclaimed or replaced", meta.SegID, meta.HeaderOff)
}

// Remove kills key's header (readers holding its ObjMeta see DEAD) and
// removes the object; an open plan of this process is revoked.
func (c *Client) Remove(key string) error {
	leave, err := c.host.Enter()
	if err != nil {
		return err
	}
	defer leave()
	ctx, cancel := c.host.CallContext()
	defer cancel()
	c.mu.Lock()
	open := c.open[key]
	delete(c.open, key)
	c.mu.Unlock()
	if open != nil {
		_ = c.writeHeader(ctx, open, func(b []byte) error { plan.Kill(b, uint32(open.Epoch)); return nil })
		var codes wire.CodesResp
		err := c.host.CallMaster(ctx, wire.OpPutRevoke, &wire.KeysReq{ClientID: c.host.ClientID(), Keys: []string{key}, Epochs: []uint64{open.Epoch}}, &codes)
		if err == nil && len(codes.Codes) == 1 && codes.Codes[0] == wire.OK {
			c.stats.Removed.Add(1)
			return nil
		}
	}
	c.FlushCommits() // a commit of ours still on its way must not land after the removal
	res, err := c.host.Peek([]string{key})
	if err != nil {
		return err
	}
	r := res[0]
	if (r.Code == wire.OK || r.Code == wire.ErrReplicaIsNotReady) && len(r.Replicas) > 0 {
		// Killed in place where the owner is mapped here. Over TCP this
		// process holds no grant to write another's header: readers of
		// the slot find its epoch changed once it is reused, and their
		// grants end with their leases.
		if mem, _, err := c.host.SegmentMemory(ctx, r.Replicas[0].SegID); err == nil && mem != nil {
			at := &WritePlan{HeaderOff: r.Replicas[0].Offset, mem: mem}
			_ = c.writeHeader(ctx, at, func(b []byte) error { plan.Kill(b, uint32(r.Epoch)); return nil })
		}
	}
	codes := c.host.Remove([]string{key}, true)
	if codes[0] != wire.OK {
		return wire.Errorf(codes[0], "remove %q", key)
	}
	c.stats.Removed.Add(1)
	return nil
}

// EvictUntil asks the master to evict until the pool's usage is below
// ratio; it returns the objects evicted and the usage left. The client's
// batched commits and finished reads are sent first: its own objects must
// not look uncommitted or still read to the master.
func (c *Client) EvictUntil(ratio float64) (int, float64, error) {
	c.host.FlushCommitEnds()
	c.host.FlushReadEnds()
	ctx, cancel := c.host.CallContext()
	defer cancel()
	var resp wire.EvictUntilResp
	if err := c.host.CallMaster(ctx, wire.OpEvictUntil, &wire.EvictUntilReq{Ratio: ratio}, &resp); err != nil {
		return 0, 0, err
	}
	c.stats.Evictions.Add(int64(resp.Objects))
	return resp.Objects, resp.Usage, nil
}

// Stats returns the plan counters, the rank (or -1) and the open plans.
func (c *Client) Stats() (st *Stats, rank, open int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	rank = -1
	if c.joined {
		rank = c.rank
	}
	return &c.stats, rank, len(c.open)
}
