// grant_test.go checks Mint and Verify by tables: every field a request
// or a token may get wrong, and the decoder's fuzz target.

package grant

import (
	"bytes"
	"errors"
	"testing"

	"github.com/gostore/gostore/gostore/wire"
)

func testKey(t testing.TB, seed byte) *Key {
	t.Helper()
	k, ok := NewKey(bytes.Repeat([]byte{seed}, KeySize))
	if !ok {
		t.Fatal("NewKey refused a 32-byte key")
	}
	return k
}

func TestNewKeyWantsKeySize(t *testing.T) {
	for _, n := range []int{0, 16, 31, 33, 64} {
		if _, ok := NewKey(make([]byte, n)); ok {
			t.Errorf("NewKey accepted a %d-byte key", n)
		}
	}
}

func TestVerify(t *testing.T) {
	k, other := testKey(t, 1), testKey(t, 2)
	const now = int64(1_000_000)
	w := Fields{SegID: 7, Offset: 4096, Length: 1000, Write: true, Expiry: now + 10}
	r := w
	r.Write = false
	tok := func(k *Key, f Fields) []byte { return Mint(nil, k, f) }
	flip := func(b []byte, i int) []byte { b = bytes.Clone(b); b[i] ^= 1; return b }
	cases := []struct {
		name string
		tok  []byte
		req  Request
		now  int64
		want error
	}{
		{"write inside", tok(k, w), Request{7, 4096, 1000, true}, now, nil},
		{"write prefix", tok(k, w), Request{7, 4096, 1, true}, now, nil},
		{"write suffix", tok(k, w), Request{7, 5095, 1, true}, now, nil},
		{"empty at the end", tok(k, w), Request{7, 5096, 0, true}, now, nil},
		{"read inside", tok(k, r), Request{7, 4100, 10, false}, now, nil},
		{"any segment", tok(k, w), Request{0, 4096, 10, true}, now, nil},
		{"no token", nil, Request{7, 4096, 10, true}, now, ErrMissing},
		{"short token", tok(k, w)[:Size-1], Request{7, 4096, 10, true}, now, ErrMalformed},
		{"long token", append(tok(k, w), 0), Request{7, 4096, 10, true}, now, ErrMalformed},
		{"other version", flip(tok(k, w), 0), Request{7, 4096, 10, true}, now, ErrMalformed},
		{"unknown flag", func() []byte { b := tok(k, w); b[1] |= 2; return b }(), Request{7, 4096, 10, true}, now, ErrMalformed},
		{"reserved byte", flip(tok(k, w), 5), Request{7, 4096, 10, true}, now, ErrMalformed},
		{"other key", tok(other, w), Request{7, 4096, 10, true}, now, ErrForged},
		{"widened length", flip(tok(k, w), 25), Request{7, 4096, 10, true}, now, ErrForged},
		{"moved offset", flip(tok(k, w), 16), Request{7, 4096, 10, true}, now, ErrForged},
		{"later expiry", flip(tok(k, w), 36), Request{7, 4096, 10, true}, now, ErrForged},
		{"read turned write", func() []byte { b := tok(k, r); b[1] = flagW; return b }(), Request{7, 4096, 10, true}, now, ErrForged},
		{"bad MAC", flip(tok(k, w), 50), Request{7, 4096, 10, true}, now, ErrForged},
		{"expired", tok(k, w), Request{7, 4096, 10, true}, now + 10, ErrExpired},
		{"long expired", tok(k, w), Request{7, 4096, 10, true}, now + 1e12, ErrExpired},
		{"other segment", tok(k, w), Request{8, 4096, 10, true}, now, ErrSegment},
		{"read grant to write", tok(k, r), Request{7, 4096, 10, true}, now, ErrDirection},
		{"write grant to read back", tok(k, w), Request{7, 4096, 10, false}, now, nil},
		{"before the range", tok(k, w), Request{7, 4095, 10, true}, now, ErrRange},
		{"past the end", tok(k, w), Request{7, 4096, 1001, true}, now, ErrRange},
		{"after the range", tok(k, w), Request{7, 5097, 0, true}, now, ErrRange},
		{"wrapping request", tok(k, w), Request{7, 5000, ^uint64(0) - 100, true}, now, ErrRange},
		{"wrapping grant", tok(k, Fields{SegID: 7, Offset: ^uint64(0) - 10, Length: 100, Write: true, Expiry: now + 10}),
			Request{7, ^uint64(0) - 5, 2, true}, now, ErrRange},
	}
	for _, c := range cases {
		f, err := Verify(k, c.tok, c.req, c.now)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
			continue
		}
		if err == nil && f.SegID != 7 {
			t.Errorf("%s: fields %+v", c.name, f)
		}
	}
}

