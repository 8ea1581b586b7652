package client

import (
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/gostore/gostore/gostore/auth"
)

// A non-loopback address of this host, or "" when it has none.
func hostIP(t *testing.T) string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil && !n.IP.IsLinkLocalUnicast() {
			return n.IP.String()
		}
	}
	return ""
}

func TestListenHostWithoutAuthentication(t *testing.T) {
	ip := hostIP(t)
	if ip == "" {
		t.Skip("this host has no non-loopback IPv4 address")
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	cases := []struct {
		master, host string
		insecure     bool
		want         string // "!" = refused
	}{
		{"127.0.0.1:50051", "127.0.0.1", false, ""},    // loopback: listen there
		{"127.0.0.1:50051", ip, false, "127.0.0.1"},    // one host: loopback under the host's name
		{"localhost:50051", ip, false, "127.0.0.1"},    // the same, the master by name
		{"127.0.0.1:50051", "0.0.0.0", false, "!"},     // every interface, asked explicitly
		{"127.0.0.1:50051", "203.0.113.9", false, "!"}, // not an address of this host
		{ip + ":50051", ip, false, "!"},                // other hosts may be in the pool
		{"etcd://127.0.0.1:2379", ip, false, "!"},      // HA masters may be anywhere
		{ip + ":50051", ip, true, ""},                  // allowed explicitly: as asked
	}
	for _, c := range cases {
		got, err := listenHost(Config{MasterServerAddr: c.master, AllowInsecure: c.insecure}, nil, c.host, quiet)
		if c.want == "!" {
			if err == nil || !strings.Contains(err.Error(), "without authentication") {
				t.Errorf("master %s, local_hostname %s: got %q, %v; want a refusal", c.master, c.host, got, err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("master %s, local_hostname %s: got %q, %v; want %q", c.master, c.host, got, err, c.want)
		}
	}
	// With authentication the server listens where local_hostname says.
	guard, err := auth.New(auth.Options{SecretFile: writeSecret(t)})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := listenHost(Config{MasterServerAddr: "127.0.0.1:50051"}, guard, ip, quiet); err != nil || got != "" {
		t.Errorf("authenticated: got %q, %v; want to listen on %s", got, err, ip)
	}
}

func writeSecret(t *testing.T) string {
	p := t.TempDir() + "/secret"
	if err := os.WriteFile(p, []byte("0123456789abcdef0123456789abcdef"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
