// host.go defines what the plan API needs from the store client hosting it.

package planclient

import (
	"context"
	"time"

	"github.com/gostore/gostore/gostore/transfer"
	"github.com/gostore/gostore/gostore/wire"
)

// Host is the store client as the plan API sees it.
type Host interface {
	// ClientID is the client's identity at the master.
	ClientID() string
	// SegmentName is the client's segment name, the one a member joins
	// with.
	SegmentName() string
	// HasHostSegment reports whether the client contributes a segment of
	// host memory (a plan member needs one).
	HasHostSegment() bool
	// CallMaster makes one RPC to the master.
	CallMaster(ctx context.Context, op wire.Op, req, resp any) error
	// CallContext bounds one API call (the client's call timeout).
	CallContext() (context.Context, context.CancelFunc)
	// Enter admits a call that may touch segment or caller memory (an
	// error once the client is closed); the caller runs leave when done.
	// Calls must not nest Enter.
	Enter() (leave func(), err error)
	// Lookup asks the master for key's replicas, registering the client
	// as a reader of the object (with a lease) when read is set.
	Lookup(key string, read bool) (Found, error)
	// Peek locates keys without using the objects: no lease, no reader,
	// no recency (one GetResult per key, in order).
	Peek(keys []string) ([]wire.GetResult, error)
	// SegmentMemory returns a segment's memory as this process sees it
	// (the own segment or a same-host peer's mapping), or nil and the peer
	// to reach it over TCP.
	SegmentMemory(ctx context.Context, segID uint64) ([]byte, transfer.Peer, error)
	// Transfer runs one transfer with a peer reached over TCP or UCX, as
	// the client's gets and puts run theirs: a UCX desc the owner's
	// remount made stale is replaced by the master's new one and the
	// transfer sent once more; a failure in transfer makes the client
	// resolve the peer's segment again next time.
	Transfer(ctx context.Context, op transfer.Op) error
	// Remove deletes keys (force: leased and unfinished ones too).
	Remove(keys []string, force bool) []wire.Code
	// QueueCommitEnd queues a committed plan's PutEnd, sent batched with
	// other commits CommitEndDelay later; the host reports each batch's
	// answer to Client.CommitsEnded.
	QueueCommitEnd(key string, epoch uint64)
	// FlushCommitEnds returns once the master has every queued commit.
	FlushCommitEnds()
	// FlushReadEnds returns once the master knows of every read the
	// client ended (ended reads are batched too).
	FlushReadEnds()
}

// Found is one key as Lookup found it.
type Found struct {
	Result wire.GetResult
	// Sent is when the request left: a lease counts from here.
	Sent time.Time
	// EndRead tells the master (batched, in the background) that the
	// read Lookup registered is over. It may run more than once, and is a
	// no-op for a lookup that registered none.
	EndRead func()
}
