// pins.go defines Pins, the host memory page-locked for GPU copies: the
// own segment and peers' shared mappings (pinned by the Engine at their
// first direct device copy, unpinned before they are unmapped) and the
// caller's registered buffers (pinned by the client through EnsureRange).

package transfer

import (
	"log/slog"
	"sync"
)

// Pins remembers what was page-locked, by start address. Pinning happens
// once per range, at its first device copy: a process that never hands
// the store GPU memory pins nothing.
type Pins struct {
	driver Driver // nil: nothing can be pinned
	log    *slog.Logger
	mu     sync.Mutex
	m      map[uint64]bool // address → pinned (false: refused, not asked again)
}

// ensure pins mem (a mapping) once; false when it cannot be pinned.
func (h *Pins) ensure(mem []byte) bool {
	if len(mem) == 0 {
		return false
	}
	return h.EnsureRange(addrOf(mem), uint64(len(mem)), nil)
}

// EnsureRange pins [addr, addr+size) once; still (when not nil) is asked
// under the lock whether the range may be pinned at all, so a buffer being
// unregistered is never pinned after its unpin. The lock is held while
// pinning: a large segment's first pin makes other first pins wait.
func (h *Pins) EnsureRange(addr, size uint64, still func() bool) bool {
	if h.driver == nil {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if ok, seen := h.m[addr]; seen {
		return ok
	}
	if still != nil && !still() {
		return false
	}
	if h.m == nil {
		h.m = map[uint64]bool{}
	}
	err := h.driver.Pin(addr, size)
	if err != nil {
		h.log.Warn("cannot page-lock host memory; device copies of it run slower", "bytes", size, "err", err)
	}
	h.m[addr] = err == nil
	return err == nil
}

// drop unpins mem (a mapping about to be unmapped) if it was pinned.
func (h *Pins) drop(mem []byte) {
	if len(mem) > 0 {
		h.DropRange(addrOf(mem))
	}
}

// DropRange unpins the range pinned at addr, if any.
func (h *Pins) DropRange(addr uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m[addr] {
		_ = h.driver.Unpin(addr)
	}
	delete(h.m, addr)
}

// dropAll unpins everything still pinned (the engine closes: registered
// buffers must not stay locked in a process that goes on).
func (h *Pins) dropAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for addr, pinned := range h.m {
		if pinned {
			_ = h.driver.Unpin(addr)
		}
	}
	h.m = nil
}
