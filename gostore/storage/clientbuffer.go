package storage

import (
	"fmt"
	"sync"
	"time"

	"github.com/gostore/gostore/gostore/alloc"
	"github.com/gostore/gostore/gostore/storage/fileio"
	"github.com/gostore/gostore/gostore/wire"
)

// ClientBuffer is the staging area of the SSD load path: objects read from
// disk for another client wait here until that client has pulled them with
// the transfer engine. Space is leased per batch; the reader releases its
// lease when done, and a lease it forgets is reclaimed after the GC TTL.
//
// A reader must not trust bytes it finished pulling later than the TTL
// after it asked for them: by then the space may hold another batch. The
// reader side enforces that (as it does for the master's leases).
type ClientBuffer struct {
	mem []byte
	ttl time.Duration
	now func() time.Time

	mu     sync.Mutex
	space  *alloc.Allocator // in fileio.Alignment units, so staged reads can be O_DIRECT
	leases map[uint64]*stagedBatch
	nextID uint64
}

// stagedBatch is one leased batch: the ranges it holds and when they lapse.
type stagedBatch struct {
	ranges  []stagedRange
	expires time.Time
}

type stagedRange struct{ off, size uint64 }

// ErrBufferFull: the staging buffer has no room for an object right now.
var ErrBufferFull = codedError("storage: staging buffer full", wire.ErrFileInvalidBuffer)

// NewClientBuffer manages mem (page aligned; the caller keeps it mapped
// while the buffer is used) with leases that lapse after ttl. now is the
// clock (nil: time.Now).
func NewClientBuffer(mem []byte, ttl time.Duration, now func() time.Time) *ClientBuffer {
	if now == nil {
		now = time.Now
	}
	capacity := roundDownAlign(uint64(len(mem)))
	return &ClientBuffer{
		mem: mem, ttl: ttl, now: now,
		space:  alloc.New(capacity, fileio.Alignment),
		leases: make(map[uint64]*stagedBatch),
	}
}

// TTL is how long a lease lives without a release.
func (b *ClientBuffer) TTL() time.Duration { return b.ttl }

// Lease reserves room for objects of the given sizes under one batch id.
// offs[i] is where object i goes, or errs[i] is ErrBufferFull; a batch with
// no room at all still gets an id (releasing it is harmless). Zero sizes
// get no room and no error.
func (b *ClientBuffer) Lease(sizes []uint64) (id uint64, offs []uint64, errs []error) {
	offs = make([]uint64, len(sizes))
	errs = make([]error, len(sizes))
	b.mu.Lock()
	defer b.mu.Unlock()
	b.nextID++
	id = b.nextID
	lease := &stagedBatch{expires: b.now().Add(b.ttl)}
	for i, n := range sizes {
		if n == 0 {
			continue
		}
		off, ok := b.space.Alloc(n)
		if !ok {
			errs[i] = fmt.Errorf("%w: %d bytes wanted, %d in use of %d", ErrBufferFull, n, b.space.Used(), b.space.Capacity())
			continue
		}
		offs[i] = off
		lease.ranges = append(lease.ranges, stagedRange{off, n})
	}
	b.leases[id] = lease
	return id, offs, errs
}

// Slice is the staged range [off, off+n) of the buffer; its capacity
// reaches the end of the leased room (n rounded up to fileio.Alignment),
// which a padded load may overwrite.
func (b *ClientBuffer) Slice(off, n uint64) []byte {
	end := min(off+roundUpAlign(n), uint64(len(b.mem)))
	return b.mem[off : off+n : end]
}

// Drop frees one range of a lease early (its object failed to stage), so
// the space is not held for the TTL. It is a no-op for unknown ranges.
func (b *ClientBuffer) Drop(id, off uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	lease, ok := b.leases[id]
	if !ok {
		return
	}
	for i, r := range lease.ranges {
		if r.off == off {
			b.free(r)
			lease.ranges = append(lease.ranges[:i], lease.ranges[i+1:]...)
			return
		}
	}
}

// Release ends a lease; it reports whether the lease was still held.
func (b *ClientBuffer) Release(id uint64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	lease, ok := b.leases[id]
	if !ok {
		return false
	}
	b.releaseLocked(id, lease)
	return true
}

// GC reclaims leases past their TTL and returns how many it reclaimed.
func (b *ClientBuffer) GC() int {
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for id, lease := range b.leases {
		if !now.Before(lease.expires) {
			b.releaseLocked(id, lease)
			n++
		}
	}
	return n
}

// Usage is the bytes and batches currently leased.
func (b *ClientBuffer) Usage() (bytes uint64, batches int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.space.Used(), len(b.leases)
}

func (b *ClientBuffer) releaseLocked(id uint64, lease *stagedBatch) {
	for _, r := range lease.ranges {
		b.free(r)
	}
	delete(b.leases, id)
}

func (b *ClientBuffer) free(r stagedRange) {
	if err := b.space.Free(r.off, r.size); err != nil {
		panic(fmt.Sprintf("storage: staging buffer bookkeeping broken: %v", err))
	}
}
