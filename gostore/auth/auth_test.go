// auth_test.go checks both handshakes over real loopback connections, the
// refusals each side logs, the HTTP guard and the loopback rule.

package auth_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gostore/gostore/gostore/auth"
	"github.com/gostore/gostore/gostore/auth/authtest"
	"github.com/gostore/gostore/gostore/wire"
)

// pair dials a loopback listener and runs server's and client's
// handshakes at once; it returns both results. A nil side sends nothing
// of its own: a plain peer, which writes plain if it is the client.
func pair(t *testing.T, server, client *auth.Auth) (sc, cc net.Conn, serr, cerr error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type res struct {
		c   net.Conn
		err error
	}
	done := make(chan res, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- res{nil, err}
			return
		}
		t.Cleanup(func() { c.Close() })
		if server == nil {
			done <- res{c, nil}
			return
		}
		s, err := server.Server(c)
		if err != nil {
			c.Close() // as the callers do
		}
		done <- res{s, err}
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	if client == nil {
		cc = raw
		raw.Write([]byte("plain request bytes, no handshake")) // what an unconfigured peer sends first
	} else {
		cc, cerr = client.Client(context.Background(), raw)
		if cerr != nil {
			raw.Close()
		}
	}
	r := <-done
	return r.c, cc, r.err, cerr
}

// echo checks that bytes cross both ways on an established pair.
func echo(t *testing.T, a, b net.Conn) {
	t.Helper()
	go func() {
		buf := make([]byte, 5)
		if _, err := io.ReadFull(a, buf); err == nil {
			a.Write(append(buf, '!'))
		}
	}()
	if _, err := b.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 6)
	b.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(b, got); err != nil || string(got) != "hello!" {
		t.Fatalf("echo: %q %v", got, err)
	}
}

func short(o auth.Options) auth.Options {
	o.HandshakeTimeout = 300 * time.Millisecond
	return o
}

func TestSharedSecret(t *testing.T) {
	dir := t.TempDir()
	good := authtest.Must(t, short(authtest.Secret(t, dir, "s1", "correct horse battery staple")))
	other := authtest.Must(t, short(authtest.Secret(t, dir, "s2", "a different secret, long enough")))
	if good.Mode() != "secret" || good.Encrypts() {
		t.Fatalf("mode %s encrypts %v", good.Mode(), good.Encrypts())
	}

	t.Run("same secret", func(t *testing.T) {
		s, c, serr, cerr := pair(t, good, good)
		if serr != nil || cerr != nil {
			t.Fatalf("server %v client %v", serr, cerr)
		}
		echo(t, s, c)
		echo(t, c, s)
	})
	t.Run("wrong secret", func(t *testing.T) {
		_, _, serr, cerr := pair(t, good, other)
		if serr == nil || !strings.Contains(serr.Error(), "does not hold the shared secret") {
			t.Fatalf("server: %v", serr)
		}
		if cerr == nil {
			t.Fatal("client accepted a server that refused it")
		}
	})
	t.Run("plain client", func(t *testing.T) {
		_, _, serr, _ := pair(t, good, nil)
		if serr == nil || !strings.Contains(serr.Error(), "spoke without authenticating") {
			t.Fatalf("server: %v", serr)
		}
	})
	t.Run("silent client", func(t *testing.T) {
		ln, _ := net.Listen("tcp", "127.0.0.1:0")
		defer ln.Close()
		go func() {
			c, _ := net.Dial("tcp", ln.Addr().String())
			time.Sleep(2 * time.Second) // never answers the challenge
			c.Close()
		}()
		c, _ := ln.Accept()
		defer c.Close()
		start := time.Now()
		_, err := good.Server(c)
		var ne net.Error
		if err == nil || !errors.As(err, &ne) || !ne.Timeout() || time.Since(start) > time.Second {
			t.Fatalf("a silent peer held the handshake %v: %v", time.Since(start), err)
		}
	})
	t.Run("plain server", func(t *testing.T) {
		// A server without auth waits for a request: the client's
		// handshake ends at its timeout, saying so.
		_, _, _, cerr := pair(t, nil, good)
		if cerr == nil || !strings.Contains(cerr.Error(), "no authentication challenge") {
			t.Fatalf("client: %v", cerr)
		}
	})
}

