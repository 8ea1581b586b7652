// doc.go defines the package documentation of auth.

// Package auth owns who may talk to a gostore process: the master's RPC
// port, a client's transfer ports and the HTTP endpoints. It turns the
// configuration (Options: certificate files or a shared-secret file) into
// one value, *Auth, that secures connections on both sides, guards
// HTTP handlers, and makes HTTP requests that pass another process's guard
// (HTTPClient, Authorize: a standby master fetching its leader's snapshot). It knows nothing of the protocols it protects: callers
// hand it a net.Conn right after accept or dial and use what it returns.
//
// # Modes
//
//   - Mutual TLS (CAFile, CertFile, KeyFile): every connection is TLS 1.3;
//     each side presents a certificate signed by the CA and checks the
//     other's against it. Names are not checked: in a pool of hosts that
//     come and go, membership is "holds a certificate our CA signed". The
//     bytes are encrypted.
//   - Shared secret (SecretFile): a challenge-response on each connection
//     proves to both sides that the other holds the secret (HMAC-SHA256
//     over both sides' random nonces, so nothing replayable crosses the
//     wire); after it the connection carries plain bytes. It
//     authenticates and does not encrypt: for networks that are private
//     but shared.
//   - Off (nil *Auth): connections pass through untouched. Setup refuses
//     it on an address other than loopback unless the operator says so
//     (AllowInsecure): see Check.
//
// # Invariants
//
//   - A server-side handshake is bounded by HandshakeTimeout; a peer that
//     sends nothing, or not the expected first bytes, is refused with an
//     error naming what it did, and the caller closes the connection.
//   - The secret and keys never leave the process, and are never logged.
//   - A nil *Auth is valid everywhere and means off.
//
// # Caller's duties
//
// Run Server in the connection's own goroutine (never in an accept loop:
// a slow peer would stall every other), log its error once and close the
// connection. Pass Client's result on in place of the dialled connection.
package auth
