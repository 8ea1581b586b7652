// device.go lets callers hand the data path GPU memory. A part of an object
// that lives on a device is staged through pinned host memory: copied off
// the device right before a write, onto it right after a read, with the
// CUDA driver (gostore/gpu). Host parts move as always.
package client

import (
	"os"
	"strconv"
	"sync"

	"github.com/gostore/gostore/gostore/alloc"
	"github.com/gostore/gostore/gostore/gpu"
	"github.com/gostore/gostore/gostore/wire"
)

// DevicePart is a piece of a caller's object in GPU memory: part Index of
// the object's scatter list (left nil there) is Size bytes at device
// address Ptr on GPU Device.
type DevicePart struct {
	Index  int
	Ptr    uint64
	Size   uint64
	Device int
}

// DeviceOf returns the GPU holding ptr, or -1 for host memory (and always
// -1 without a CUDA driver).
func DeviceOf(ptr uint64) int {
	if k, dev := gpu.PointerKind(ptr); k == gpu.DeviceMem {
		return dev
	}
	return -1
}

// defaultBounceArena is the pinned memory kept for staging device parts;
// larger batches pin more for the call. GOSTORE_GPU_BOUNCE_BYTES sets it.
const defaultBounceArena = 256 << 20

// bouncePool lends pinned host memory to device parts: ranges of one
// arena, pinned once at first use, and a pinned mapping of its own for a
// part the arena has no room for.
type bouncePool struct {
	mu    sync.Mutex
	arena *gpu.Pinned
	alloc *alloc.Allocator
}

// bounce is one loan.
type bounce struct {
	mem []byte
	own *gpu.Pinned // nil for a range of the arena
	off uint64
}

func bounceArenaSize() uint64 {
	if v, err := strconv.ParseUint(os.Getenv("GOSTORE_GPU_BOUNCE_BYTES"), 10, 64); err == nil && v > 0 {
		return v
	}
	return defaultBounceArena
}

func (p *bouncePool) get(n uint64) (bounce, error) {
	p.mu.Lock()
	if p.arena == nil {
		size := bounceArenaSize()
		if arena, err := gpu.NewPinned(size); err == nil {
			p.arena, p.alloc = arena, alloc.New(size, 4096)
		}
	}
	if p.alloc != nil {
		if off, ok := p.alloc.Alloc(n); ok {
			p.mu.Unlock()
			return bounce{mem: p.arena.Bytes()[off : off+n : off+n], off: off}, nil
		}
	}
	p.mu.Unlock()
	own, err := gpu.NewPinned(n)
	if err != nil {
		return bounce{}, wire.Errorf(wire.ErrInternal, "pinned staging of %d bytes for device memory: %v", n, err)
	}
	return bounce{mem: own.Bytes()[:n:n], own: own}, nil
}

func (p *bouncePool) put(b bounce) {
	if b.own != nil {
		b.own.Close()
		return
	}
	p.mu.Lock()
	p.alloc.Free(b.off, uint64(len(b.mem)))
	p.mu.Unlock()
}

func (p *bouncePool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.arena != nil {
		p.arena.Close()
		p.arena, p.alloc = nil, nil
	}
}

// staged is one call's loans, by object.
type staged struct {
	pool  *bouncePool
	loans [][]bounce // loans[i][k] stages part k of dev[i]
}

// stage gives every device part of object i a bounce buffer in bufs[i]
// (bufs[i] is copied, never changed in place). codes[i] is set for objects
// whose staging failed; their bufs[i] become nil.
func (p *bouncePool) stage(bufs [][][]byte, dev [][]DevicePart, fail func(i int, code wire.Code)) *staged {
	s := &staged{pool: p, loans: make([][]bounce, len(dev))}
	for i, parts := range dev {
		if len(parts) == 0 || i >= len(bufs) || bufs[i] == nil {
			continue
		}
		own := append([][]byte(nil), bufs[i]...)
		for _, part := range parts {
			b, err := p.get(part.Size)
			if err != nil || part.Index < 0 || part.Index >= len(own) {
				if err == nil {
					err = wire.Errorf(wire.ErrInvalidParams, "device part %d of a %d-part object", part.Index, len(own))
				}
				fail(i, wire.CodeOf(err))
				s.releaseOne(i)
				own = nil
				break
			}
			s.loans[i] = append(s.loans[i], b)
			own[part.Index] = b.mem
		}
		bufs[i] = own
	}
	return s
}

func (s *staged) releaseOne(i int) {
	for _, b := range s.loans[i] {
		s.pool.put(b)
	}
	s.loans[i] = nil
}

