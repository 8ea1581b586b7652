package plan

import (
	"bytes"
	"errors"
	"sync"
	"testing"
	"unsafe"
)

// slot returns an 8-byte aligned header followed by a payload of n bytes.
func slot(n int) []byte {
	b := make([]byte, HeaderSize+n+8)
	skip := (8 - int(uintptr(unsafe.Pointer(&b[0]))%8)) % 8
	return b[skip : skip+HeaderSize+n]
}

func sample(epoch uint32) Header {
	return Header{KeyHash: KeyHash("sess:42:kv:L0"), NPages: 3, PageSize: 4096, PayloadOff: 1 << 20,
		Bytes: 10000, Epoch: epoch, Flags: 7}
}

func TestStateMachine(t *testing.T) {
	b := slot(0)
	h := sample(5)
	if err := Reserve(b, h); err != nil {
		t.Fatal(err)
	}
	got, err := Load(b)
	if err != nil || got.State != Writing || got.KeyHash != h.KeyHash || got.Bytes != h.Bytes ||
		got.PayloadOff != h.PayloadOff || got.NPages != 3 || got.PageSize != 4096 || got.Flags != 7 || got.Epoch != 5 {
		t.Fatalf("after reserve: %+v %v", got, err)
	}
	if err := got.Expect(h.KeyHash, 5, h.Bytes); !errors.Is(err, ErrNotReady) {
		t.Fatalf("WRITING header accepted: %v", err)
	}
	if err := Publish(b, 4); !errors.Is(err, ErrStale) {
		t.Fatalf("publish with another epoch: %v", err)
	}
	if err := Publish(b, 5); err != nil {
		t.Fatal(err)
	}
	if err := Publish(b, 5); !errors.Is(err, ErrStale) {
		t.Fatalf("second publish: %v", err)
	}
	got, _ = Load(b)
	if err := got.Expect(h.KeyHash, 5, h.Bytes); err != nil {
		t.Fatalf("READY header refused: %v", err)
	}
	for _, tc := range []struct {
		hash  uint64
		epoch uint32
		bytes uint64
		want  error
	}{{h.KeyHash, 6, h.Bytes, ErrStale}, {h.KeyHash + 1, 5, h.Bytes, ErrMismatch}, {h.KeyHash, 5, 9, ErrMismatch}} {
		if err := got.Expect(tc.hash, tc.epoch, tc.bytes); !errors.Is(err, tc.want) {
			t.Errorf("Expect(%x, %d, %d) = %v, want %v", tc.hash, tc.epoch, tc.bytes, err, tc.want)
		}
	}
	if !Still(b, Ready, 5) || Still(b, Ready, 6) {
		t.Fatal("Still")
	}
	if Kill(b, 6) || !Kill(b, 5) || Kill(b, 5) {
		t.Fatal("Kill must take its own epoch's header once")
	}
	got, _ = Load(b)
	if got.State != Dead || got.Expect(h.KeyHash, 5, h.Bytes) == nil || Still(b, Ready, 5) {
		t.Fatalf("after kill: %+v", got)
	}
	// Reuse of the slot under a new epoch: an old reader's view is stale.
	if err := Reserve(b, sample(9)); err != nil {
		t.Fatal(err)
	}
	Publish(b, 9)
	got, _ = Load(b)
	if !errors.Is(got.Expect(h.KeyHash, 5, h.Bytes), ErrStale) {
		t.Fatal("a reused slot passed for the old object")
	}
}

func TestLoadRefusesWhatIsNotAHeader(t *testing.T) {
	b := slot(0)
	Reserve(b, sample(1))
	b[offBytes] ^= 1 // a torn or foreign header
	if _, err := Load(b); !errors.Is(err, ErrMismatch) {
		t.Fatalf("corrupt header: %v", err)
	}
	if _, err := Load(make([]byte, 10)); !errors.Is(err, ErrMisplaced) {
		t.Fatal("short header accepted")
	}
	odd := slot(16)[1 : 1+HeaderSize]
	if err := Reserve(odd, sample(1)); !errors.Is(err, ErrMisplaced) {
		t.Fatal("misaligned header accepted")
	}
	if Pages(0, 4096) != 0 || Pages(1, 4096) != 1 || Pages(8192, 4096) != 2 || Pages(8193, 4096) != 3 || Pages(5, 0) != 0 {
		t.Fatal("Pages")
	}
}

// A reader that sees READY sees every payload byte written before the
// publish (run with -race: the release/acquire pair orders them).
func TestPublishOrdersThePayload(t *testing.T) {
	const n = 1 << 16
	for round := 0; round < 20; round++ {
		b := slot(n)
		Reserve(b, sample(uint32(round)))
		payload := b[HeaderSize:]
		var wg sync.WaitGroup
		for r := 0; r < 3; r++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					h, err := Load(b)
					if err == nil && h.State == Ready {
						want := bytes.Repeat([]byte{byte(round + 1)}, n)
						if !bytes.Equal(payload, want) {
							t.Error("READY seen before the payload")
						}
						return
					}
				}
			}()
		}
		for i := range payload {
			payload[i] = byte(round + 1)
		}
		if err := Publish(b, uint32(round)); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
	}
}
