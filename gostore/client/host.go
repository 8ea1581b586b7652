// host.go defines clientHost, the Client as its subsystems see it.

package client

import (
	"context"

	"github.com/gostore/gostore/gostore/ssdtier"
	"github.com/gostore/gostore/gostore/transfer"
	"github.com/gostore/gostore/gostore/wire"
)

// clientHost implements the interface through which the SSD tier
// (ssdtier.Host) reaches the client: thin methods over its master
// connection, peers and engine. They live on this type, not on Client, so
// the client's exported methods stay its API.
type clientHost struct{ c *Client }

var _ ssdtier.Host = clientHost{}

func (h clientHost) ClientID() string { return h.c.id }

func (h clientHost) CallMaster(ctx context.Context, op wire.Op, req, resp any) error {
	return h.c.master.Call(ctx, op, req, resp)
}

func (h clientHost) CallContext() (context.Context, context.CancelFunc) { return h.c.ctx() }

func (h clientHost) Peek(keys []string) ([]wire.GetResult, error) {
	p, err := h.c.peek(keys)
	if err != nil {
		return nil, err
	}
	return p.res, nil
}

func (h clientHost) OwnSegment(segID uint64) []byte { return h.c.peers.local(segID) }

func (h clientHost) Pull(ctx context.Context, ops []transfer.Op) []error {
	return h.c.engine.Do(ctx, ops)
}
