// A fuzz target for the header: its 64 bytes are written by another
// process into shared memory (or come over TCP as a copy), so a reader
// must get a header or an error from any bytes at any address, and what
// Load accepts must be what the package's own checks say it is.
//
// Run it for a while with:
//
//	go test -ldflags=-checklinkname=0 -run='^$' -fuzz='^FuzzPlanHeader$' -fuzztime=60s -parallel=1 ./gostore/plan

package plan

import (
	"errors"
	"math"
	"testing"
)

// FuzzPlanHeader: any bytes, at any offset from an 8-byte boundary, with
// the check word left as it is or made right (so that the fuzzer reaches
// past it: any field values a writer could publish). Load returns a
// header or an error (ErrMisplaced for too few bytes or a misaligned
// start, ErrMismatch for a check word that does not hold), never a panic.
// A header Load accepts reads back the bytes at the documented offsets,
// Expect accepts it exactly when it is the READY header asked for, Still
// sees its state and epoch, Touch keeps it valid, Reserve writes it back
// the same, and Pages agrees with its own arithmetic. Publish and Kill on
// it never panic and obey their epoch.
func FuzzPlanHeader(f *testing.F) {
	b := slot(0)
	h := sample(5)
	Reserve(b, h)
	f.Add(append([]byte(nil), b...), uint8(0), false, h.KeyHash, h.Epoch, h.Bytes)
	Publish(b, 5)
	f.Add(append([]byte(nil), b...), uint8(0), false, h.KeyHash, h.Epoch, h.Bytes)
	f.Add(append([]byte(nil), b...), uint8(3), false, h.KeyHash, h.Epoch, h.Bytes) // misaligned
	f.Add(append([]byte(nil), b...), uint8(0), false, h.KeyHash, uint32(6), h.Bytes)
	Kill(b, 5)
	f.Add(append([]byte(nil), b...), uint8(0), false, h.KeyHash, h.Epoch, h.Bytes)
	torn := append([]byte(nil), b...)
	torn[offBytes] ^= 1
	f.Add(torn, uint8(0), false, h.KeyHash, h.Epoch, h.Bytes)
	f.Add(torn, uint8(0), true, h.KeyHash, h.Epoch, h.Bytes)
	f.Add(b[:HeaderSize-1], uint8(0), true, uint64(0), uint32(0), uint64(0))
	f.Add(make([]byte, HeaderSize), uint8(0), true, uint64(0), uint32(0), uint64(0))
	big := sample(1)
	big.Bytes, big.PageSize, big.NPages = math.MaxUint64, 4096, math.MaxUint32
	Reserve(b, big)
	f.Add(append([]byte(nil), b...), uint8(0), false, big.KeyHash, big.Epoch, big.Bytes)
	f.Fuzz(func(t *testing.T, data []byte, skew uint8, fix bool, keyHash uint64, epoch uint32, bytes uint64) {
		// The bytes as they lie in memory: skew bytes past an 8-byte
		// boundary, with one extra byte after them.
		mem := slot(len(data) + 8)
		at := mem[skew%8 : int(skew%8)+len(data)]
		copy(at, data)
		if fix && len(at) >= HeaderSize {
			le.PutUint64(at[offCheck:], check(at, le.Uint32(at[offEpoch:])))
		}
		got, err := Load(at)
		misplaced := len(at) < HeaderSize || skew%8 != 0
		switch {
		case misplaced:
			if !errors.Is(err, ErrMisplaced) {
				t.Fatalf("%d bytes %d past an 8-byte boundary: %v", len(at), skew%8, err)
			}
			Touch(at, 1)
			if Still(at, got.State, got.Epoch) || Kill(at, got.Epoch) || Reserve(at, got) == nil || Publish(at, got.Epoch) == nil {
				t.Fatal("misplaced header memory was used")
			}
			return
		case le.Uint64(at[offCheck:]) != check(at, le.Uint32(at[offEpoch:])):
			if !errors.Is(err, ErrMismatch) {
				t.Fatalf("a check word that does not hold: %v", err)
			}
		case err != nil:
			t.Fatalf("a header whose check word holds refused: %v", err)
		}
		// The fields are the bytes at their documented offsets.
		want := Header{KeyHash: le.Uint64(at[offKeyHash:]), NPages: le.Uint32(at[offNPages:]),
			PageSize: le.Uint32(at[offPageSize:]), PayloadOff: le.Uint64(at[offPayloadOff:]),
			Bytes: le.Uint64(at[offBytes:]), State: State(le.Uint32(at[offState:])), Epoch: le.Uint32(at[offEpoch:]),
			LastAccess: le.Uint64(at[offLastAccess:]), Flags: le.Uint32(at[offFlags:])}
		if got != want {
			t.Fatalf("Load gave %+v, the bytes say %+v", got, want)
		}
		_ = got.State.String()
		if err != nil {
			return
		}
		// Expect takes exactly the READY header asked for.
		if e := got.Expect(got.KeyHash, got.Epoch, got.Bytes); (e == nil) != (got.State == Ready) {
			t.Fatalf("Expect of its own fields in state %v: %v", got.State, e)
		}
		if e := got.Expect(keyHash, epoch, bytes); e == nil &&
			(keyHash != got.KeyHash || epoch != got.Epoch || bytes != got.Bytes || got.State != Ready) {
			t.Fatalf("%+v accepted for (%x, %d, %d)", got, keyHash, epoch, bytes)
		}
		if !Still(at, got.State, got.Epoch) || Still(at, got.State, got.Epoch+1) || Still(at, got.State+1, got.Epoch) {
			t.Fatal("Still does not see the state and epoch Load saw")
		}
		// Touch changes the last access only, and the header stays valid.
		Touch(at, got.LastAccess+1)
		if again, err := Load(at); err != nil || again.LastAccess != got.LastAccess+1 {
			t.Fatalf("after Touch: %+v, %v", again, err)
		} else if again.LastAccess = got.LastAccess; again != got {
			t.Fatalf("Touch changed %+v to %+v", got, again)
		}
		// Reserve writes the same fields back (in state WRITING).
		fresh := slot(0)
		if err := Reserve(fresh, got); err != nil {
			t.Fatal(err)
		}
		back, err := Load(fresh)
		if want := got; err != nil || func() bool { want.State = Writing; return back != want }() {
			t.Fatalf("%+v written back and loaded as %+v (%v)", got, back, err)
		}
		// Pages: enough pages of PageSize for Bytes, and not one more,
		// wherever that count fits its uint32.
		if ps := uint64(got.PageSize); ps > 0 {
			n := uint64(Pages(got.Bytes, got.PageSize))
			if exact := got.Bytes/ps + min(got.Bytes%ps, 1); exact <= math.MaxUint32 && n != exact {
				t.Fatalf("Pages(%d, %d) = %d, want %d", got.Bytes, ps, n, exact)
			}
		}
		// Publish and Kill act on their epoch's header only.
		if Publish(at, got.Epoch+1) == nil || Kill(at, got.Epoch+1) {
			t.Fatal("another epoch's header was published or killed")
		}
		if err := Publish(at, got.Epoch); (err == nil) != (got.State == Writing) {
			t.Fatalf("publish of a %v header: %v", got.State, err)
		}
		if Kill(at, got.Epoch) == (got.State == Dead) {
			t.Fatalf("kill of a %v header", got.State)
		}
		if after, err := Load(at); err != nil || after.State != Dead {
			t.Fatalf("after Kill: %+v, %v", after, err)
		}
	})
}
