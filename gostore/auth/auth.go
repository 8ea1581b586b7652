// auth.go defines Options, Auth and the connection handshakes of both
// modes.

package auth

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/gostore/gostore/gostore/wire"
)

// HandshakeTimeout bounds a handshake on either side, unless Options say
// otherwise.
const HandshakeTimeout = 5 * time.Second

// MinSecretBytes is the shortest shared secret accepted: 128 bits.
const MinSecretBytes = 16

// Options name the files a process authenticates with. Either the three
// TLS files or SecretFile; none means off.
type Options struct {
	CAFile   string // PEM certificates peers' certificates must chain to
	CertFile string // PEM certificate (chain) this process presents
	KeyFile  string // PEM private key of CertFile
	// SecretFile holds the shared secret (surrounding white space is not
	// part of it); at least MinSecretBytes.
	SecretFile string
	// HandshakeTimeout: 0 means the package's HandshakeTimeout.
	HandshakeTimeout time.Duration
}

// Enabled reports whether the options ask for any authentication.
func (o Options) Enabled() bool {
	return o.CAFile != "" || o.CertFile != "" || o.KeyFile != "" || o.SecretFile != ""
}

// Auth secures connections and HTTP handlers. A nil *Auth is off.
type Auth struct {
	timeout time.Duration
	// mTLS
	roots  *x509.CertPool
	server *tls.Config
	client *tls.Config
	// shared secret
	secret []byte
}

// New reads the files the options name. It returns nil (off) for empty
// options, and an ErrInvalidParams error naming the file and the problem
// for options that cannot work: both modes at once, a TLS file missing,
// an unreadable or short secret, a certificate that does not load.
func New(o Options) (*Auth, error) {
	if !o.Enabled() {
		return nil, nil
	}
	a := &Auth{timeout: o.HandshakeTimeout}
	if a.timeout <= 0 {
		a.timeout = HandshakeTimeout
	}
	tlsAsked := o.CAFile != "" || o.CertFile != "" || o.KeyFile != ""
	switch {
	case tlsAsked && o.SecretFile != "":
		return nil, wire.Errorf(wire.ErrInvalidParams, "auth: both TLS files and a shared secret given: choose one")
	case o.SecretFile != "":
		b, err := os.ReadFile(o.SecretFile)
		if err != nil {
			return nil, wire.Errorf(wire.ErrInvalidParams, "auth: shared secret: %v", err)
		}
		a.secret = bytes.TrimSpace(b)
		if len(a.secret) < MinSecretBytes {
			return nil, wire.Errorf(wire.ErrInvalidParams, "auth: shared secret in %s is %d bytes: at least %d needed",
				o.SecretFile, len(a.secret), MinSecretBytes)
		}
		return a, nil
	}
	if o.CAFile == "" || o.CertFile == "" || o.KeyFile == "" {
		return nil, wire.Errorf(wire.ErrInvalidParams,
			"auth: mutual TLS needs a CA file, a certificate file and a key file (got ca=%q cert=%q key=%q)",
			o.CAFile, o.CertFile, o.KeyFile)
	}
	pem, err := os.ReadFile(o.CAFile)
	if err != nil {
		return nil, wire.Errorf(wire.ErrInvalidParams, "auth: CA: %v", err)
	}
	a.roots = x509.NewCertPool()
	if !a.roots.AppendCertsFromPEM(pem) {
		return nil, wire.Errorf(wire.ErrInvalidParams, "auth: CA file %s holds no PEM certificate", o.CAFile)
	}
	cert, err := tls.LoadX509KeyPair(o.CertFile, o.KeyFile)
	if err != nil {
		return nil, wire.Errorf(wire.ErrInvalidParams, "auth: certificate %s / key %s: %v", o.CertFile, o.KeyFile, err)
	}
	// Both sides verify the other's chain themselves (verifyPeer): the
	// standard checks would also match host names, which a pool of
	// hosts addressed by IP does not keep in its certificates.
	a.server = &tls.Config{
		MinVersion:       tls.VersionTLS13,
		Certificates:     []tls.Certificate{cert},
		ClientAuth:       tls.RequireAnyClientCert,
		VerifyConnection: a.verifyPeer,
	}
	a.client = &tls.Config{
		MinVersion:         tls.VersionTLS13,
		Certificates:       []tls.Certificate{cert},
		InsecureSkipVerify: true, // verifyPeer checks the chain
		VerifyConnection:   a.verifyPeer,
	}
	return a, nil
}