func TestErrorsCarryCodes(t *testing.T) {
	if wire.CodeOf(ErrExpired) != wire.ErrLeaseExpired {
		t.Errorf("expired: %v", wire.CodeOf(ErrExpired))
	}
	for _, err := range []error{ErrMissing, ErrMalformed, ErrForged, ErrSegment, ErrDirection, ErrRange} {
		if wire.CodeOf(err) != wire.ErrIllegalClient {
			t.Errorf("%v: %v", err, wire.CodeOf(err))
		}
	}
}

func TestMintDecodeRoundTrip(t *testing.T) {
	k := testKey(t, 3)
	for _, f := range []Fields{
		{},
		{SegID: 1, Offset: 2, Length: 3, Write: true, Expiry: 4},
		{SegID: ^uint64(0), Offset: ^uint64(0), Length: ^uint64(0), Expiry: -1},
	} {
		tok := Mint([]byte("prefix"), k, f)
		if string(tok[:6]) != "prefix" || len(tok) != 6+Size {
			t.Fatalf("Mint does not append: %q", tok)
		}
		got, err := Decode(tok[6:])
		if err != nil || got != f {
			t.Fatalf("Decode(Mint(%+v)) = %+v, %v", f, got, err)
		}
	}
}

// FuzzDecode feeds arbitrary bytes as a token: Decode and Verify never
// panic, Verify accepts only what Mint made under the key (a random token
// forging a 16-byte MAC is out of reach), and whatever Decode accepts
// re-encodes to the same first 40 bytes.
func FuzzDecode(f *testing.F) {
	k := testKey(f, 9)
	good := Mint(nil, k, Fields{SegID: 5, Offset: 64, Length: 128, Write: true, Expiry: 1 << 62})
	f.Add(good, uint64(64), uint64(128), true)
	f.Add(good[:Size-1], uint64(64), uint64(1), true)
	f.Add(Mint(nil, k, Fields{SegID: 5, Length: ^uint64(0), Expiry: 1 << 62}), uint64(1), uint64(1), false)
	f.Add([]byte{}, uint64(0), uint64(0), false)
	f.Add(bytes.Repeat([]byte{0xff}, Size), uint64(0), uint64(0), false)
	f.Fuzz(func(t *testing.T, tok []byte, off, n uint64, write bool) {
		d, derr := Decode(tok)
		if derr == nil {
			re := Mint(nil, k, d)
			if !bytes.Equal(re[:macStart], tok[:macStart]) {
				t.Fatalf("decoded %+v re-encodes differently", d)
			}
		}
		_, err := Verify(k, tok, Request{SegID: 5, Offset: off, N: n, Write: write}, 1)
		if err == nil {
			if derr != nil || !bytes.Equal(Mint(nil, k, d), tok) {
				t.Fatalf("Verify accepted a token Mint did not make: %x", tok)
			}
			if !inside(off, n, d.Offset, d.Length) || (write && !d.Write) {
				t.Fatalf("Verify accepted [%d,+%d) write=%v under %+v", off, n, write, d)
			}
		}
	})
}
