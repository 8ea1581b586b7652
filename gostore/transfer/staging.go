// staging.go defines how device parts cross a route that cannot reach
// them (TCP, UCX without CUDA, a mapping that cannot be page-locked, the SSD tier): through
// host memory lent by a bouncePool (pinned for GPU parts when a driver is
// there), copied off the part before a write, onto it after a read.

package transfer

import (
	"sync"

	"github.com/gostore/gostore/gostore/alloc"
	"github.com/gostore/gostore/gostore/wire"
)

// bouncePool lends host memory to device parts: ranges of one arena,
// made at first use, and an allocation of its own for a part the arena has
// no room for. With a driver that can pin, the memory is pinned; else
// (see newMem) it is plain memory. A loan never fails.
type bouncePool struct {
	driver Driver
	size   uint64 // the arena's
	mu     sync.Mutex
	arena  Pinned
	alloc  *alloc.Allocator
}

// bounce is one loan.
type bounce struct {
	mem []byte
	own Pinned // nil for a range of the arena
	off uint64
}

func (p *bouncePool) get(n uint64) bounce {
	p.mu.Lock()
	if p.arena == nil && p.size > 0 {
		p.arena, p.alloc = p.newMem(p.size), alloc.New(p.size, 4096)
	}
	if p.alloc != nil {
		if off, ok := p.alloc.Alloc(n); ok {
			p.mu.Unlock()
			return bounce{mem: p.arena.Bytes()[off : off+n : off+n], off: off}
		}
	}
	p.mu.Unlock()
	own := p.newMem(n)
	return bounce{mem: own.Bytes()[:n:n], own: own}
}

// newMem returns n bytes for bounces: pinned by the driver, or plain when
// there is no driver or it cannot pin. The client always passes a driver,
// one that fails every call on a host without CUDA; parts in other
// processes' memory (gostore-client's applications reading over TCP) need
// no pinning, and a GPU part copies from pageable memory too.
func (p *bouncePool) newMem(n uint64) Pinned {
	if p.driver != nil {
		if m, err := p.driver.NewPinned(n); err == nil {
			return m
		}
	}
	return plainMem(make([]byte, n))
}

// plainMem is bounce memory without a driver.
type plainMem []byte

func (m plainMem) Bytes() []byte { return m }
func (plainMem) Close() error    { return nil }

func (p *bouncePool) put(b bounce) {
	if b.own != nil {
		_ = b.own.Close()
		return
	}
	p.mu.Lock()
	p.alloc.Free(b.off, uint64(len(b.mem)))
	p.mu.Unlock()
}

// close frees the arena; loans still out must not be used after it.
func (p *bouncePool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.arena != nil {
		_ = p.arena.Close()
		p.arena, p.alloc = nil, nil
	}
}

// staged is one op whose device parts sit in bounces.
type staged struct {
	i     int // the op's index in the batch
	op    *Op // the caller's op
	loans []bounce
}

// staging tracks the ops of one Do or Staged call whose device parts
// were staged.
type staging struct{ ops []staged }

// stage returns ops with each ops[i], i in idx, that has device parts
// replaced by a host-only copy whose placeholders are bounces (filled from
// the GPU for a write), but for the ops direct (when not nil) says the
// route reaches as they are. ops itself is returned, unchanged, when no
// op is staged; otherwise a copy. An op that cannot be staged gets its
// error in errs and is left out of the returned index list.
func (st *staging) stage(e *Engine, ops []Op, idx []int, errs []error, direct func(*Op) bool) ([]Op, []int) {
	out, keep := ops, idx
	copied := false
	for k, i := range idx {
		if len(ops[i].Device) == 0 || direct != nil && direct(&ops[i]) {
			if copied {
				keep = append(keep, i)
			}
			continue
		}
		if !copied {
			copied = true
			out = append([]Op(nil), ops...)
			keep = append([]int(nil), idx[:k]...)
		}
		host, loans, err := e.stageOp(&ops[i])
		if err != nil {
			errs[i] = err
			continue
		}
		out[i] = host
		keep = append(keep, i)
		st.ops = append(st.ops, staged{i: i, op: &ops[i], loans: loans})
	}
	return out, keep
}

// stageOp stages op's device parts: a host-only op over the bounces.
func (e *Engine) stageOp(op *Op) (Op, []bounce, error) {
	bufs := append([][]byte(nil), op.Bufs...)
	loans := make([]bounce, 0, len(op.Device))
	for _, d := range op.Device {
		b := e.bounces.get(d.Size)
		loans = append(loans, b)
		bufs[d.Index] = b.mem
		if op.Write && d.Size > 0 {
			if err := e.fromPart(d, b.mem); err != nil {
				e.bounces.putAll(loans)
				return Op{}, nil, wire.Errorf(wire.ErrTransferFail, "copy %d bytes off %v: %v", d.Size, d, err)
			}
		}
	}
	e.stagedParts.Add(uint64(len(op.Device)))
	host := *op
	host.Bufs, host.Device = bufs, nil
	return host, loans, nil
}

// unstageRead copies a staged read's bounces onto its device parts.
func (e *Engine) unstageRead(op *Op, loans []bounce) error {
	for k, d := range op.Device {
		if d.Size == 0 {
			continue
		}
		if err := e.toPart(d, loans[k].mem); err != nil {
			return wire.Errorf(wire.ErrTransferFail, "copy %d bytes onto %v: %v", d.Size, d, err)
		}
	}
	return nil
}

func (p *bouncePool) putAll(loans []bounce) {
	for _, b := range loans {
		p.put(b)
	}
}

// finishReads copies every staged read that succeeded onto its device
// parts; a failed copy fails the op.
func (st *staging) finishReads(e *Engine, errs []error) {
	for _, s := range st.ops {
		if !s.op.Write && errs[s.i] == nil {
			errs[s.i] = e.unstageRead(s.op, s.loans)
		}
	}
}

// release gives every loan back.
func (st *staging) release(e *Engine) {
	for _, s := range st.ops {
		e.bounces.putAll(s.loans)
	}
	st.ops = nil
}

// stagedCopy runs copy on op with its device parts staged: a route that
// reaches host memory it cannot page-lock.
func (e *Engine) stagedCopy(op *Op, copy func(*Op) error) error {
	host, loans, err := e.stageOp(op)
	if err != nil {
		return err
	}
	defer e.bounces.putAll(loans)
	if err := copy(&host); err != nil {
		return err
	}
	if !op.Write {
		return e.unstageRead(op, loans)
	}
	return nil
}
