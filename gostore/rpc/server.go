// server.go defines the RPC server: handler registry and connection loops.

package rpc

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/gostore/gostore/gostore/auth"
	"github.com/gostore/gostore/gostore/internal/blockconn"
	"github.com/gostore/gostore/gostore/internal/burstlog"
	"github.com/gostore/gostore/gostore/wire"
)

// Handler answers one request body. A *wire.Error return sends its code to
// the caller; an error wrapping ErrGarbage closes the connection.
type Handler func(body []byte) (resp any, err error)

// ErrGarbage marks a request body that could not be decoded.
var ErrGarbage = errors.New("rpc: undecodable request")

// Observer, when set, is told about every answered call (for metrics).
type Observer func(op wire.Op, code wire.Code, took time.Duration)

// Server dispatches frames to handlers. Register handlers before Serve.
type Server struct {
	handlers [64]Handler
	log      *slog.Logger
	opt      ServerOptions
	auth     atomic.Pointer[auth.Auth] // nil: connections are served as accepted
	panics   atomic.Uint64             // handler panics recovered (see Panics)
	closing  chan struct{}             // closed by Close: requests waiting for a slot give up

	// One line per refusal kind per refusalLogEvery (see limits.go).
	bodyLog, connLog, waitLog, admitLog burstlog.Every

	mu struct {
		sync.Mutex
		listeners []net.Listener
		conns     map[net.Conn]struct{}
		peers     map[string]*peer // by remote address (peerKey), while it has connections
		closed    bool
	}
	wg sync.WaitGroup
}

// NewServer returns a server that logs to log (slog.Default() if nil),
// with no limits but wire.MaxBody.
func NewServer(log *slog.Logger, observe Observer) *Server {
	return NewServerWith(log, ServerOptions{Observe: observe})
}

// NewServerWith returns a server that logs to log (slog.Default() if nil),
// configured by opt.
func NewServerWith(log *slog.Logger, opt ServerOptions) *Server {
	if log == nil {
		log = slog.Default()
	}
	s := &Server{log: log, opt: opt, closing: make(chan struct{})}
	for _, e := range []*burstlog.Every{&s.bodyLog, &s.connLog, &s.waitLog, &s.admitLog} {
		e.Interval = refusalLogEvery
	}
	s.mu.conns = make(map[net.Conn]struct{})
	s.mu.peers = make(map[string]*peer)
	return s
}

// SetAuth makes every connection accepted from now on pass a's handshake
// before its first request; one that fails it is logged and closed.
func (s *Server) SetAuth(a *auth.Auth) { s.auth.Store(a) }

// Panics is the number of handler panics the server recovered since it
// was created. Each cost its caller an INTERNAL_ERROR and is a bug (a
// request a handler or decoder did not expect): tests and fuzz targets
// require it to stay 0, and metrics may export it.
func (s *Server) Panics() uint64 { return s.panics.Load() }

// Handle registers h for op.
func (s *Server) Handle(op wire.Op, h Handler) {
	if int(op) >= len(s.handlers) {
		panic(fmt.Sprintf("rpc: opcode %d out of table", op))
	}
	s.handlers[op] = h
}

// Wrap replaces op's handler h with wrap(h): a decoration (waiting for a
// journal, say) added after registration. Call before Serve.
func (s *Server) Wrap(op wire.Op, wrap func(Handler) Handler) {
	if int(op) >= len(s.handlers) || s.handlers[op] == nil {
		panic(fmt.Sprintf("rpc: no handler for opcode %d to wrap", op))
	}
	s.handlers[op] = wrap(s.handlers[op])
}

// HandleFunc registers a typed handler: the body is decoded into a fresh Req
// (by wire.Unmarshal, which vets it first), which ServerOptions.Admit, when
// set, vets before f runs.
func HandleFunc[Req any, Resp any](s *Server, op wire.Op, f func(*Req) (*Resp, error)) {
	s.Handle(op, func(body []byte) (any, error) {
		req := new(Req)
		if err := wire.Unmarshal(body, req); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrGarbage, op, err)
		}
		if s.opt.Admit != nil {
			if err := s.opt.Admit(req); err != nil {
				return nil, &refusal{err}
			}
		}
		return f(req)
	})
}

// Serve accepts connections on ln until Close. It returns nil after Close.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		ln.Close()
		return nil
	}
	s.mu.listeners = append(s.mu.listeners, ln)
	s.mu.Unlock()
	for {
		c, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.mu.closed
			s.mu.Unlock()
			if closed {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return err
		}
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetNoDelay(true)
		}
		s.mu.Lock()
		if s.mu.closed {
			s.mu.Unlock()
			c.Close()
			return nil
		}
		s.mu.conns[c] = struct{}{}
		s.wg.Add(1)
		p, ok := s.admitConnLocked(c)
		s.mu.Unlock()
		if !ok {
			go s.refuseConn(c)
			continue
		}
		go s.serveConn(c, p)
	}
}