func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca := authtest.NewCA(t, dir, "pool")
	rogue := authtest.NewCA(t, dir, "rogue")
	master := authtest.Must(t, short(ca.Issue(t, "master")))
	client := authtest.Must(t, short(ca.Issue(t, "client")))
	intruder := authtest.Must(t, short(rogue.Issue(t, "intruder")))
	// Trusts our CA (so it accepts our server) but holds a rogue certificate.
	impostorOpts := rogue.Issue(t, "impostor")
	impostorOpts.CAFile = ca.File
	impostor := authtest.Must(t, short(impostorOpts))
	if master.Mode() != "mtls" || !master.Encrypts() {
		t.Fatalf("mode %s encrypts %v", master.Mode(), master.Encrypts())
	}

	t.Run("both signed by the CA", func(t *testing.T) {
		s, c, serr, cerr := pair(t, master, client)
		if serr != nil || cerr != nil {
			t.Fatalf("server %v client %v", serr, cerr)
		}
		if _, ok := s.(*tls.Conn); !ok {
			t.Fatalf("server side is %T, not TLS", s)
		}
		echo(t, s, c)
		echo(t, c, s)
	})
	t.Run("client from another CA", func(t *testing.T) {
		_, _, serr, _ := pair(t, master, impostor)
		if serr == nil || !strings.Contains(serr.Error(), "does not chain to our CA") {
			t.Fatalf("server: %v", serr)
		}
		// One that trusts another CA refuses our server first: the server
		// hears why.
		_, _, serr, _ = pair(t, master, intruder)
		if serr == nil || !strings.Contains(serr.Error(), "the peer refused our certificate") {
			t.Fatalf("server: %v", serr)
		}
	})
	t.Run("server from another CA", func(t *testing.T) {
		_, _, _, cerr := pair(t, intruder, client)
		if cerr == nil || !strings.Contains(cerr.Error(), "does not chain to our CA") {
			t.Fatalf("client: %v", cerr)
		}
	})
	t.Run("plain client", func(t *testing.T) {
		_, _, serr, _ := pair(t, master, nil)
		if serr == nil || !strings.Contains(serr.Error(), "does not speak TLS") {
			t.Fatalf("server: %v", serr)
		}
	})
}

func TestNewRefusesWhatCannotWork(t *testing.T) {
	dir := t.TempDir()
	ca := authtest.NewCA(t, dir, "pool")
	certs := ca.Issue(t, "node")
	secret := authtest.Secret(t, dir, "s", "0123456789abcdef")
	shortSecret := authtest.Secret(t, dir, "short", "tooshort")
	both := certs
	both.SecretFile = secret.SecretFile
	noKey := certs
	noKey.KeyFile = ""
	wrongKey := certs
	wrongKey.KeyFile = ca.Issue(t, "other").KeyFile
	notPEM := certs
	notPEM.CAFile = secret.SecretFile
	for _, c := range []struct {
		name string
		o    auth.Options
		want string
	}{
		{"both modes", both, "choose one"},
		{"no key", noKey, "needs a CA file"},
		{"key of another certificate", wrongKey, "certificate"},
		{"CA not PEM", notPEM, "no PEM certificate"},
		{"short secret", shortSecret, "at least 16"},
		{"missing secret file", auth.Options{SecretFile: filepath.Join(dir, "absent")}, "no such file"},
	} {
		a, err := auth.New(c.o)
		if a != nil || err == nil || !strings.Contains(err.Error(), c.want) || wire.CodeOf(err) != wire.ErrInvalidParams {
			t.Errorf("%s: %v, %v (want %q)", c.name, a, err, c.want)
		}
	}
	if a, err := auth.New(auth.Options{}); a != nil || err != nil {
		t.Fatalf("no options: %v %v", a, err)
	}
	var off *auth.Auth
	if off.Mode() != "off" || off.Encrypts() {
		t.Fatal("nil Auth is not off")
	}
}

