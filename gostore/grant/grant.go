// grant.go defines Fields, Key, Mint, Verify and the token's decoder.

package grant

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"hash"
	"sync"

	"github.com/gostore/gostore/gostore/wire"
)

const (
	// KeySize is a segment key's length.
	KeySize = 32
	// Size is a token's length.
	Size = 56

	version  = 1
	macStart = 40
	macSize  = Size - macStart
	flagW    = 1
)

var le = binary.LittleEndian

// Fields are what a grant says: Length bytes of segment SegID from Offset,
// for writing and reading back (Write) or only reading, until Expiry (unix
// nanoseconds).
type Fields struct {
	SegID  uint64
	Offset uint64
	Length uint64
	Write  bool
	Expiry int64
}

// Request is what a peer asks of a segment: N bytes at Offset, in one
// direction.
type Request struct {
	SegID  uint64
	Offset uint64
	N      uint64
	Write  bool
}

// Error is why Verify refused a token; it carries the contract's code
// (wire.Coded): ErrLeaseExpired for an expired grant, ErrIllegalClient for
// anything else (the peer holds no right to that range).
type Error struct {
	code wire.Code
	msg  string
}

func (e *Error) Error() string       { return "grant: " + e.msg }
func (e *Error) WireCode() wire.Code { return e.code }

// The reasons Verify refuses a token.
var (
	ErrMissing   = &Error{wire.ErrIllegalClient, "no grant"}
	ErrMalformed = &Error{wire.ErrIllegalClient, "malformed token"}
	ErrForged    = &Error{wire.ErrIllegalClient, "MAC does not match the segment's key"}
	ErrExpired   = &Error{wire.ErrLeaseExpired, "expired"}
	ErrSegment   = &Error{wire.ErrIllegalClient, "granted for another segment"}
	ErrDirection = &Error{wire.ErrIllegalClient, "granted for the other direction"}
	ErrRange     = &Error{wire.ErrIllegalClient, "range not inside the granted one"}
)

// Key is a segment's key, ready to sign: safe for concurrent use.
type Key struct {
	macs sync.Pool // hash.Hash: HMAC-SHA256 under the key, Reset before use
}

// NewKey returns the Key of secret, which must be KeySize bytes (a key of
// another length is a caller's bug or a damaged record: nil, false).
func NewKey(secret []byte) (*Key, bool) {
	if len(secret) != KeySize {
		return nil, false
	}
	s := append([]byte(nil), secret...)
	k := &Key{}
	// hmac's Reset restores the keyed state it saved: a pooled MAC costs
	// two SHA-256 blocks per token instead of four.
	k.macs.New = func() any { return hmac.New(sha256.New, s) }
	return k, true
}

func (k *Key) mac(tok []byte) (sum [sha256.Size]byte) {
	m := k.macs.Get().(hash.Hash)
	m.Reset()
	m.Write(tok[:macStart])
	m.Sum(sum[:0])
	k.macs.Put(m)
	return sum
}

// Mint appends the token of f under k to dst and returns it. A zero-length
// range or one that wraps is minted as asked: Verify never accepts a
// request outside it.
func Mint(dst []byte, k *Key, f Fields) []byte {
	var t [Size]byte
	t[0] = version
	if f.Write {
		t[1] = flagW
	}
	le.PutUint64(t[8:], f.SegID)
	le.PutUint64(t[16:], f.Offset)
	le.PutUint64(t[24:], f.Length)
	le.PutUint64(t[32:], uint64(f.Expiry))
	sum := k.mac(t[:])
	copy(t[macStart:], sum[:macSize])
	return append(dst, t[:]...)
}

// Decode reads a token's fields without checking its MAC: for logs and
// for the transfer server's cache of tokens it already verified.
func Decode(tok []byte) (Fields, error) {
	if len(tok) == 0 {
		return Fields{}, ErrMissing
	}
	if len(tok) != Size || tok[0] != version || tok[1]&^flagW != 0 {
		return Fields{}, ErrMalformed
	}
	for _, b := range tok[2:8] {
		if b != 0 {
			return Fields{}, ErrMalformed
		}
	}
	return Fields{SegID: le.Uint64(tok[8:]), Offset: le.Uint64(tok[16:]), Length: le.Uint64(tok[24:]),
		Write: tok[1]&flagW != 0, Expiry: int64(le.Uint64(tok[32:]))}, nil
}

// Verify checks that tok, made under k, allows r at now (unix
// nanoseconds), and returns its fields. r.SegID 0 accepts any segment (an
// owner not yet told its id at the master: no grant for it exists yet
// but under a fresh key).
func Verify(k *Key, tok []byte, r Request, now int64) (Fields, error) {
	f, err := Authentic(k, tok)
	if err != nil {
		return f, err
	}
	return f, Allows(f, r, now)
}

// Authentic decodes tok and checks that it was made under k (whatever it
// allows): Verify's first half, for a caller that caches authentic tokens.
func Authentic(k *Key, tok []byte) (Fields, error) {
	f, err := Decode(tok)
	if err != nil {
		return f, err
	}
	sum := k.mac(tok)
	if subtle.ConstantTimeCompare(sum[:macSize], tok[macStart:]) != 1 {
		return f, ErrForged
	}
	return f, nil
}

// Allows checks that verified fields f allow r at now (Verify's checks
// after the MAC).
func Allows(f Fields, r Request, now int64) error {
	switch {
	case now >= f.Expiry:
		return ErrExpired
	case r.SegID != 0 && f.SegID != r.SegID:
		return ErrSegment
	case r.Write && !f.Write:
		return ErrDirection // a write grant reads its range back, a read grant never writes
	case !inside(r.Offset, r.N, f.Offset, f.Length):
		return ErrRange
	}
	return nil
}

// inside reports whether [off, off+n) lies within [start, start+length),
// without overflowing.
func inside(off, n, start, length uint64) bool {
	if start+length < start { // a wrapping grant covers nothing
		return false
	}
	return off >= start && off-start <= length && n <= length-(off-start)
}
