// mux.go defines muxClient: many concurrent calls pipelined over a few
// connections, the benchmark's third way of calling the master. It lives
// here, not in gostore/rpc, because nothing in the store calls that way.

package main

import (
	"bufio"
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/gostore/gostore/gostore/rpc"
	"github.com/gostore/gostore/gostore/wire"
)

// muxClient suits a process with many goroutines calling the master at once
// (a serving engine's scheduler, this benchmark): calls share a few
// connections, a caller that finds no write in progress writes every frame
// queued so far in one system call, and one reader per connection hands
// replies back by request id. rpc.Client, by contrast, gives one caller the
// lowest latency. muxClient is safe for concurrent use.
type muxClient struct {
	addr   string
	conns  []*muxConn
	next   atomic.Uint64
	nextID atomic.Uint64
}

type muxReply struct {
	h    wire.Header
	body []byte
	err  error
}

type muxConn struct {
	c net.Conn

	wmu  sync.Mutex // guards out
	out  []byte
	wake chan struct{} // the writer has frames to send
	done chan struct{} // closed by fail: the writer stops

	pmu     sync.Mutex // guards pending, err
	pending map[uint64]chan muxReply
	err     error
}

// dialMux connects n connections to addr.
func dialMux(addr string, n int) (*muxClient, error) {
	m := &muxClient{addr: addr}
	for range max(n, 1) {
		c, err := net.DialTimeout("tcp", addr, 3*time.Second)
		if err != nil {
			m.Close()
			return nil, wire.Errorf(wire.ErrRPCFail, "dial master %s: %v", addr, err)
		}
		c.(*net.TCPConn).SetNoDelay(true)
		mc := &muxConn{c: c, pending: make(map[uint64]chan muxReply), wake: make(chan struct{}, 1), done: make(chan struct{})}
		go mc.readLoop()
		go mc.writeLoop()
		m.conns = append(m.conns, mc)
	}
	return m, nil
}

// Call is rpc.Client.Call over the shared connections.
func (m *muxClient) Call(ctx context.Context, op wire.Op, req, resp any) error {
	body, err := msgpack.Marshal(req)
	if err != nil {
		return wire.Errorf(wire.ErrInvalidParams, "%s: %v", op, err)
	}
	mc := m.conns[m.next.Add(1)%uint64(len(m.conns))]
	id := m.nextID.Add(1)
	ch := make(chan muxReply, 1)
	mc.pmu.Lock()
	if mc.err != nil {
		mc.pmu.Unlock()
		return wire.Errorf(wire.ErrRPCFail, "%s to %s: %v", op, m.addr, mc.err)
	}
	mc.pending[id] = ch
	mc.pmu.Unlock()
	if err := mc.send(wire.AppendFrame(nil, id, op, wire.OK, body)); err != nil {
		mc.fail(err)
	}
	var r muxReply
	select {
	case r = <-ch:
	case <-ctx.Done():
		mc.pmu.Lock()
		delete(mc.pending, id)
		mc.pmu.Unlock()
		return wire.Errorf(wire.ErrRPCTimeout, "%s to %s: %v", op, m.addr, ctx.Err())
	}
	if r.err != nil {
		return wire.Errorf(wire.ErrRPCFail, "%s to %s: %v", op, m.addr, r.err)
	}
	return rpc.DecodeReply(op, r.h.Status, r.body, resp)
}

// send queues frame for the writer goroutine. Frames queued while it is
// writing go out together in its next write: under load one system call
// carries many requests.
func (mc *muxConn) send(frame []byte) error {
	mc.wmu.Lock()
	mc.out = append(mc.out, frame...)
	mc.wmu.Unlock()
	select {
	case mc.wake <- struct{}{}:
	default:
	}
	return nil
}

// writeLoop double-buffers: senders append to out while the previous
// batch, in spare, is on the wire.
func (mc *muxConn) writeLoop() {
	var spare []byte
	for {
		select {
		case <-mc.done:
			return
		case <-mc.wake:
		}
		mc.wmu.Lock()
		if len(mc.out) == 0 {
			mc.wmu.Unlock()
			continue
		}
		buf := mc.out
		mc.out = spare[:0]
		mc.wmu.Unlock()
		if _, err := mc.c.Write(buf); err != nil {
			mc.fail(err)
			return
		}
		spare = buf
	}
}

func (mc *muxConn) readLoop() {
	r := bufio.NewReaderSize(mc.c, 256<<10)
	for {
		h, body, err := wire.ReadFrame(r, nil)
		if err != nil {
			mc.fail(err)
			return
		}
		mc.pmu.Lock()
		ch := mc.pending[h.ID]
		delete(mc.pending, h.ID)
		mc.pmu.Unlock()
		if ch != nil {
			ch <- muxReply{h: h, body: body}
		}
	}
}

// fail ends the connection: every waiting call gets err.
func (mc *muxConn) fail(err error) {
	mc.pmu.Lock()
	defer mc.pmu.Unlock()
	if mc.err != nil {
		return
	}
	if err == nil {
		err = errors.New("connection closed")
	}
	mc.err = err
	mc.c.Close()
	close(mc.done)
	for id, ch := range mc.pending {
		ch <- muxReply{err: err}
		delete(mc.pending, id)
	}
}

// Close closes the connections; calls in flight fail.
func (m *muxClient) Close() {
	for _, mc := range m.conns {
		mc.fail(net.ErrClosed)
	}
}
