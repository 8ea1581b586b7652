// authtest.go writes throw-away CAs, certificates and secrets for tests of
// code that authenticates.

// Package authtest makes the files gostore/auth reads, for tests: a CA,
// certificates it signs, a shared secret. Keys are ECDSA P-256 and the
// certificates last a day.
package authtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"time"

	"github.com/gostore/gostore/gostore/auth"
)

// TB is what the helpers need of a test: testing.TB has it, and a
// benchmark command passes its own.
type TB interface {
	Helper()
	Fatal(args ...any)
}

// CA is a certificate authority living in a test's directory.
type CA struct {
	dir  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// File is the CA certificate's PEM file.
	File string
}

// NewCA makes a CA named name under dir.
func NewCA(tb TB, dir, name string) *CA {
	tb.Helper()
	key := newKey(tb)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &CA{dir: dir, cert: cert, key: key, File: filepath.Join(dir, name+"-ca.pem")}
	writePEM(tb, ca.File, "CERTIFICATE", der)
	return ca
}

// Issue makes a certificate for name signed by the CA and returns the
// auth.Options that present it and trust the CA.
func (ca *CA) Issue(tb TB, name string) auth.Options {
	tb.Helper()
	key := newKey(tb)
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		tb.Fatal(err)
	}
	o := auth.Options{CAFile: ca.File, CertFile: filepath.Join(ca.dir, name+".pem"), KeyFile: filepath.Join(ca.dir, name+"-key.pem")}
	writePEM(tb, o.CertFile, "CERTIFICATE", der)
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		tb.Fatal(err)
	}
	writePEM(tb, o.KeyFile, "EC PRIVATE KEY", kder)
	return o
}

// Secret writes secret to a file under dir and returns the options that
// use it.
func Secret(tb TB, dir, name, secret string) auth.Options {
	tb.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(secret+"\n"), 0o600); err != nil {
		tb.Fatal(err)
	}
	return auth.Options{SecretFile: p}
}

// Peers are the options of a pool's accepting and dialling members and of
// a stranger: one holding another secret, or a certificate another CA
// signed.
type Peers struct{ Server, Client, Stranger auth.Options }

// Modes makes, under dir, Peers for each mode: "secret" and "mtls".
func Modes(tb TB, dir string) map[string]Peers {
	tb.Helper()
	ca := NewCA(tb, dir, "pool")
	pool := Secret(tb, dir, "pool-secret", "0123456789abcdef-pool")
	return map[string]Peers{
		"secret": {pool, pool, Secret(tb, dir, "other-secret", "0123456789abcdef-other")},
		"mtls":   {ca.Issue(tb, "server"), ca.Issue(tb, "client"), NewCA(tb, dir, "rogue").Issue(tb, "stranger")},
	}
}

// Must is auth.New that fails tb on error.
func Must(tb TB, o auth.Options) *auth.Auth {
	tb.Helper()
	a, err := auth.New(o)
	if err != nil {
		tb.Fatal(err)
	}
	return a
}

func newKey(tb TB) *ecdsa.PrivateKey {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	return key
}

func writePEM(tb TB, path, typ string, der []byte) {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		tb.Fatal(err)
	}
}
