// tcp_client.go defines the TCP route of the Engine: per-peer pools of
// pipelined connections, each with a writer and a reader goroutine.

package transfer

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/gostore/gostore/gostore/internal/blockconn"
	"github.com/gostore/gostore/gostore/wire"
)

// tcpReq is one request on a connection: a slice of an op.
type tcpReq struct {
	hdr   [reqHdrSize]byte
	op    byte
	id    uint64
	off   uint64
	n     uint64
	bufs  [][]byte // write payload or read destination, n bytes in all
	grant []byte   // sent after the header (opGranted*), nil for none
	call  *call
	opIdx int
}

// peerPool holds the streams to one transfer server, dialled lazily.
type peerPool struct {
	e    *Engine
	addr string
	rr   atomic.Uint64 // rotates the first stream of each call

	mu     sync.Mutex
	conns  []*tconn
	lane   []*blockconn.Conn // idle lane connections (tcp_lane.go)
	closed bool
}

func newPeerPool(e *Engine, addr string) *peerPool {
	return &peerPool{e: e, addr: addr, conns: make([]*tconn, e.streams)}
}

// get returns the live connection of slot, dialling a new one if needed.
func (p *peerPool) get(ctx context.Context, slot int) (*tconn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, transferErr("connections to %s closed", p.addr)
	}
	if c := p.conns[slot]; c != nil && c.alive() {
		return c, nil
	}
	nc, err := p.dial(ctx)
	if err != nil {
		return nil, err
	}
	c := newTConn(nc, p, slot)
	p.conns[slot] = c
	return c, nil
}

// dial connects to the peer and runs the handshake of the engine's Auth.
func (p *peerPool) dial(ctx context.Context) (net.Conn, error) {
	d := net.Dialer{Timeout: p.e.dialTO, Control: setSockBufs}
	nc, err := d.DialContext(ctx, "tcp", p.addr)
	if err != nil {
		return nil, transferErr("dial %s: %v", p.addr, err)
	}
	tuneConn(nc)
	if a := p.e.auth; a != nil {
		sc, err := a.Client(ctx, nc)
		if err != nil {
			nc.Close()
			return nil, transferErr("authenticating to %s (%s): %v", p.addr, a.Mode(), err)
		}
		nc = sc
	}
	return nc, nil
}

// statusErr is the error of an answer without payload whose status is not
// OK: the peer's contract code, or (a code outside the contract, from a
// peer of another version or garbage) a transfer failure that must not
// reach the caller, and Python, as if it were one.
func (p *peerPool) statusErr(r *tcpReq, status wire.Code) error {
	if !status.Known() {
		p.e.log.Warn("transfer: peer answered with a status outside the contract",
			"peer", p.addr, "status", int32(status), "offset", r.off, "length", r.n)
		return transferErr("peer %s, range [%d,+%d): unknown status %d", p.addr, r.off, r.n, int32(status))
	}
	return wire.Errorf(status, "peer %s, range [%d,+%d)", p.addr, r.off, r.n)
}

// setSockBufs sizes the socket buffers before connect, so the window scale
// negotiated in the handshake fits them.
func setSockBufs(_, _ string, rc syscall.RawConn) error {
	return rc.Control(func(fd uintptr) {
		_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, sockBufSize)
		_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF, sockBufSize)
	})
}

// drop forgets c if it is still slot's connection.
func (p *peerPool) drop(c *tconn) {
	p.mu.Lock()
	if p.conns[c.slot] == c {
		p.conns[c.slot] = nil
	}
	p.mu.Unlock()
}

// close fails every connection; later gets fail.
func (p *peerPool) close() {
	p.mu.Lock()
	p.closed = true
	conns := append([]*tconn(nil), p.conns...)
	lane := p.lane
	p.lane = nil
	p.mu.Unlock()
	for _, bc := range lane {
		bc.Close()
	}
	for _, c := range conns {
		if c != nil {
			c.fail(transferErr("connection to %s closed by the engine", p.addr))
		}
	}
}

