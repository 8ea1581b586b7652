// tcp_lane.go defines the lane: the route of a small TCP call on the
// calling thread, with no goroutine between the caller and the socket.

package transfer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"

	"github.com/gostore/gostore/gostore/internal/blockconn"
	"github.com/gostore/gostore/gostore/wire"
)

// The lane exists for latency. A pipelined stream (tconn) hands each
// request to its writer goroutine and each answer back from its reader
// goroutine: with the caller's own wait, three thread wake-ups per round
// trip, most of a 4 KiB get's time on two cores. A call whose requests all
// go to one peer and carry at most Options.LaneBytes instead takes an idle
// blocking connection of that peer (or dials one), writes every request
// with one writev and reads the answers on the calling thread, through a
// buffer (laneReader); the connection then goes back to the peer's idle
// list, unless the buffer holds bytes past the last answer. Larger calls keep the
// streams, which spread an op's slices over several connections.
//
// A lane connection carries one call at a time. Its bytes are the
// streams' wire format, which the Server cannot tell apart. A call whose
// ctx ends while it waits has its connection shut down (waking the
// blocked read); that connection is closed, never reused. Encrypted
// connections (mutual TLS) cannot be blocking sockets: with them every
// call takes the streams.

// DefaultLaneBytes is Options.LaneBytes' default.
const DefaultLaneBytes = 256 << 10

// laneIdleMax is how many idle lane connections a peer keeps; a caller
// that finds none dials one, and one returned beyond this is closed.
const laneIdleMax = 8

// laneFits reports whether a call of nreq requests and total bytes to one
// peer takes the lane.
func (e *Engine) laneFits(nreq int, total uint64) bool {
	return e.laneBytes > 0 && !e.auth.Encrypts() && nreq <= laneMaxRequests && total <= uint64(e.laneBytes)
}

// laneMaxRequests bounds one lane call's requests (and its writev).
const laneMaxRequests = 256

// laneConn pops an idle lane connection to p's peer, dropping those the
// peer closed meanwhile (a restart), or dials a new one.
func (p *peerPool) laneConn(ctx context.Context) (*blockconn.Conn, error) {
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, transferErr("connections to %s closed", p.addr)
		}
		n := len(p.lane)
		if n == 0 {
			p.mu.Unlock()
			break
		}
		bc := p.lane[n-1]
		p.lane[n-1] = nil
		p.lane = p.lane[:n-1]
		p.mu.Unlock()
		if !bc.PeerClosed() {
			return bc, nil
		}
		bc.Close()
	}
	nc, err := p.dial(ctx)
	if err != nil {
		return nil, err
	}
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		nc.Close()
		return nil, transferErr("lane to %s: a %T is not a TCP connection", p.addr, nc)
	}
	bc, err := blockconn.FromTCP(tc)
	if err != nil {
		return nil, transferErr("lane to %s: %v", p.addr, err)
	}
	if p.e.laneSpin != 0 {
		bc.SetSpin(p.e.laneSpin)
	}
	return bc, nil
}

// laneDone returns a healthy lane connection to the idle list.
func (p *peerPool) laneDone(bc *blockconn.Conn) {
	p.mu.Lock()
	if !p.closed && len(p.lane) < laneIdleMax {
		p.lane = append(p.lane, bc)
		bc = nil
	}
	p.mu.Unlock()
	if bc != nil {
		bc.Close()
	}
}

// laneCall runs rs (requests of call c to p's peer) on a lane connection
// and finishes each of them in c, before it returns.
func (p *peerPool) laneCall(ctx context.Context, c *call, rs []*tcpReq) {
	p.laneStart(ctx, c, rs).finish()
}

// laneRun is a lane call whose requests are on the wire (or failed to get
// there): finish reads the answers.
type laneRun struct {
	p    *peerPool
	ctx  context.Context
	c    *call
	rs   []*tcpReq
	bc   *blockconn.Conn // nil once the call failed
	stop func() bool     // ends the cancellation watch; false if it fired
	err  error           // why the requests did not all go out
}

