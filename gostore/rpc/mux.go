// mux.go defines MuxClient: many concurrent calls pipelined over a few
// connections.
package rpc

import (
	"bufio"
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/gostore/gostore/gostore/wire"
)

// MuxClient suits a process with many goroutines calling the master at once
// (a serving engine's scheduler, the master benchmark): calls share a few
// connections, a caller that finds no write in progress writes every frame
// queued so far in one system call, and one reader per connection hands
// replies back by request id. Client, by contrast, gives one caller the
// lowest latency. MuxClient is safe for concurrent use.
type MuxClient struct {
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

	wmu      sync.Mutex // guards out, flushing
	out      []byte
	flushing bool

	pmu     sync.Mutex // guards pending, err
	pending map[uint64]chan muxReply
	err     error
}

// DialMux connects n connections to addr.
func DialMux(addr string, n int) (*MuxClient, error) {
	m := &MuxClient{addr: addr}
	for range max(n, 1) {
		c, err := net.DialTimeout("tcp", addr, 3*time.Second)
		if err != nil {
			m.Close()
			return nil, wire.Errorf(wire.ErrRPCFail, "dial master %s: %v", addr, err)
		}
		c.(*net.TCPConn).SetNoDelay(true)
		mc := &muxConn{c: c, pending: make(map[uint64]chan muxReply)}
		go mc.readLoop()
		m.conns = append(m.conns, mc)
	}
	return m, nil
}

// Call is Client.Call over the shared connections.
func (m *MuxClient) Call(ctx context.Context, op wire.Op, req, resp any) error {
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
	if r.h.Status != wire.OK {
		var msg string
		_ = msgpack.Unmarshal(r.body, &msg)
		return &wire.Error{Code: r.h.Status, Msg: msg}
	}
	if resp == nil {
		return nil
	}
	if err := msgpack.Unmarshal(r.body, resp); err != nil {
		return wire.Errorf(wire.ErrRPCFail, "%s: undecodable reply: %v", op, err)
	}
	return nil
}

// send queues frame; if no write is in progress this caller writes
// everything queued, including frames other callers add meanwhile.
func (mc *muxConn) send(frame []byte) error {
	mc.wmu.Lock()
	mc.out = append(mc.out, frame...)
	if mc.flushing {
		mc.wmu.Unlock()
		return nil
	}
	mc.flushing = true
	for len(mc.out) > 0 {
		buf := mc.out
		mc.out = nil
		mc.wmu.Unlock()
		_, err := mc.c.Write(buf)
		mc.wmu.Lock()
		if err != nil {
			mc.flushing = false
			mc.wmu.Unlock()
			return err
		}
	}
	mc.flushing = false
	mc.wmu.Unlock()
	return nil
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
	for id, ch := range mc.pending {
		ch <- muxReply{err: err}
		delete(mc.pending, id)
	}
}

// Close closes the connections; calls in flight fail.
func (m *MuxClient) Close() {
	for _, mc := range m.conns {
		mc.fail(net.ErrClosed)
	}
}