// Mode names the mode for logs: "mtls", "secret" or "off".
func (a *Auth) Mode() string {
	switch {
	case a == nil:
		return "off"
	case a.server != nil:
		return "mtls"
	}
	return "secret"
}

// Encrypts reports whether connections carry encrypted bytes after the
// handshake (mutual TLS); with a shared secret they carry the plain
// connection's bytes, and Client returns the connection it was given.
func (a *Auth) Encrypts() bool { return a != nil && a.server != nil }

// verifyPeer accepts a peer whose certificate chains to the CA, for any
// use: names are not checked (see the package documentation).
func (a *Auth) verifyPeer(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("the peer presented no certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: a.roots, Intermediates: inter,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	if err != nil {
		return fmt.Errorf("the peer's certificate (%s) does not chain to our CA: %w", cs.PeerCertificates[0].Subject, err)
	}
	return nil
}

// Server runs the accepting side's handshake on c, within the handshake
// timeout, and returns the connection to use. On error the caller logs it
// (it names what the peer did wrong) and closes c.
func (a *Auth) Server(c net.Conn) (net.Conn, error) {
	if a == nil {
		return c, nil
	}
	return a.handshake(context.Background(), c, tls.Server, a.server, a.secretServer)
}

// Accept is Server for a connection just accepted by a server named who
// ("rpc", "transfer"): a failure is logged in one line, "<who>: peer
// refused", with the peer's address and why, and ok is false (the caller
// closes c). A nil Auth returns c.
func (a *Auth) Accept(c net.Conn, log *slog.Logger, who string) (net.Conn, bool) {
	sc, err := a.Server(c)
	if err != nil {
		log.Warn(who+": peer refused", "remote", c.RemoteAddr().String(), "auth", a.Mode(), "err", err)
		return nil, false
	}
	return sc, true
}

// Client runs the dialling side's handshake on c and returns the
// connection to use: c itself with a shared secret, a TLS connection over
// c with mutual TLS. A deadline already on ctx is kept if it is sooner.
func (a *Auth) Client(ctx context.Context, c net.Conn) (net.Conn, error) {
	if a == nil {
		return c, nil
	}
	return a.handshake(ctx, c, tls.Client, a.client, a.secretClient)
}

// handshake runs one side's handshake on c within the handshake timeout:
// TLS through side (tls.Server or tls.Client) when cfg is set, else the
// shared-secret exchange secret.
func (a *Auth) handshake(ctx context.Context, c net.Conn, side func(net.Conn, *tls.Config) *tls.Conn,
	cfg *tls.Config, secret func(net.Conn) error) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	if cfg != nil {
		tc := side(c, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			return nil, describeTLS(err)
		}
		return tc, nil
	}
	if err := a.withDeadline(ctx, c, func() error { return secret(c) }); err != nil {
		return nil, err
	}
	return c, nil
}

// withDeadline runs f with ctx's deadline on c, and clears it after.
func (a *Auth) withDeadline(ctx context.Context, c net.Conn, f func() error) error {
	d, _ := ctx.Deadline()
	if err := c.SetDeadline(d); err != nil {
		return err
	}
	err := f()
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		err = fmt.Errorf("no authentication within %v: %w", a.timeout, err)
	}
	if derr := c.SetDeadline(time.Time{}); err == nil {
		err = derr
	}
	return err
}

