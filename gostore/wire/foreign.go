// foreign.go names what a peer is when the first bytes it sends on a new
// connection are no gostore answer: every dialler of a gostore port (the
// master's RPC port, a client's transfer port) turns its first failed read
// into this error, so that a wrong port or a missing secret reads as what
// it is, not as the body length a header of foreign bytes would announce.

package wire

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"syscall"
)

// authMagic opens the challenge a process that requires a shared secret
// sends first on every connection (gostore/auth's handshake; repeated here
// because auth imports wire).
var authMagic = []byte("GSAUTH1\n")

// The settings that give a process what a peer asks for (docs/security.md).
const (
	secretKnobs = "GOSTORE_AUTH_SECRET_FILE, or setup's auth_secret_file; docs/security.md"
	tlsKnobs    = "GOSTORE_TLS_CA_FILE, GOSTORE_TLS_CERT_FILE and GOSTORE_TLS_KEY_FILE, or setup's tls_*_file; docs/security.md"
)

// FirstReadError is the error of a dialler whose first read from addr, on a
// connection without authentication of its own, failed with err after
// receiving first (the bytes it got, possibly none). When those bytes, or
// a close without any, say what the peer is, the error says so and names
// the setting that fixes it; otherwise err comes back unchanged. A timeout
// with nothing received stays a timeout.
func FirstReadError(addr string, first []byte, err error) error {
	switch {
	case bytes.HasPrefix(first, []byte("HTTP/")):
		line, _, _ := bytes.Cut(first, []byte("\r\n"))
		return fmt.Errorf("%s is not a gostore RPC port: it answered like HTTP (%q); is it the master's HTTP port (--metrics_port) instead of its --rpc_port?", addr, line)
	case bytes.HasPrefix(first, authMagic) || len(first) > 0 && len(first) < len(authMagic) && bytes.HasPrefix(authMagic, first):
		return fmt.Errorf("%s requires authentication with a shared secret, and this process has none: give it the pool's secret (%s)", addr, secretKnobs)
	case len(first) >= 2 && (first[0] == 0x15 || first[0] == 0x16) && first[1] == 0x03:
		return fmt.Errorf("%s speaks TLS: it requires mutual TLS, and this process has no certificate: give it one signed by the pool's CA (%s)", addr, tlsKnobs)
	case len(first) == 0 && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)):
		return fmt.Errorf("%s closed the connection without answering: it may require mutual TLS, which this process lacks (%s), or not be a gostore port: %w", addr, tlsKnobs, err)
	case len(first) > 0 && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, syscall.ECONNRESET) && !isTimeout(err):
		// A header that cannot be one (a body over MaxBody, an
		// answer to no request): bytes of some other protocol.
		return fmt.Errorf("%s is not a gostore port: its first bytes (% x) are no gostore answer (%v)", addr, first[:min(len(first), HeaderSize)], err)
	}
	return err
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}
