// begin.go defines Engine.Begin: one small op started on the caller's
// thread and waited for later, over TCP's lane or the UCX route.

package transfer

import (
	"context"

	"github.com/gostore/gostore/gostore/ucx"
)

// Begun is one op Engine.Begin started: a request on the TCP lane, or an
// op posted on the UCX route; Wait ends it.
type Begun struct {
	run *laneRun // TCP
	c   *call
	ucx *ucx.Begun // UCX
}

// Begin starts op and returns without waiting for it, for a caller with
// something else to do meanwhile (the client asks the master while a read
// it expects to be valid is in flight): over TCP the request goes out on
// the lane (tcp_lane.go), over UCX the one-sided op is posted (ucx.go);
// either way the peer works while the caller does. It returns nil, having
// started nothing, when op cannot go that way: another route, device
// parts, a range or grant Do would refuse, the engine closed, or what the
// route's own begin refuses. The caller must Wait exactly once, and must
// not touch op's buffers before.
func (e *Engine) Begin(ctx context.Context, op Op) *Begun {
	total, ok := opLen(&op)
	switch {
	case !ok || total == 0 || len(op.Device) > 0 || e.isClosed() || ctx.Err() != nil:
		return nil
	case op.Peer.Size != 0 && !inRange(op.Offset, total, op.Peer.Size):
		return nil
	case checkGrant(&op, total) != nil:
		return nil
	}
	var b *Begun
	r := e.Route(op.Peer)
	switch r {
	case RouteTCP:
		b = e.beginLane(ctx, &op, total)
	case RouteUCX:
		b = e.beginUCX(ctx, &op, total)
	}
	if b != nil {
		e.routeOps[r].Add(1)
	}
	return b
}

// Wait returns op's error once it ended, as Do would for it, but without
// a second try on TCP (the caller that began speculatively goes the usual
// way instead). The op's buffers are the caller's again once it returns.
func (b *Begun) Wait() error {
	if b.ucx != nil {
		return b.ucx.Wait()[0]
	}
	return b.waitLane()
}