// tconn is one stream to a transfer server. send queues requests; the writer
// goroutine writes everything queued with one writev, without waiting for
// answers; the reader goroutine matches answers to requests by id and reads
// read payloads straight into the caller's buffers.
type tconn struct {
	nc   net.Conn
	pool *peerPool
	slot int

	mu      sync.Mutex
	queue   []*tcpReq          // registered, not yet taken by the writer
	pending map[uint64]*tcpReq // registered, not yet answered (queue included)
	writing []*tcpReq          // taken from queue, being written
	reading *tcpReq            // answered, its payload being read into its bufs
	owed    map[uint64]owed    // answers of abandoned requests, to read and drop
	nextID  uint64
	err     error // set once the connection is broken

	wake chan struct{} // cap 1: the queue is not empty
	dead chan struct{} // closed by fail
	live atomic.Int32  // writer and reader goroutines still running
}

// owed is what is left of a request abandoned once on the wire: its
// answer still comes, and is read and dropped.
type owed struct {
	read bool
	n    uint64
}

func newTConn(nc net.Conn, p *peerPool, slot int) *tconn {
	c := &tconn{nc: nc, pool: p, slot: slot, pending: map[uint64]*tcpReq{}, owed: map[uint64]owed{},
		wake: make(chan struct{}, 1), dead: make(chan struct{})}
	c.live.Store(2)
	go c.writeLoop()
	go c.readLoop()
	return c
}

func (c *tconn) alive() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err == nil
}

// send registers and queues rs. Once it returns nil every request of rs is
// finished exactly once, by an answer or by the connection failing.
func (c *tconn) send(rs []*tcpReq) error {
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return err
	}
	for _, r := range rs {
		c.nextID++
		r.frame(c.nextID)
		c.pending[r.id] = r
	}
	c.queue = append(c.queue, rs...)
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
	return nil
}

// frame numbers r id and writes its header.
func (r *tcpReq) frame(id uint64) {
	r.id = id
	r.hdr[0] = r.op
	le.PutUint64(r.hdr[1:], r.id)
	le.PutUint64(r.hdr[9:], r.off)
	le.PutUint64(r.hdr[17:], r.n)
}

// fail breaks the connection: the goroutines stop and, once both have,
// every request still registered fails with err.
func (c *tconn) fail(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	c.mu.Unlock()
	close(c.dead)
	c.nc.Close()
	c.pool.drop(c)
}

// exit is called by each goroutine as it stops. The last one out fails the
// requests left: neither touches a caller's buffer any more.
func (c *tconn) exit() {
	if c.live.Add(-1) != 0 {
		return
	}
	c.mu.Lock()
	reqs := c.pending
	err := c.err
	c.pending, c.queue = nil, nil
	c.mu.Unlock()
	for _, r := range reqs {
		r.call.finish(r.opIdx, err, true)
	}
}

// abandon ends the requests of cl on c because cl's ctx ended, and only
// those: queued ones are withdrawn, and those on the wire are let go of,
// their answers to be read and dropped (owed), so that other calls'
// requests on the stream go on. Only when the writer or the reader is
// using one of them (its bytes being written, its payload being read into
// the caller's buffers, which a stalled peer could hold for good) is the
// connection broken.
func (c *tconn) abandon(cl *call, cause error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return // exit finishes them
	}
	var ended []*tcpReq
	kept := c.queue[:0]
	for _, r := range c.queue {
		if r.call == cl {
			ended = append(ended, r)
			delete(c.pending, r.id)
		} else {
			kept = append(kept, r)
		}
	}
	clear(c.queue[len(kept):])
	c.queue = kept
	broken := c.reading != nil && c.reading.call == cl
	for _, r := range c.writing {
		broken = broken || r.call == cl
	}
	if !broken {
		for id, r := range c.pending {
			if r.call == cl {
				delete(c.pending, id)
				c.owed[id] = owed{read: !isWrite(r.op), n: r.n}
				ended = append(ended, r)
			}
		}
	}
	c.mu.Unlock()
	for _, r := range ended {
		r.call.finish(r.opIdx, cause, false)
	}
	if broken {
		c.fail(transferErr("connection to %s dropped: a transfer on it was abandoned", c.pool.addr))
	}
}

