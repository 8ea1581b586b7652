// server.go defines the client HTTP server: /metrics, /health and
// /metrics/summary.

package clientmetrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Health codes, as the client's Health reports them (and Python's
// health_check returns).
const (
	Healthy           = 0
	Closed            = 1
	MasterUnreachable = 2
)

// Server is a running client HTTP server.
type Server struct {
	http *http.Server
	ln   net.Listener
	log  *slog.Logger
	done chan struct{}
}

// Serve listens on all IPv4 addresses at port (0.0.0.0, as Mooncake's
// client does) and serves m there until Close. health reports the
// client's health code for /health. A port that cannot be bound is an
// error; the caller decides whether that is fatal.
func Serve(m *Metrics, port int, health func() int, log *slog.Logger) (*Server, error) {
	if log == nil {
		log = slog.Default()
	}
	ln, err := net.Listen("tcp4", net.JoinHostPort("0.0.0.0", strconv.Itoa(port)))
	if err != nil {
		return nil, err
	}
	s := &Server{ln: ln, log: log, done: make(chan struct{}),
		http: &http.Server{Handler: m.Handler(health), ReadHeaderTimeout: 5 * time.Second}}
	go func() {
		defer close(s.done)
		if err := s.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("client HTTP server stopped", "addr", ln.Addr().String(), "err", err)
		}
	}()
	return s, nil
}

// Addr is the bound address.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Close stops the server: the port is closed when Close returns, and
// requests in flight get a second to finish.
func (s *Server) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := s.http.Shutdown(ctx); err != nil {
		s.http.Close()
	}
	<-s.done
}

// Handler answers GET and HEAD of /metrics, /health and /metrics/summary;
// 404 to anything else.
func (m *Metrics) Handler(health func() int) http.Handler {
	prom := promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			http.NotFound(w, r)
			return
		}
		switch r.URL.Path {
		case "/metrics":
			prom.ServeHTTP(w, r)
		case "/metrics/summary":
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			m.WriteSummary(w)
		case "/health":
			writeHealth(w, health())
		default:
			http.NotFound(w, r)
		}
	})
}

// writeHealth answers 200 {"status":"healthy","code":0} for a healthy
// client and 503 with the code and its name otherwise.
func writeHealth(w http.ResponseWriter, code int) {
	status, httpCode := "healthy", http.StatusOK
	switch code {
	case Healthy:
	case MasterUnreachable:
		status, httpCode = "master_unreachable", http.StatusServiceUnavailable
	case Closed:
		status, httpCode = "closed", http.StatusServiceUnavailable
	default:
		status, httpCode = "unhealthy", http.StatusServiceUnavailable
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(httpCode)
	fmt.Fprintf(w, `{"status":%q,"code":%d}`, status, code)
}
