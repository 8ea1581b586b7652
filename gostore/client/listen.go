// listen.go decides where a client's servers listen (listenHost: loopback for a
// one-host pool without authentication) and opens the transfer listener.

package client

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gostore/gostore/gostore/auth"
	"github.com/gostore/gostore/gostore/wire"
)

func splitLocal(local string) (host, port string) {
	if host, port, err := net.SplitHostPort(local); err == nil {
		return host, port
	}
	return local, ""
}

// listenHost decides where this client's servers (its segment's, the
// segments mounted at run time, the SSD tier's) listen, given
// local_hostname's host h: "" means on h itself.
//
// Without authentication a server may listen only where no other host
// reaches it (auth.Check). One case is allowed all the same, by listening
// on loopback instead of h: the master is on loopback and h is an address
// of this host. That is the one-host pool an engine's Mooncake integration
// sets up as its docs show (vLLM's passes the host's IP as local_hostname
// and the master as 127.0.0.1): every peer is on this host, since no other
// host can reach the master, so loopback serves them all, and h still
// names the segment. Nothing listens where another host could connect.
func listenHost(cfg Config, guard *auth.Auth, h string, log *slog.Logger) (string, error) {
	err := auth.Check(guard, "the transfer server", h, cfg.AllowInsecure)
	if err == nil {
		return "", nil
	}
	if masterOnLoopback(cfg.MasterServerAddr) && onThisHost(h) {
		bind := "127.0.0.1"
		if ip := net.ParseIP(strings.Trim(h, "[]")); ip != nil && ip.To4() == nil {
			bind = "::1"
		}
		log.Info("no authentication and the master is on loopback: this client's servers listen on loopback only; "+
			"local_hostname names the segment, and only processes of this host can reach it "+
			"(give a shared secret or TLS files to serve other hosts)", "local_hostname", h, "listen", bind)
		return bind, nil
	}
	return "", fmt.Errorf("%w (setup's auth_secret_file or tls_*_file, a loopback local_hostname, "+
		"a master on loopback with a local_hostname of this host, or allow_insecure)", err)
}

// masterOnLoopback: the master's address is a loopback one, so only
// processes of this host can join its pool. An HA address (etcd://) names
// masters that may be anywhere: never.
func masterOnLoopback(addr string) bool {
	if strings.HasPrefix(addr, "etcd://") {
		return false
	}
	host, _, err := net.SplitHostPort(addr)
	return err == nil && auth.Loopback(host)
}

// onThisHost: every address h names (an IP, or a name resolved within 2 s)
// is one of this host's interfaces. The unspecified address (0.0.0.0, ::)
// asks for every interface, explicitly: it is not taken for loopback.
func onThisHost(h string) bool {
	var ips []net.IP
	if ip := net.ParseIP(strings.Trim(h, "[]")); ip != nil {
		ips = []net.IP{ip}
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		addrs, err := net.DefaultResolver.LookupIPAddr(ctx, h)
		if err != nil {
			return false
		}
		for _, a := range addrs {
			ips = append(ips, a.IP)
		}
	}
	local, err := net.InterfaceAddrs()
	if err != nil || len(ips) == 0 {
		return false
	}
	for _, ip := range ips {
		if ip.IsUnspecified() || !hasIP(local, ip) {
			return false
		}
	}
	return true
}

func hasIP(addrs []net.Addr, ip net.IP) bool {
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
			return true
		}
	}
	return false
}

// notListenable is the error of a local_hostname the transfer server
// cannot listen on for another reason than a port in use: most often an
// address that is not this host's.
func notListenable(local string, err error) error {
	hint := ""
	if errors.Is(err, syscall.EADDRNOTAVAIL) {
		hint = ": it is no address of this host (local_hostname names this host as its peers reach it)"
	}
	return wire.Errorf(wire.ErrInvalidParams, "local_hostname %s: the transfer server cannot listen there: %v%s", local, err, hint)
}

// listenTransfer opens a transfer server's listener: on the given port, or
// on a free port of 12300–14300 when local_hostname has none. It listens
// on bind when given (listenHost), else on local_hostname's host, and
// returns that host, which names the segment. A given port that another
// process (or client) holds is not fatal: Mooncake's setup succeeds there
// too, so the client takes a free port and says so in the log; its segment
// is named by the port it got.
func listenTransfer(local, bind string, log *slog.Logger) (string, net.Listener, error) {
	host, port := splitLocal(local)
	at := host
	if bind != "" {
		at = bind
	}
	if port != "" {
		ln, err := net.Listen("tcp", net.JoinHostPort(at, port))
		if err == nil {
			return host, ln, nil
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			return "", nil, notListenable(local, err)
		}
		log.Warn("port of local_hostname in use; the transfer server takes a free one", "local_hostname", local)
	}
	span := big.NewInt(portHigh - portLow)
	for range 64 {
		n, _ := rand.Int(rand.Reader, span)
		ln, err := net.Listen("tcp", net.JoinHostPort(at, strconv.Itoa(portLow+int(n.Int64()))))
		if err == nil {
			return host, ln, nil
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			return "", nil, notListenable(local, err) // no other port would do better
		}
	}
	return "", nil, wire.Errorf(wire.ErrInvalidParams, "no free port in %d-%d on %s", portLow, portHigh, at)
}