func TestGuard(t *testing.T) {
	dir := t.TempDir()
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "served") })
	open := func(p string) bool { return p == "/metrics" }

	get := func(t *testing.T, c *http.Client, url string, hdr string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", url, nil)
		if hdr != "" {
			req.Header.Set("Authorization", hdr)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	t.Run("shared secret", func(t *testing.T) {
		a := authtest.Must(t, authtest.Secret(t, dir, "s", "0123456789abcdef0123"))
		srv := httptest.NewServer(a.Guard(ok, open, nil))
		defer srv.Close()
		for _, c := range []struct {
			path, hdr string
			code      int
		}{
			{"/metrics", "", 200},
			{"/get_all_segments", "", 401},
			{"/get_all_segments", "Bearer wrong-secret-000000", 401},
			{"/get_all_segments", "Basic 0123456789abcdef0123", 401},
			{"/get_all_segments", "Bearer 0123456789abcdef0123", 200},
		} {
			if code, body := get(t, srv.Client(), srv.URL+c.path, c.hdr); code != c.code || (code == 200) != (body == "served") {
				t.Errorf("%s %q: %d %q", c.path, c.hdr, code, body)
			}
		}
	})
	t.Run("mutual TLS", func(t *testing.T) {
		ca := authtest.NewCA(t, dir, "pool")
		a := authtest.Must(t, ca.Issue(t, "master"))
		ln, _ := net.Listen("tcp", "127.0.0.1:0")
		srv := &http.Server{Handler: a.Guard(ok, open, nil), ErrorLog: nil}
		go srv.Serve(a.HTTPListener(ln))
		defer srv.Close()
		url := "https://" + ln.Addr().String()
		anon := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
		opsCert := ca.Issue(t, "ops")
		pair, err := tls.LoadX509KeyPair(opsCert.CertFile, opsCert.KeyFile)
		if err != nil {
			t.Fatal(err)
		}
		withCert := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true,
			Certificates: []tls.Certificate{pair}}}}
		rogue := authtest.NewCA(t, dir, "rogue").Issue(t, "x")
		rpair, _ := tls.LoadX509KeyPair(rogue.CertFile, rogue.KeyFile)
		withRogue := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true,
			Certificates: []tls.Certificate{rpair}}}}
		for _, c := range []struct {
			name   string
			client *http.Client
			path   string
			code   int
		}{
			{"metrics without a certificate", anon, "/metrics", 200},
			{"segments without a certificate", anon, "/get_all_segments", 401},
			{"segments with the CA's certificate", withCert, "/get_all_segments", 200},
			{"segments with another CA's certificate", withRogue, "/get_all_segments", 401},
		} {
			if code, _ := get(t, c.client, url+c.path, ""); code != c.code {
				t.Errorf("%s: %d, want %d", c.name, code, c.code)
			}
		}
	})
}

func TestLoopbackRule(t *testing.T) {
	for _, c := range []struct {
		host string
		loop bool
	}{
		{"127.0.0.1", true}, {"127.9.9.9", true}, {"::1", true}, {"[::1]", true}, {"localhost", true}, {"LOCALHOST", true},
		{"", false}, {"0.0.0.0", false}, {"::", false}, {"10.1.2.3", false}, {"node7", false},
	} {
		if got := auth.Loopback(c.host); got != c.loop {
			t.Errorf("Loopback(%q) = %v", c.host, got)
		}
		err := auth.Check(nil, "the master's RPC port", c.host, false)
		if (err == nil) != c.loop {
			t.Errorf("Check(%q): %v", c.host, err)
		}
		if err != nil && (wire.CodeOf(err) != wire.ErrInvalidParams || !strings.Contains(err.Error(), "without authentication")) {
			t.Errorf("Check(%q): %v", c.host, err)
		}
		if err := auth.Check(nil, "x", c.host, true); err != nil {
			t.Errorf("allowed insecure %q: %v", c.host, err)
		}
	}
	a := authtest.Must(t, authtest.Secret(t, t.TempDir(), "s", "0123456789abcdef"))
	if err := auth.Check(a, "x", "0.0.0.0", false); err != nil {
		t.Fatal(err)
	}
}
