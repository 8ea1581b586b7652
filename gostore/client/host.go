// host.go defines clientHost, the Client as its subsystems see it.

package client

import (
	"context"

	"github.com/gostore/gostore/gostore/planclient"
	"github.com/gostore/gostore/gostore/ssdtier"
	"github.com/gostore/gostore/gostore/transfer"
	"github.com/gostore/gostore/gostore/wire"
)

// clientHost implements the interfaces through which the SSD tier
// (ssdtier.Host) and the plan API (planclient.Host) reach the client: thin
// methods over its master connection, peers, engine and batchers. They
// live on this type, not on Client, so the client's exported methods stay
// its API.
type clientHost struct{ c *Client }

var (
	_ ssdtier.Host    = tierHost{}
	_ planclient.Host = clientHost{}
)

func (h clientHost) ClientID() string     { return h.c.id }
func (h clientHost) SegmentName() string  { return h.c.hostname }
func (h clientHost) HasHostSegment() bool { return h.c.own.seg != nil }

func (h clientHost) CallMaster(ctx context.Context, op wire.Op, req, resp any) error {
	return h.c.master.Call(ctx, op, req, resp)
}

func (h clientHost) CallContext() (context.Context, context.CancelFunc) { return h.c.ctx() }
func (h clientHost) Enter() (func(), error)                             { return h.c.enter() }

func (h clientHost) Peek(keys []string) ([]wire.GetResult, error) {
	p, err := h.c.reads.peek(keys)
	if err != nil {
		return nil, err
	}
	return p.res, nil
}

// tierHost is the client as its SSD tier sees it: the tier names stored
// keys (any tenant's), so its peeks say so (wire.KeysReq.Stored).
type tierHost struct{ clientHost }

func (h tierHost) Peek(keys []string) ([]wire.GetResult, error) {
	p, err := h.c.reads.peekStored(keys)
	if err != nil {
		return nil, err
	}
	return p.res, nil
}

func (h clientHost) Lookup(key string, read bool) (planclient.Found, error) {
	p, err := h.c.reads.getStart([]string{key}, read)
	if err != nil {
		return planclient.Found{}, err
	}
	return planclient.Found{Result: p.res[0], Sent: p.sent, EndRead: func() { h.c.ends.endReads(p) }}, nil
}

func (h clientHost) OwnSegment(segID uint64) []byte { return h.c.peers.local(segID) }

// SegmentMemory returns a segment's memory as this process sees it: its
// own segment, a same-host peer's mapping, or nil (reach it over TCP).
func (h clientHost) SegmentMemory(ctx context.Context, segID uint64) ([]byte, transfer.Peer, error) {
	c := h.c
	known, err := c.resolve(ctx, []uint64{segID})
	if err != nil {
		return nil, transfer.Peer{}, err
	}
	p, ok := known[segID]
	if !ok {
		return nil, transfer.Peer{}, wire.Errorf(wire.ErrSegmentNotFound, "segment %d is gone", segID)
	}
	mem, _ := c.engine.Mapping(p)
	return mem, p, nil
}

// Transfer runs one transfer with a peer reached over TCP or UCX, as a
// get or put runs its ops: with the segment's cached desc, once more with
// the master's new UCX desc when that one went stale (doRefreshing), and
// a final failure drops what it showed to be unusable (opFailed), so the
// next call resolves the peer's segment again.
func (h clientHost) Transfer(ctx context.Context, op transfer.Op) error {
	// A write plan holds the peer it opened with, and another of its
	// transfers may since have cached the master's new desc of that
	// segment (an owner's remount): only the route changes.
	if p, ok := h.c.peers.get(op.Peer.SegID); ok {
		op.Peer = p
	}
	ops := []transfer.Op{op}
	err := h.c.doRefreshing(ctx, ops, nil)[0]
	if err != nil {
		h.c.opFailed(&ops[0], err)
	}
	return err
}

func (h clientHost) Pull(ctx context.Context, ops []transfer.Op) []error {
	return h.c.engine.Do(ctx, ops)
}

func (h clientHost) Remove(keys []string, force bool) []wire.Code {
	return h.c.keys.Remove(keys, force)
}

func (h clientHost) QueueCommitEnd(key string, epoch uint64) { h.c.planEnds.add(key, epoch) }
func (h clientHost) FlushCommitEnds() {
	ctx, cancel := h.c.ctx()
	defer cancel()
	h.c.planEnds.flush(ctx, h.c.master, h.c.id, h.c.log)
}
func (h clientHost) FlushReadEnds() { h.c.ends.flushReadEnds() }