// laneStart takes a lane connection and writes rs on it. Every request of
// rs is finished in c by the run's finish, whatever happens here.
func (p *peerPool) laneStart(ctx context.Context, c *call, rs []*tcpReq) *laneRun {
	c.left.Add(int64(len(rs)))
	run := &laneRun{p: p, ctx: ctx, c: c, rs: rs, stop: func() bool { return true }}
	bc, err := p.laneConn(ctx)
	if err != nil {
		run.err = err
		return run
	}
	run.bc = bc
	// The deadline bounds each system call; cancellation shuts the socket
	// down, which wakes a blocked read or write at once.
	deadline, _ := ctx.Deadline()
	if ctx.Done() != nil {
		run.stop = context.AfterFunc(ctx, func() { bc.Shutdown() })
	}
	if err = bc.SetDeadline(deadline); err == nil {
		err = p.laneWrite(bc, rs)
	}
	run.err = err
	return run
}

// finish reads the answers of a run and finishes its requests: answered
// ones with their answers, the others with the failure, retryable unless
// the call's ctx ended or the connection could not be had.
func (run *laneRun) finish() {
	p, c, rs := run.p, run.c, run.rs
	if run.bc == nil {
		for _, r := range rs {
			c.finish(r.opIdx, run.err, false)
		}
		return
	}
	done := make([]bool, len(rs)) // finished by an answer
	err := run.err
	if err == nil {
		err = p.laneRead(run.bc, c, rs, done)
	}
	cancelled := !run.stop()
	switch {
	case cancelled:
		err = ctxErr(run.ctx)
	case err != nil && errors.Is(err, os.ErrDeadlineExceeded):
		err = transferErr("%s did not answer in time: %v", p.addr, err)
	case err != nil && wire.CodeOf(err) != wire.ErrTransferFail:
		err = transferErr("lane to %s: %v", p.addr, err)
	}
	if err != nil {
		run.bc.Close()
		for k, r := range rs {
			if !done[k] {
				c.finish(r.opIdx, err, !cancelled)
			}
		}
		return
	}
	p.laneDone(run.bc)
}

// laneWrite numbers rs 1, 2, ... and writes them with one writev.
func (p *peerPool) laneWrite(bc *blockconn.Conn, rs []*tcpReq) error {
	iov := make([][]byte, 0, 3*len(rs))
	for k, r := range rs {
		r.frame(uint64(k + 1))
		iov = append(iov, r.hdr[:])
		if r.grant != nil {
			iov = append(iov, r.grant)
		}
		if isWrite(r.op) {
			iov = append(iov, r.bufs...)
		}
	}
	return bc.Writev(iov...)
}

// laneRead reads the answers to rs, finishing each request as its answer
// is read (done marks them; answers may come in any order, as on the
// streams). An error leaves the connection out of step: the caller closes
// it and fails the requests not done.
func (p *peerPool) laneRead(bc *blockconn.Conn, c *call, rs []*tcpReq, done []bool) error {
	in := newLaneReader(bc)
	defer in.release()
	var h [respHdrSize]byte
	for range rs {
		if err := in.readFull(h[:]); err != nil {
			return err
		}
		id, status, n := le.Uint64(h[0:]), wire.Code(int32(le.Uint32(h[8:]))), le.Uint64(h[12:])
		if id == 0 || id > uint64(len(rs)) || done[id-1] {
			err := fmt.Errorf("%s answered unknown request %d", p.addr, id)
			if p.e.auth == nil {
				// Foreign bytes (a peer that asks for a secret) say
				// what the peer is; a gostore peer never sends them.
				err = wire.FirstReadError(p.addr, h[:], err)
			}
			return transferErr("%v", err)
		}
		r := rs[id-1]
		var answer error
		switch {
		case status != wire.OK && n == 0:
			answer = p.statusErr(r, status)
		case !isWrite(r.op) && status == wire.OK && n == r.n:
			for _, b := range r.bufs {
				if err := in.readFull(b); err != nil {
					return err
				}
			}
		case isWrite(r.op) && status == wire.OK && n == 0:
		default:
			return transferErr("%s answered request %d (op %d, %d bytes) with status %d and %d bytes",
				p.addr, id, r.op, r.n, status, n)
		}
		done[id-1] = true
		c.finish(r.opIdx, answer, false)
	}
	if in.buffered() > 0 {
		// The server answers each request once: more is a broken stream.
		// (Only bytes already read are seen here; any that come later
		// fail the next call on this connection, which is then closed.)
		return transferErr("%s sent %d bytes past the answers of a call", p.addr, in.buffered())
	}
	return nil
}

