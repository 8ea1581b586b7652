// host.go defines what the tier needs from the client hosting it (Host)
// and how the client configures it (Config).

package ssdtier

import (
	"context"

	"github.com/gostore/gostore/gostore/auth"
	"github.com/gostore/gostore/gostore/transfer"
	"github.com/gostore/gostore/gostore/wire"
)

// Host is the store client as the tier sees it.
type Host interface {
	// ClientID is the client's identity at the master.
	ClientID() string
	// CallMaster makes one RPC to the master.
	CallMaster(ctx context.Context, op wire.Op, req, resp any) error
	// CallContext bounds one call the tier makes on its own (an API
	// call's timeout).
	CallContext() (context.Context, context.CancelFunc)
	// Peek locates keys without using the objects: no lease, no reader,
	// no recency (one GetResult per key, in order).
	Peek(keys []string) ([]wire.GetResult, error)
	// OwnSegment is the client's own segment memory when segID names it
	// and it is host memory, else nil: where the tier pins what it writes.
	OwnSegment(segID uint64) []byte
	// Pull runs transfers with the client's engine (one error per op):
	// how a reader pulls staged bytes from a holder's staging buffer.
	Pull(ctx context.Context, ops []transfer.Op) []error
}

// Config is what the client's setup decides for the tier.
type Config struct {
	// Path is the directory (ssd_offload_path; the MOONCAKE_OFFLOAD_*
	// settings may name it instead).
	Path string
	// Getenv reads the MOONCAKE_OFFLOAD_* settings (see
	// storage.FileStorageConfigFromEnv).
	Getenv func(string) (string, bool)
	// Segment is the client's segment name: the staging buffer is named
	// after it.
	Segment string
	// ListenHost is the address the staging server and the RPC endpoint
	// listen on (the client's host).
	ListenHost string
	// Auth secures the staging server and the RPC endpoint as the
	// client's own servers are (nil: off).
	Auth *auth.Auth
}
