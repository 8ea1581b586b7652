// http.go defines how HTTP endpoints are guarded, and Check, the rule that
// keeps authentication on wherever a port is reachable from another host.

package auth

import (
	"crypto/subtle"
	"crypto/tls"
	"log/slog"
	"net"
	"net/http"
	"strings"

	"github.com/gostore/gostore/gostore/wire"
)

// HTTPListener returns the listener an HTTP server of this process
// serves on: with mutual TLS, HTTPS that asks for a client certificate
// without requiring one (open endpoints stay reachable to a scraper
// without one; Guard checks it for the rest); otherwise ln itself.
func (a *Auth) HTTPListener(ln net.Listener) net.Listener {
	if a == nil || a.server == nil {
		return ln
	}
	cfg := a.server.Clone()
	cfg.ClientAuth = tls.RequestClientCert
	cfg.VerifyConnection = nil
	return tls.NewListener(ln, cfg)
}

// Guard wraps h: a request for a path open reports true passes; any other
// needs a client certificate chaining to the CA (mutual TLS) or the
// header "Authorization: Bearer <secret>" (shared secret), and is
// answered 401 without it, with one log line. A nil Auth passes all.
func (a *Auth) Guard(h http.Handler, open func(path string) bool, log *slog.Logger) http.Handler {
	if a == nil {
		return h
	}
	if log == nil {
		log = slog.Default()
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if open != nil && open(r.URL.Path) {
			h.ServeHTTP(w, r)
			return
		}
		if why := a.refuseHTTP(r); why != "" {
			log.Warn("auth: HTTP request refused", "remote", r.RemoteAddr, "path", r.URL.Path, "why", why)
			w.Header().Set("WWW-Authenticate", `Bearer realm="gostore"`)
			http.Error(w, "authentication required: "+why, http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// refuseHTTP says why r is not authenticated, or "" when it is.
func (a *Auth) refuseHTTP(r *http.Request) string {
	if a.server != nil {
		if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
			return "no client certificate"
		}
		if err := a.verifyPeer(*r.TLS); err != nil {
			return err.Error()
		}
		return ""
	}
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return "no Authorization: Bearer header"
	}
	if subtle.ConstantTimeCompare([]byte(tok), a.secret) != 1 {
		return "wrong secret"
	}
	return ""
}

// Loopback reports whether host (a name or an IP, no port) can only be
// reached from this machine: a loopback IP or "localhost". "" and
// unspecified addresses (0.0.0.0, ::) are every interface.
func Loopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// Check is the rule for a process about to listen on host: without
// authentication it may only listen on loopback, unless the operator
// allowed it (allowInsecure). The error names the way out.
func Check(a *Auth, what, host string, allowInsecure bool) error {
	if a != nil || allowInsecure || Loopback(host) {
		return nil
	}
	if host == "" {
		host = "every interface"
	}
	return wire.Errorf(wire.ErrInvalidParams,
		"%s would listen on %s without authentication: give a shared secret or TLS files, "+
			"listen on loopback, or allow it explicitly (insecure)", what, host)
}

// HTTPScheme is the scheme of this process's guarded HTTP endpoints:
// "https" with mutual TLS (HTTPListener), "http" otherwise.
func (a *Auth) HTTPScheme() string {
	if a != nil && a.server != nil {
		return "https"
	}
	return "http"
}

// HTTPClient is a client for another process's guarded endpoints: with
// mutual TLS it presents this process's certificate and checks the
// server's chain to the CA, as connections do; otherwise a plain client
// (Authorize adds the shared secret to each request).
func (a *Auth) HTTPClient() *http.Client {
	// No proxy: masters reach each other directly, whatever the
	// environment says for other traffic.
	if a == nil || a.client == nil {
		return &http.Client{Transport: &http.Transport{}}
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: a.client.Clone()}}
}

// Authorize adds to req what Guard asks of it with a shared secret (the
// Bearer header); with mutual TLS the certificate does (HTTPClient).
func (a *Auth) Authorize(req *http.Request) {
	if a != nil && a.secret != nil {
		req.Header.Set("Authorization", "Bearer "+string(a.secret))
	}
}