// describeTLS adds what the common TLS failures mean here.
func describeTLS(err error) error {
	var rh tls.RecordHeaderError
	switch {
	case errors.As(err, &rh):
		return fmt.Errorf("the peer does not speak TLS (auth off on its side?): %w", err)
	case errors.Is(err, io.EOF):
		return fmt.Errorf("the peer closed during the TLS handshake (auth off on its side, or our certificate refused?): %w", err)
	}
	if strings.Contains(err.Error(), "remote error: tls: bad certificate") {
		return fmt.Errorf("the peer refused our certificate (signed by a CA it does not trust?): %w", err)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("no TLS handshake in time (auth off on the peer's side?): %w", err)
	}
	return fmt.Errorf("TLS handshake: %w", err)
}

// The shared-secret handshake. The server speaks first:
//
//	server: magic | Ns (32 random bytes)
//	client: magic | Nc (32 random bytes) | HMAC(secret, "client" | Ns | Nc)
//	server: HMAC(secret, "server" | Ns | Nc)
//
// Each side proves it holds the secret over nonces the other chose, so a
// recorded exchange proves nothing on another connection.
var magic = [8]byte{'G', 'S', 'A', 'U', 'T', 'H', '1', '\n'}

const nonceSize = 32

func (a *Auth) proof(role string, ns, nc []byte) []byte {
	m := hmac.New(sha256.New, a.secret)
	m.Write([]byte(role))
	m.Write(ns)
	m.Write(nc)
	return m.Sum(nil)
}

func (a *Auth) secretServer(c net.Conn) error {
	var hello [len(magic) + nonceSize]byte
	copy(hello[:], magic[:])
	ns := hello[len(magic):]
	if _, err := rand.Read(ns); err != nil {
		return err
	}
	if _, err := c.Write(hello[:]); err != nil {
		return fmt.Errorf("sending the challenge: %w", err)
	}
	var got [len(magic) + nonceSize + sha256.Size]byte
	// The first bytes tell a peer that does not authenticate at all
	// without waiting for the rest.
	if _, err := io.ReadFull(c, got[:len(magic)]); err != nil {
		return fmt.Errorf("the peer sent no authentication: %w", err)
	}
	if !bytes.Equal(got[:len(magic)], magic[:]) {
		return fmt.Errorf("the peer spoke without authenticating (first bytes % x; shared secret not set on its side?)",
			got[:len(magic)])
	}
	if _, err := io.ReadFull(c, got[len(magic):]); err != nil {
		return fmt.Errorf("the peer's authentication was cut short: %w", err)
	}
	nc := got[len(magic) : len(magic)+nonceSize]
	if !hmac.Equal(got[len(magic)+nonceSize:], a.proof("client", ns, nc)) {
		return errors.New("the peer does not hold the shared secret (wrong proof)")
	}
	if _, err := c.Write(a.proof("server", ns, nc)); err != nil {
		return fmt.Errorf("sending our proof: %w", err)
	}
	return nil
}

func (a *Auth) secretClient(c net.Conn) error {
	var hello [len(magic) + nonceSize]byte
	if _, err := io.ReadFull(c, hello[:]); err != nil {
		return fmt.Errorf("no authentication challenge from the peer (auth off on its side?): %w", err)
	}
	if !bytes.Equal(hello[:len(magic)], magic[:]) {
		return errors.New("the peer's first bytes are no authentication challenge (auth off on its side?)")
	}
	ns := hello[len(magic):]
	var out [len(magic) + nonceSize + sha256.Size]byte
	copy(out[:], magic[:])
	nc := out[len(magic) : len(magic)+nonceSize]
	if _, err := rand.Read(nc); err != nil {
		return err
	}
	copy(out[len(magic)+nonceSize:], a.proof("client", ns, nc))
	if _, err := c.Write(out[:]); err != nil {
		return fmt.Errorf("sending our proof: %w", err)
	}
	var theirs [sha256.Size]byte
	if _, err := io.ReadFull(c, theirs[:]); err != nil {
		return fmt.Errorf("the peer refused our shared secret (closed without its proof): %w", err)
	}
	if !hmac.Equal(theirs[:], a.proof("server", ns, nc)) {
		return errors.New("the peer does not hold the shared secret (wrong proof)")
	}
	return nil
}