func (c *tconn) writeLoop() {
	defer c.exit()
	var spare []*tcpReq
	var iov [][]byte
	for {
		select {
		case <-c.wake:
		case <-c.dead:
			return
		}
		c.mu.Lock()
		if c.err != nil {
			c.mu.Unlock()
			return
		}
		q := c.queue
		c.queue = spare[:0]
		c.writing = q
		c.mu.Unlock()
		iov = iov[:0]
		for _, r := range q {
			iov = append(iov, r.hdr[:])
			if r.grant != nil {
				iov = append(iov, r.grant)
			}
			if isWrite(r.op) {
				iov = append(iov, r.bufs...)
			}
		}
		var err error
		if len(iov) > 0 {
			nb := net.Buffers(iov)
			_, err = nb.WriteTo(c.nc)
		}
		c.mu.Lock()
		c.writing = nil
		c.mu.Unlock()
		clear(iov)
		clear(q)
		spare = q[:0]
		if err != nil {
			c.fail(transferErr("write to %s: %v", c.pool.addr, err))
			return
		}
	}
}

func (c *tconn) readLoop() {
	defer c.exit()
	br := bufio.NewReaderSize(c.nc, ioBufSize)
	var h [respHdrSize]byte
	// Until a first answer is read from a peer that was not
	// authenticated, a failure says what the peer is if its bytes tell
	// (wire.FirstReadError): one that requires a secret or TLS.
	first := c.pool.e.auth == nil
	for {
		if n, err := io.ReadFull(br, h[:]); err != nil {
			if first {
				err = wire.FirstReadError(c.pool.addr, h[:n], err)
			}
			c.fail(transferErr("read from %s: %v", c.pool.addr, err))
			return
		}
		id, status, n := le.Uint64(h[0:]), wire.Code(int32(le.Uint32(h[8:]))), le.Uint64(h[12:])
		payload := false
		c.mu.Lock()
		r := c.pending[id]
		delete(c.pending, id)
		if r != nil && !isWrite(r.op) && status == wire.OK && n == r.n {
			c.reading, payload = r, true
		}
		var o owed
		var isOwed bool // only an answer without a pending request can be owed
		if r == nil {
			if o, isOwed = c.owed[id]; isOwed {
				delete(c.owed, id)
			}
		}
		c.mu.Unlock()
		if isOwed {
			if err := c.drop(br, id, o, status, n); err != nil {
				c.fail(err)
				return
			}
			first = false
			continue
		}
		if r == nil {
			err := fmt.Errorf("%s answered unknown request %d", c.pool.addr, id)
			if first {
				err = wire.FirstReadError(c.pool.addr, h[:], err)
			}
			c.fail(transferErr("%v", err))
			return
		}
		first = false
		var err error
		switch {
		case status != wire.OK && n == 0:
			r.call.finish(r.opIdx, c.pool.statusErr(r, status), false)
			continue
		case payload:
			err = c.readPayload(br, r)
		case isWrite(r.op) && status == wire.OK && n == 0:
		default:
			err = transferErr("%s answered request %d (op %d, %d bytes) with status %d and %d bytes",
				c.pool.addr, id, r.op, r.n, status, n)
		}
		if err != nil {
			r.call.finish(r.opIdx, err, true)
			c.fail(err)
			return
		}
		r.call.finish(r.opIdx, nil, false)
	}
}

// drop reads the answer to request id, abandoned on the wire (o), and
// drops it; an answer the request could not have had is an error.
func (c *tconn) drop(br *bufio.Reader, id uint64, o owed, status wire.Code, n uint64) error {
	switch {
	case status != wire.OK && n == 0, !o.read && status == wire.OK && n == 0:
		return nil
	case o.read && status == wire.OK && n == o.n:
		if _, err := br.Discard(int(n)); err != nil {
			return transferErr("read from %s: %v", c.pool.addr, err)
		}
		return nil
	}
	return transferErr("%s answered abandoned request %d (%d bytes) with status %d and %d bytes", c.pool.addr, id, o.n, status, n)
}