func (s *staged) release() {
	for i := range s.loans {
		s.releaseOne(i)
	}
}

// fromDevice copies object i's device parts into their bounce buffers.
func (s *staged) fromDevice(i int, parts []DevicePart) error {
	for k, part := range parts {
		if err := gpu.CopyToHost(part.Device, hostAddr(s.loans[i][k].mem), part.Ptr, part.Size); err != nil {
			return wire.Errorf(wire.ErrTransferFail, "copy %d bytes off cuda:%d at %#x: %v", part.Size, part.Device, part.Ptr, err)
		}
	}
	return nil
}

// toDevice copies object i's bounce buffers onto their device parts, as
// far as the object's written bytes reach into each (bufs: the object's
// staged scatter list): a destination larger than the object keeps the
// rest of its bytes.
func (s *staged) toDevice(i int, parts []DevicePart, bufs [][]byte, written uint64) error {
	var start uint64 // offset of bufs[j] in the object
	j := 0
	for k, part := range parts {
		for ; j < part.Index && j < len(bufs); j++ {
			start += uint64(len(bufs[j]))
		}
		if start >= written {
			return nil
		}
		n := min(part.Size, written-start)
		if err := gpu.CopyToDevice(part.Device, part.Ptr, hostAddr(s.loans[i][k].mem), n); err != nil {
			return wire.Errorf(wire.ErrTransferFail, "copy %d bytes onto cuda:%d at %#x: %v", n, part.Device, part.Ptr, err)
		}
	}
	return nil
}

func hostAddr(b []byte) uint64 { return uint64(addrOf(b)) }

func anyDevice(dev [][]DevicePart) bool {
	for _, d := range dev {
		if len(d) > 0 {
			return true
		}
	}
	return false
}

// PutBatchDevice is PutBatch (upsert: UpsertBatch) for items whose parts
// may be device memory: dev[i] lists item i's, left nil in its Parts.
func (c *Client) PutBatchDevice(items []PutItem, dev [][]DevicePart, cfg wire.ReplicaConfig, upsert bool) []wire.Code {
	start := wire.OpPutStart
	if upsert {
		start = wire.OpUpsertStart
	}
	if !anyDevice(dev) {
		return c.write(start, items, cfg)
	}
	out := make([]wire.Code, len(items))
	bufs := make([][][]byte, len(items))
	for i, it := range items {
		bufs[i] = it.Parts
	}
	s := c.bounces.stage(bufs, dev, func(i int, code wire.Code) { out[i] = code })
	defer s.release()
	var send []PutItem
	var idx []int
	for i, it := range items {
		if out[i] != wire.OK {
			continue
		}
		if i < len(dev) && len(dev[i]) > 0 {
			if err := s.fromDevice(i, dev[i]); err != nil {
				c.log.Warn("put: reading device memory failed", "key", it.Key, "err", err)
				out[i] = wire.CodeOf(err)
				continue
			}
		}
		send = append(send, PutItem{Key: it.Key, Parts: bufs[i]})
		idx = append(idx, i)
	}
	for j, code := range c.write(start, send, cfg) {
		out[idx[j]] = code
	}
	return out
}

// GetFinishDevice is GetFinish for destinations whose parts may be device
// memory: dev[i] lists object i's, left nil in dests[i].
func (c *Client) GetFinishDevice(p *Pending, dests [][][]byte, dev [][]DevicePart) []int64 {
	if !anyDevice(dev) {
		return c.GetFinish(p, dests)
	}
	leave, err := c.enter()
	if err != nil {
		c.endReads(p)
		return wire.Fill(make([]int64, len(p.res)), int64(wire.CodeOf(err)))
	}
	defer leave()
	dests = append([][][]byte(nil), dests...)
	var failed map[int]wire.Code
	s := c.bounces.stage(dests, dev, func(i int, code wire.Code) {
		if failed == nil {
			failed = map[int]wire.Code{}
		}
		failed[i] = code
	})
	defer s.release()
	out := c.finish(p, dests)
	for i, n := range out {
		if code, ok := failed[i]; ok && i < len(out) {
			out[i] = int64(code)
			continue
		}
		if n <= 0 || i >= len(dev) || len(dev[i]) == 0 {
			continue
		}
		if err := s.toDevice(i, dev[i], dests[i], uint64(n)); err != nil {
			c.log.Warn("get: writing device memory failed", "key", p.keys[i], "err", err)
			out[i] = int64(wire.CodeOf(err))
		}
	}
	return out
}
