// header.go defines the 64-byte object header, its states and the atomic
// loads and stores that publish and check it.

package plan

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"sync/atomic"
	"unsafe"
)

// HeaderSize is the header's size; payloads start right after it.
const HeaderSize = 64

// State is a header's state.
type State uint32

const (
	Reserved State = iota
	Writing
	Ready
	Dead
)

func (s State) String() string {
	switch s {
	case Reserved:
		return "RESERVED"
	case Writing:
		return "WRITING"
	case Ready:
		return "READY"
	case Dead:
		return "DEAD"
	}
	return fmt.Sprintf("State(%d)", uint32(s))
}

// Field offsets.
const (
	offKeyHash    = 0
	offNPages     = 8
	offPageSize   = 12
	offPayloadOff = 16
	offBytes      = 24
	offState      = 32
	offEpoch      = 36
	offLastAccess = 40
	offFlags      = 48
	offCheck      = 56
)

// Errors of the header checks.
var (
	ErrNotReady  = errors.New("plan: object is not READY")
	ErrStale     = errors.New("plan: slot was reclaimed or reused (epoch or state changed)")
	ErrMismatch  = errors.New("plan: header does not describe this object")
	ErrMisplaced = errors.New("plan: header memory is not 64 bytes at an 8-byte aligned address")
)

var le = binary.LittleEndian

// Header is a header's fields (a decoded copy).
type Header struct {
	KeyHash    uint64
	NPages     uint32
	PageSize   uint32
	PayloadOff uint64
	Bytes      uint64
	State      State
	Epoch      uint32
	LastAccess uint64
	Flags      uint32
}

// KeyHash is the hash headers carry for key.
func KeyHash(key string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(key))
	return h.Sum64()
}

// Pages is how many pages of pageSize bytes hold n bytes.
func Pages(n uint64, pageSize uint32) uint32 {
	if pageSize == 0 {
		return 0
	}
	return uint32((n + uint64(pageSize) - 1) / uint64(pageSize))
}

func check(b []byte, epoch uint32) uint64 {
	h := fnv.New64a()
	h.Write(b[:offState])
	var e [4]byte
	le.PutUint32(e[:], epoch)
	h.Write(e[:])
	return h.Sum64()
}

func words(b []byte) error {
	if len(b) < HeaderSize || uintptr(unsafe.Pointer(unsafe.SliceData(b)))%8 != 0 {
		return ErrMisplaced
	}
	return nil
}

func u32(b []byte, off int) *uint32 { return (*uint32)(unsafe.Pointer(&b[off])) }
func u64(b []byte, off int) *uint64 { return (*uint64)(unsafe.Pointer(&b[off])) }

// Reserve writes h into b (the header's 64 bytes in the owner's memory) in
// state WRITING: every field first, the state last with release semantics,
// so a reader that sees WRITING also sees the rest.
func Reserve(b []byte, h Header) error {
	if err := words(b); err != nil {
		return err
	}
	atomic.StoreUint32(u32(b, offState), uint32(Reserved))
	le.PutUint64(b[offKeyHash:], h.KeyHash)
	le.PutUint32(b[offNPages:], h.NPages)
	le.PutUint32(b[offPageSize:], h.PageSize)
	le.PutUint64(b[offPayloadOff:], h.PayloadOff)
	le.PutUint64(b[offBytes:], h.Bytes)
	atomic.StoreUint32(u32(b, offEpoch), h.Epoch)
	atomic.StoreUint64(u64(b, offLastAccess), h.LastAccess)
	le.PutUint32(b[offFlags:], h.Flags)
	le.PutUint32(b[offFlags+4:], 0)
	le.PutUint64(b[offCheck:], check(b, h.Epoch))
	atomic.StoreUint32(u32(b, offState), uint32(Writing))
	return nil
}

// Publish flips a WRITING header of the given epoch to READY with release
// semantics: every payload byte written before the call is visible to a
// reader that loads READY. It fails (and changes nothing) when the header
// is not that epoch's WRITING header.
func Publish(b []byte, epoch uint32) error {
	if err := words(b); err != nil {
		return err
	}
	if atomic.LoadUint32(u32(b, offEpoch)) != epoch {
		return ErrStale
	}
	if !atomic.CompareAndSwapUint32(u32(b, offState), uint32(Writing), uint32(Ready)) {
		return fmt.Errorf("%w: state %v", ErrStale, State(atomic.LoadUint32(u32(b, offState))))
	}
	return nil
}

// Kill flips a header of the given epoch to DEAD (from any state): its
// slot is about to be reclaimed. It reports whether it did.
func Kill(b []byte, epoch uint32) bool {
	if words(b) != nil || atomic.LoadUint32(u32(b, offEpoch)) != epoch {
		return false
	}
	for {
		s := atomic.LoadUint32(u32(b, offState))
		if State(s) == Dead {
			return false
		}
		if atomic.CompareAndSwapUint32(u32(b, offState), s, uint32(Dead)) {
			return true
		}
	}
}

// Load decodes the header at b; state and epoch are loaded with acquire
// semantics, then the rest.
func Load(b []byte) (Header, error) {
	if err := words(b); err != nil {
		return Header{}, err
	}
	h := Header{
		State:      State(atomic.LoadUint32(u32(b, offState))),
		Epoch:      atomic.LoadUint32(u32(b, offEpoch)),
		LastAccess: atomic.LoadUint64(u64(b, offLastAccess)),
	}
	h.KeyHash = le.Uint64(b[offKeyHash:])
	h.NPages = le.Uint32(b[offNPages:])
	h.PageSize = le.Uint32(b[offPageSize:])
	h.PayloadOff = le.Uint64(b[offPayloadOff:])
	h.Bytes = le.Uint64(b[offBytes:])
	h.Flags = le.Uint32(b[offFlags:])
	if le.Uint64(b[offCheck:]) != check(b, h.Epoch) {
		return h, ErrMismatch
	}
	return h, nil
}

// Expect checks that h is the READY header of the object a reader expects
// (key hash, epoch, size); ErrNotReady when it is not READY yet,
// ErrStale when it belongs to another epoch or is DEAD.
func (h Header) Expect(keyHash uint64, epoch uint32, bytes uint64) error {
	switch {
	case h.Epoch != epoch || h.State == Dead:
		return ErrStale
	case h.KeyHash != keyHash || h.Bytes != bytes:
		return ErrMismatch
	case h.State != Ready:
		return ErrNotReady
	}
	return nil
}

// Still reports whether the header at b still has the state and epoch a
// reader saw before copying the payload (the seqlock's second look).
func Still(b []byte, state State, epoch uint32) bool {
	return words(b) == nil && State(atomic.LoadUint32(u32(b, offState))) == state &&
		atomic.LoadUint32(u32(b, offEpoch)) == epoch
}

// Touch records a read (best effort, relaxed).
func Touch(b []byte, nowNanos uint64) {
	if words(b) == nil {
		atomic.StoreUint64(u64(b, offLastAccess), nowNanos)
	}
}