// A lane call's answers are read through a buffer, so that the headers
// and small payloads that arrive together (the Server gathers the answers
// of a batch into few writes) cost one system call, not two per answer:
// a 32 x 4 KiB batch read over loopback spent most of its time in those
// calls. A payload part of laneDirect bytes or more is read straight into
// the caller's memory once the buffer is empty, so large reads are not
// copied twice.
const (
	laneBufSize = 64 << 10
	laneDirect  = 16 << 10
)

var laneBufs = sync.Pool{New: func() any { b := make([]byte, laneBufSize); return &b }}

// laneReader reads a lane connection through a pooled buffer; it holds
// the buffer until release.
type laneReader struct {
	bc   *blockconn.Conn
	buf  *[]byte
	r, w int // buffered bytes: (*buf)[r:w]
}

func newLaneReader(bc *blockconn.Conn) *laneReader {
	return &laneReader{bc: bc, buf: laneBufs.Get().(*[]byte)}
}

func (in *laneReader) release() { laneBufs.Put(in.buf) }

func (in *laneReader) buffered() int { return in.w - in.r }

// readFull fills p from the buffer, refilling it with one read at a time
// (what has arrived, at least a byte), or reading straight into p.
func (in *laneReader) readFull(p []byte) error {
	for len(p) > 0 {
		if in.r == in.w {
			if len(p) >= laneDirect {
				return in.bc.ReadFull(p)
			}
			n, err := in.bc.Read(*in.buf)
			if err != nil {
				return err
			}
			in.r, in.w = 0, n
		}
		n := copy(p, (*in.buf)[in.r:in.w])
		in.r += n
		p = p[n:]
	}
	return nil
}

// beginLane is Begin over TCP: op's request, sent on the lane. nil when
// op does not fit one (more than one slice or LaneBytes, no lane: mutual
// TLS, LaneBytes < 0).
func (e *Engine) beginLane(ctx context.Context, op *Op, total uint64) *Begun {
	if op.Peer.TransferAddr == "" || total > e.slice || !e.laneFits(1, total) {
		return nil
	}
	pool, err := e.pool(op.Peer.TransferAddr, []uint64{op.Peer.SegID})
	if err != nil {
		return nil
	}
	c := &call{done: make(chan struct{}), idx: []int{0}, errs: map[int]error{}, noRetry: map[int]bool{}}
	r := &tcpReq{call: c, opIdx: 0, off: op.Offset, n: total, bufs: op.Bufs, op: reqOp(op)}
	if len(op.Grant) > 0 {
		r.grant = op.Grant
	}
	return &Begun{run: pool.laneStart(ctx, c, []*tcpReq{r}), c: c}
}

// waitLane reads the answer of the request beginLane sent (as Do would,
// without Do's retry on a fresh connection: the caller that began
// speculatively goes the usual way instead).
func (b *Begun) waitLane() error {
	b.run.finish()
	errs := make([]error, 1)
	b.c.wait(b.run.ctx, errs, nil)
	return errs[0]
}