// Close stops the listeners, closes every connection and waits for the
// connection goroutines to finish.
func (s *Server) Close() {
	s.mu.Lock()
	if !s.mu.closed {
		close(s.closing)
	}
	s.mu.closed = true
	for _, ln := range s.mu.listeners {
		ln.Close()
	}
	for c := range s.mu.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

func (s *Server) serveConn(raw net.Conn, p *peer) {
	addr := raw.RemoteAddr().String()
	defer func() {
		raw.Close()
		s.mu.Lock()
		delete(s.mu.conns, raw)
		s.leaveLocked(p)
		s.mu.Unlock()
		s.wg.Done()
	}()
	c, ok := s.auth.Load().Accept(blockconn.Poll(raw, s.opt.Spin), s.log, "rpc")
	if !ok {
		return
	}
	r := bufio.NewReaderSize(c, 64<<10)
	w := bufio.NewWriterSize(c, 64<<10)
	// Answers wait in w while more requests are buffered; whatever ends
	// the connection (a bad frame after good ones, the peer's EOF in the
	// middle of a frame), the requests already run get their answers.
	defer w.Flush()
	var body []byte
	var out []byte
	for {
		h, err := wire.ReadHeader(r)
		if err != nil {
			if err != io.EOF && !errors.Is(err, net.ErrClosed) {
				s.log.Warn("rpc: closing connection after a bad frame", "peer", addr, "err", err)
			}
			return
		}
		var resp any
		var code wire.Code
		start := time.Now()
		if int64(h.Len) > s.maxBody() {
			// Too large for this server: dropped and answered, if a
			// peer could mean it (see ServerOptions.MaxBody).
			if resp, code, err = s.refuseBody(r, h, addr); err != nil {
				s.log.Warn("rpc: closing connection after a bad frame", "peer", addr, "op", uint16(h.Op), "err", err)
				return
			}
		} else {
			if !s.enter(p, w, addr) {
				return // closing
			}
			b, err := wire.ReadBody(r, int(h.Len), body)
			if err != nil {
				p.leave()
				s.log.Warn("rpc: closing connection after a bad frame", "peer", addr, "err", err)
				return
			}
			if cap(b) > cap(body) && cap(b) <= 1<<20 {
				body = b // keep a grown buffer, but not a huge one
			}
			resp, code, err = s.dispatch(h.Op, b, addr)
			p.leave()
			if err != nil {
				s.log.Warn("rpc: closing connection after a bad request", "peer", addr, "op", uint16(h.Op), "err", err)
				return
			}
		}
		if s.opt.Observe != nil {
			s.opt.Observe(h.Op, code, time.Since(start))
		}
		if out, err = encodeResponse(out[:0], h, code, resp); err != nil {
			s.log.Error("rpc: cannot encode a response", "op", h.Op.String(), "err", err)
			return
		}
		if _, err := w.Write(out); err != nil {
			return
		}
		if r.Buffered() == 0 {
			if err := w.Flush(); err != nil {
				return
			}
		}
		if cap(out) > 1<<20 {
			out = nil
		}
	}
}

// dispatch runs the handler; a non-nil error means "close the connection".
func (s *Server) dispatch(op wire.Op, body []byte, peer string) (any, wire.Code, error) {
	if s.handler(op) == nil {
		return nil, 0, fmt.Errorf("unknown opcode %d", uint16(op))
	}
	resp, err := s.safeCall(s.handlers[op], body)
	if err == nil {
		return resp, wire.OK, nil
	}
	if errors.Is(err, ErrGarbage) {
		return nil, 0, err
	}
	var ref *refusal
	if errors.As(err, &ref) {
		s.admitLog.Fail(time.Now(), func(others int) {
			s.log.Warn("rpc: request refused", "peer", peer, "op", op.String(), "err", ref.err,
				"refusals_not_logged", others)
		})
	}
	var we *wire.Error
	if errors.As(err, &we) {
		return we.Msg, we.Code, nil
	}
	s.log.Error("rpc: handler failed", "op", op.String(), "err", err)
	return err.Error(), wire.ErrInternal, nil
}

// handler is op's handler, nil for an opcode this server does not serve.
func (s *Server) handler(op wire.Op) Handler {
	if int(op) >= len(s.handlers) {
		return nil
	}
	return s.handlers[op]
}

// safeCall turns a handler panic into an internal error so one bad request
// cannot crash the master; the panic is a bug and is reported as such.
func (s *Server) safeCall(h Handler, body []byte) (resp any, err error) {
	defer func() {
		if p := recover(); p != nil {
			s.panics.Add(1)
			err = fmt.Errorf("handler panic: %v", p)
		}
	}()
	return h(body)
}

func encodeResponse(dst []byte, h wire.Header, code wire.Code, resp any) ([]byte, error) {
	body, err := msgpack.Marshal(resp)
	if err != nil {
		return dst, err
	}
	return wire.AppendFrame(dst, h.ID, h.Op, code, body), nil
}
