// metrics.go reports the client's work to its metrics (gostore/clientmetrics)
// and runs the client HTTP server that serves them.

package client

import (
	"context"
	"time"

	"github.com/gostore/gostore/gostore/clientmetrics"
	"github.com/gostore/gostore/gostore/transfer"
	"github.com/gostore/gostore/gostore/wire"
)

// serveHTTP starts the client HTTP server when Config.HTTPPort asks for
// one. A port that cannot be bound does not fail setup: the client goes
// on without the server (and without metrics), as Mooncake's does.
func (c *Client) serveHTTP() {
	if c.metrics == nil {
		return
	}
	srv, err := clientmetrics.Serve(c.metrics, c.cfg.HTTPPort, c.Health, c.log)
	if err != nil {
		c.log.Warn("client HTTP server not started; going on without it", "port", c.cfg.HTTPPort, "err", err)
		c.metrics = nil
		return
	}
	c.http = srv
	c.log.Info("client HTTP server started", "addr", srv.Addr().String())
}

// chainObservers calls both observers of an RPC (either may be nil).
func chainObservers(a, b func(wire.Op, time.Duration, error)) func(wire.Op, time.Duration, error) {
	if a == nil {
		return b
	}
	return func(op wire.Op, d time.Duration, err error) {
		a(op, d, err)
		b(op, d, err)
	}
}

// timedWrite runs one round of a write's transfers and reports their time
// and the bytes of the replicas written.
func (c *core) timedWrite(ctx context.Context, ops []transfer.Op, objects int) []error {
	if c.metrics == nil {
		return c.engine.Do(ctx, ops)
	}
	began := time.Now()
	errs := c.engine.Do(ctx, ops)
	took := time.Since(began)
	var n uint64
	for k, op := range ops {
		if errs[k] == nil {
			n += capacity(op.Bufs)
			for _, d := range op.Device {
				n += d.Size
			}
		}
	}
	c.metrics.Transfer(clientmetrics.Write, objects, n, took)
	return errs
}

// noteWrite reports a write call that stored at least one object (a key
// that already existed counts, as put reports it a success), by the
// call's interface name: put or upsert, with _batch for several objects.
func (c *core) noteWrite(start wire.Op, items []PutItem, out []wire.Code, began time.Time) {
	if c.metrics == nil {
		return
	}
	var n uint64
	stored := false
	for i, code := range out {
		if code == wire.OK {
			n += items[i].size()
			stored = true
		}
	}
	if !stored {
		return
	}
	name := "put"
	if start == wire.OpUpsertStart {
		name = "upsert"
	}
	if len(items) > 1 {
		name += "_batch"
	}
	c.metrics.Op(clientmetrics.Write, name, n, time.Since(began))
}

// noteRead reports a get that returned bytes: the time its transfers took
// (from began) and, as an interface call timed from GetStart, by the
// call's name: get, or get_buffer for memory the client lends, with
// batch_ in front for several objects.
func (c *core) noteRead(p *Pending, out []int64, began time.Time) {
	if c.metrics == nil {
		return
	}
	var n uint64
	for _, got := range out {
		if got > 0 {
			n += uint64(got)
		}
	}
	if n == 0 {
		return
	}
	c.metrics.Transfer(clientmetrics.Read, len(out), n, time.Since(began))
	name := "get"
	if p.lent {
		name = "get_buffer"
	}
	if len(out) > 1 {
		name = "batch_" + name
	}
	c.metrics.Op(clientmetrics.Read, name, n, time.Since(p.sent))
}