// readPayload reads the payload of r, the request being read (c.reading),
// into its buffers.
func (c *tconn) readPayload(br *bufio.Reader, r *tcpReq) error {
	var err error
	for _, b := range r.bufs {
		if _, err = io.ReadFull(br, b); err != nil {
			err = transferErr("read from %s: %v", c.pool.addr, err)
			break
		}
	}
	c.mu.Lock()
	c.reading = nil
	c.mu.Unlock()
	return err
}

// call tracks the TCP requests of one startTCP.
type call struct {
	left    atomic.Int64 // requests not finished, +1 while sending
	done    chan struct{}
	mu      sync.Mutex
	idx     []int
	errs    map[int]error
	noRetry map[int]bool
	conns   []*tconn // connections carrying requests of this call
}

// finish records the end of one request of op i. retry marks a failure of
// the connection rather than an answer of the peer.
func (c *call) finish(i int, err error, retry bool) {
	if err != nil {
		c.mu.Lock()
		if c.errs[i] == nil {
			c.errs[i] = err
		}
		if !retry {
			c.noRetry[i] = true
		}
		c.mu.Unlock()
	}
	if c.left.Add(-1) == 0 {
		close(c.done)
	}
}

// wait blocks until every request finished, abandoning them when ctx ends;
// it stores the ops' errors and appends the retryable ops to retry.
func (c *call) wait(ctx context.Context, errs []error, retry []int) []int {
	select {
	case <-c.done:
	case <-ctx.Done():
		cause := ctxErr(ctx)
		for _, tc := range c.conns {
			tc.abandon(c, cause)
		}
		<-c.done // abandon ends every request promptly
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, i := range c.idx {
		err := c.errs[i]
		errs[i] = err
		if err != nil && !c.noRetry[i] {
			retry = append(retry, i)
		}
	}
	return retry
}

// slices returns how op of total bytes is cut: n slices of size each, the
// last one shorter. Sizes are multiples of 4 KiB so copies stay aligned.
func (e *Engine) slices(total uint64) (n, each uint64) {
	if total <= e.slice {
		return 1, total
	}
	k := (total + e.slice - 1) / e.slice
	each = ((total+k-1)/k + 4095) &^ 4095
	return (total + each - 1) / each, each
}

// startTCP sends the TCP requests of ops[idx...] and returns the call that
// tracks them, nil if idx is empty. It reads as its steps: the ops grouped
// by peer, then for each peer its pool, the ops cut into requests spread
// over the pool's streams, and the requests sent (on one lane when the
// call is one peer's and small).
func (e *Engine) startTCP(ctx context.Context, ops []Op, idx []int) *call {
	if len(idx) == 0 {
		return nil
	}
	c := &call{done: make(chan struct{}), idx: idx, errs: map[int]error{}, noRetry: map[int]bool{}}
	c.left.Store(1)
	defer c.finish(-1, nil, false) // the +1: done cannot close while sending

	// Group by peer address, keeping the batch order within each group.
	// (Here, not in a helper: the map and addrs stay on the stack.)
	var addrs []string
	groups := map[string][]int{}
	nreq := 0
	var bytes uint64
	for _, i := range idx {
		a := ops[i].Peer.TransferAddr
		if _, ok := groups[a]; !ok {
			addrs = append(addrs, a)
		}
		groups[a] = append(groups[a], i)
		total, _ := opLen(&ops[i])
		n, _ := e.slices(total)
		nreq += int(n)
		bytes += total
	}
	lane := len(addrs) == 1 && addrs[0] != "" && e.laneFits(nreq, bytes)
	slab := make([]tcpReq, 0, nreq) // never grows: the requests' pointers into it stay valid
	perSlot := make([][]*tcpReq, e.streams)
	for _, addr := range addrs {
		group := groups[addr]
		if addr == "" {
			c.failOps(group, func(i int) error {
				return transferErr("segment %d has no transfer address", ops[i].Peer.SegID)
			})
			continue
		}
		segIDs := make([]uint64, len(group))
		for k, i := range group {
			segIDs[k] = ops[i].Peer.SegID
		}
		pool, err := e.pool(addr, segIDs)
		if err != nil {
			c.failOps(group, func(int) error { return err })
			continue
		}
		slab = e.cutRequests(c, ops, group, pool.rr.Add(1), slab, perSlot)
		if lane { // one peer, one small call: every request is in slab
			rs := make([]*tcpReq, len(slab))
			for k := range slab {
				rs[k] = &slab[k]
			}
			pool.laneCall(ctx, c, rs)
			continue
		}
		c.sendStreams(ctx, pool, perSlot)
	}
	return c
}

// failOps ends every op of group, none of whose requests was sent, with
// err(i).
func (c *call) failOps(group []int, err func(i int) error) {
	for _, i := range group {
		c.left.Add(1)
		c.finish(i, err(i), false)
	}
}

// cutRequests cuts the ops of group into requests appended to slab (which
// has room for them all), and lists them by the stream (perSlot) they go
// on. Consecutive SliceSize bytes share a stream: a large op spreads over
// all streams, a batch of small ops rides one; concurrent calls start on
// different streams (base).
func (e *Engine) cutRequests(c *call, ops []Op, group []int, base uint64, slab []tcpReq, perSlot [][]*tcpReq) []tcpReq {
	for s := range perSlot {
		perSlot[s] = perSlot[s][:0]
	}
	var cum uint64
	for _, i := range group {
		op := &ops[i]
		total, _ := opLen(op)
		n, each := e.slices(total)
		pieces := make([][]byte, 0, int(n)+len(op.Bufs))
		bi, bo := 0, 0 // current buffer and offset in it
		for off := uint64(0); off < total; off += each {
			ln := min(each, total-off)
			start := len(pieces)
			for need := ln; need > 0; {
				b := op.Bufs[bi][bo:]
				if len(b) == 0 {
					bi, bo = bi+1, 0
					continue
				}
				if uint64(len(b)) > need {
					b = b[:need]
				}
				pieces = append(pieces, b)
				need -= uint64(len(b))
				bo += len(b)
			}
			slab = append(slab, tcpReq{call: c, opIdx: i, off: op.Offset + off, n: ln,
				bufs: pieces[start:len(pieces):len(pieces)], op: reqOp(op)})
			r := &slab[len(slab)-1]
			if len(op.Grant) > 0 {
				r.grant = op.Grant // every slice carries the op's grant
			}
			slot := (base + cum/e.slice) % uint64(e.streams)
			perSlot[slot] = append(perSlot[slot], r)
			cum += ln
		}
	}
	return slab
}

// sendStreams sends each stream's requests on it, dialling it when it is
// not yet open. Once a dial fails, the requests of that stream and of
// every later one fail with its error (not retried: the peer cannot be
// reached); a send that fails leaves its requests to be retried.
func (c *call) sendStreams(ctx context.Context, pool *peerPool, perSlot [][]*tcpReq) {
	var dialErr error
	for slot, rs := range perSlot {
		if len(rs) == 0 {
			continue
		}
		c.left.Add(int64(len(rs)))
		if dialErr == nil {
			var tc *tconn
			if tc, dialErr = pool.get(ctx, slot); dialErr == nil {
				if err := tc.send(rs); err != nil {
					for _, r := range rs {
						c.finish(r.opIdx, err, true)
					}
				} else {
					c.conns = append(c.conns, tc)
				}
				continue
			}
		}
		for _, r := range rs {
			c.finish(r.opIdx, dialErr, false)
		}
	}
}

// reqOp is the request code of op's slices: granted, or (no grant) the
// protocol's first version, which a server refuses.
func reqOp(op *Op) byte {
	switch {
	case len(op.Grant) > 0 && op.Write:
		return opGrantedWrite
	case len(op.Grant) > 0:
		return opGrantedRead
	case op.Write:
		return opWrite
	}
	return opRead
}

func isWrite(op byte) bool { return op == opWrite || op == opGrantedWrite }
