// core.go defines core: the plumbing every part of the client shares (the
// configuration, the master's connection, the transfer engine, the
// segment cache, the call bounds and the close lock), so that reads,
// writes, sessions and tasks can be objects of their own that reach it
// without reaching the Client that orchestrates them.

package client

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/gostore/gostore/gostore/auth"
	"github.com/gostore/gostore/gostore/clientmetrics"
	"github.com/gostore/gostore/gostore/rpc"
	"github.com/gostore/gostore/gostore/ssdtier"
	"github.com/gostore/gostore/gostore/transfer"
	"github.com/gostore/gostore/gostore/wire"
)

// core is what every part of the client shares. Locks: inFlight
// (read-held by each call that may touch segment or caller memory, taken
// by Close), and those of the structures it holds (peers, buffers,
// staging, scopes), each held only inside their methods (peers' also by
// resolve and prunePeers); the rest is set once by New or is atomic. Client embeds it; the objects the calls are made of
// (Reads, readEnds, Writes, Sessions, Tasks, Keys, Buffers, Segments,
// ownSegment) hold a pointer to it.
type core struct {
	cfg      Config
	log      *slog.Logger
	id       string
	hostname string // host:port, the segment name
	// bindHost is where this client's servers listen when that is not
	// local_hostname's host ("": it is): loopback for a one-host pool
	// without authentication (listen.go).
	bindHost string
	master   *rpc.Client
	engine   *transfer.Engine
	peers    peerCache
	buffers  registry
	staging  *staging
	auth     *auth.Auth    // nil: off; every server of this client and every dial uses it
	ssd      *ssdtier.Tier // nil without enable_ssd_offload
	ucx      *ucxRoute     // nil: the UCX route is off (ucx.go)

	metrics *clientmetrics.Metrics // nil with HTTPPort 0

	healthy atomic.Bool
	closed  atomic.Bool
	// tenanted: the master's last ping answered that it separates
	// tenants. Only then do requests carry a tenant other than the
	// default one: an older master, or one without
	// --enable_multi_tenants, gets the requests' old shape.
	tenanted  atomic.Bool
	scopes    scopes    // the parents of the calls' contexts (calls.go)
	masterLog masterLog // calls the master did not answer
	// life ends when the client is released: the heartbeat's pings.
	life    context.Context
	endLife context.CancelFunc
	// inFlight is read-held by every call that may touch segment or caller
	// memory; Close takes it to wait for them before unmapping anything, so
	// a close from one Python thread never pulls memory from under another.
	inFlight sync.RWMutex
	stop     chan struct{}
	wg       sync.WaitGroup
}

// enter admits a call that may touch memory; the caller runs the returned
// func when it is done. Calls must not nest enter (see inFlight).
func (c *core) enter() (func(), error) {
	c.inFlight.RLock()
	if err := c.checkOpen(); err != nil {
		c.inFlight.RUnlock()
		return nil, err
	}
	return c.inFlight.RUnlock, nil
}

func (c *core) checkOpen() error {
	if c.closed.Load() {
		return wire.Errorf(wire.ErrInternal, "store is closed")
	}
	return nil
}

// serving readies a new transfer server of this client's: its handshake,
// and how long it polls for a hot connection's next request.
func (c *core) serving(s *transfer.Server) *transfer.Server {
	s.SetAuth(c.auth)
	if c.cfg.ServeSpin != 0 { // 0 keeps the server's default; negative never polls
		s.SetSpin(c.cfg.ServeSpin)
	}
	return s
}
