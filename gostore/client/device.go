// device.go lets callers hand the data path GPU memory. A part of an object
// that lives on a device is staged through pinned host memory: copied off
// the device right before a write, onto it right after a read, with the
// CUDA driver (gostore/gpu). Host parts move as always.

package client

import (
	"log/slog"
	"sync"

	"github.com/gostore/gostore/gostore/alloc"
	"github.com/gostore/gostore/gostore/gpu"
	"github.com/gostore/gostore/gostore/transfer"
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
// larger batches pin more for the call. Config.GPUBounceBytes sets it.
const defaultBounceArena = 256 << 20

// bouncePool lends pinned host memory to device parts: ranges of one
// arena, pinned once at first use, and a pinned mapping of its own for a
// part the arena has no room for.
type bouncePool struct {
	size  uint64 // the arena's, set before first use (Config.GPUBounceBytes)
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

func (p *bouncePool) get(n uint64) (bounce, error) {
	p.mu.Lock()
	if p.arena == nil {
		size := p.size
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

// mixedCall carries one call's device parts through the put or get
// pipeline. An object's device parts move straight between the caller's
// GPU memory and a GPU segment the driver reaches (this client's own, or a
// same-host peer's opened over IPC): one copy on the GPUs. Any other
// replica (host memory, TCP, the SSD tier) gets host bytes: the device
// parts are staged through pinned memory, once per object, only then.
type mixedCall struct {
	c     *Client
	dev   [][]DevicePart // by object; nil for objects in host memory only
	loans [][]bounce     // by object, once staged: loans[i][k] stages dev[i][k]
	bufs  [][][]byte     // by object, once staged: the scatter list with the bounces in
	// staged[i]: object i's last transfer went through the bounces (a
	// read then still has to copy them onto the device).
	staged []bool
}

func (c *Client) newMixed(n int, dev [][]DevicePart) *mixedCall {
	if !anyDevice(dev) {
		return nil
	}
	return &mixedCall{c: c, dev: dev, loans: make([][]bounce, n), bufs: make([][][]byte, n), staged: make([]bool, n)}
}

func anyDevice(dev [][]DevicePart) bool {
	for _, d := range dev {
		if len(d) > 0 {
			return true
		}
	}
	return false
}

// has reports whether object i has device parts.
func (m *mixedCall) has(i int) bool { return m != nil && i < len(m.dev) && len(m.dev[i]) > 0 }

// devBytes is the length of object i's device parts.
func (m *mixedCall) devBytes(i int) uint64 {
	var n uint64
	if m.has(i) {
		for _, d := range m.dev[i] {
			n += d.Size
		}
	}
	return n
}

// hostParts returns object i's scatter list with its device parts staged
// in pinned memory (parts: the list with their placeholders); fromDevice
// copies the device bytes in (a put). Staging happens once per object.
func (m *mixedCall) hostParts(i int, parts [][]byte, fromDevice bool) ([][]byte, error) {
	if m.bufs[i] != nil {
		return m.bufs[i], nil
	}
	if _, err := m.byIndex(i, parts); err != nil {
		return nil, err
	}
	own := append([][]byte(nil), parts...)
	for _, d := range m.dev[i] {
		b, err := m.c.bounces.get(d.Size)
		if err != nil {
			m.releaseOne(i)
			return nil, err
		}
		m.loans[i] = append(m.loans[i], b)
		own[d.Index] = b.mem
		if fromDevice {
			if err := gpu.CopyToHost(d.Device, hostAddr(b.mem), d.Ptr, d.Size); err != nil {
				m.releaseOne(i)
				return nil, wire.Errorf(wire.ErrTransferFail, "copy %d bytes off cuda:%d at %#x: %v", d.Size, d.Device, d.Ptr, err)
			}
		}
	}
	m.bufs[i] = own
	return own, nil
}

// byIndex maps object i's device parts by their place in parts, checking
// each names a distinct placeholder (a nil part) of the scatter list.
func (m *mixedCall) byIndex(i int, parts [][]byte) (map[int]DevicePart, error) {
	out := make(map[int]DevicePart, len(m.dev[i]))
	for _, d := range m.dev[i] {
		if _, twice := out[d.Index]; twice || d.Index < 0 || d.Index >= len(parts) || parts[d.Index] != nil {
			return nil, wire.Errorf(wire.ErrInvalidParams, "device part %d of a %d-part object", d.Index, len(parts))
		}
		out[d.Index] = d
	}
	return out, nil
}

// direct moves object i straight between its parts (host parts in parts,
// device parts from dev) and [off, off+size) of segment segID, when the
// driver reaches that segment; ok false otherwise. A read (size: the
// object's) fills only the object's bytes of a larger destination.
func (m *mixedCall) direct(i int, segID, off uint64, parts [][]byte, size uint64, write bool) (ok bool, err error) {
	mem, release, onGPU := m.c.deviceTarget(segID)
	if mem == nil {
		return false, nil
	}
	defer release()
	m.staged[i] = false
	byIndex, err := m.byIndex(i, parts)
	if err != nil {
		return true, err
	}
	left := size
	for k, b := range parts {
		n := uint64(len(b))
		d, onDevice := byIndex[k]
		if onDevice {
			n = d.Size
		}
		if !write {
			if left == 0 {
				break
			}
			n = min(n, left)
			left -= n
		}
		if onGPU && !onDevice {
			m.c.pinRegistered(b)
		}
		switch {
		case onDevice && write:
			err = mem.CopyFromDevice(off, d.Ptr, n)
		case onDevice:
			err = mem.CopyToDevice(d.Ptr, off, n)
		case write:
			err = mem.CopyFrom(off, b[:n])
		default:
			err = mem.CopyTo(b[:n], off)
		}
		if err != nil {
			return true, wire.Errorf(wire.ErrTransferFail, "GPU segment %d at %d: %v", segID, off, err)
		}
		off += n
	}
	return true, nil
}

// deviceTarget returns segment segID as memory the driver copies device
// parts straight to and from, held until release: a GPU segment (own, or
// a same-host peer's over IPC), or a host segment mapped here (own, or a
// peer's shared memory) once page-locked. nil when it is neither.
func (c *Client) deviceTarget(segID uint64) (mem transfer.DeviceMemory, release func(), onGPU bool) {
	if c.peers.isOwn(segID) {
		c.peers.mu.RLock()
		dev, own := c.peers.ownDev, c.peers.own
		c.peers.mu.RUnlock()
		switch {
		case dev != nil:
			return dev, func() {}, true
		case own != nil && c.pins.ensure(own, c.log):
			return hostTarget{own}, func() {}, false
		}
		return nil, nil, false
	}
	p, ok := c.peers.get(segID)
	if !ok {
		return nil, nil, false
	}
	if dev, release, ok := c.engine.DeviceMapping(p); ok {
		return dev, release, true
	}
	if host, release, ok := c.engine.HostMapping(p); ok {
		if c.pins.ensure(host, c.log) {
			return hostTarget{host}, release, false
		}
		release()
	}
	return nil, nil, false
}

// hostTarget is a page-locked host mapping seen as transfer.DeviceMemory:
// a device part moves between it and the GPU in one DMA, no bounce.
type hostTarget struct{ mem []byte }

func (h hostTarget) Size() uint64 { return uint64(len(h.mem)) }

func (h hostTarget) check(off, n uint64) error {
	if off > h.Size() || n > h.Size()-off {
		return wire.Errorf(wire.ErrInvalidParams, "range [%d,+%d) outside a segment of %d bytes", off, n, h.Size())
	}
	return nil
}

func (h hostTarget) CopyFrom(off uint64, src []byte) error {
	if err := h.check(off, uint64(len(src))); err != nil {
		return err
	}
	copy(h.mem[off:], src)
	return nil
}

func (h hostTarget) CopyTo(dst []byte, off uint64) error {
	if err := h.check(off, uint64(len(dst))); err != nil {
		return err
	}
	copy(dst, h.mem[off:])
	return nil
}

func (h hostTarget) CopyFromDevice(off, src, n uint64) error {
	if err := h.check(off, n); err != nil || n == 0 {
		return err
	}
	return gpu.CopyToHost(DeviceOf(src), hostAddr(h.mem[off:]), src, n)
}

func (h hostTarget) CopyToDevice(dst, off, n uint64) error {
	if err := h.check(off, n); err != nil || n == 0 {
		return err
	}
	return gpu.CopyToDevice(DeviceOf(dst), dst, hostAddr(h.mem[off:]), n)
}

func (h hostTarget) Close() error { return nil }

// hostPins remembers the host mappings (own segment, peers' shared
// memory) this client page-locked for direct device copies. Pinning a
// mapping happens once, at its first device copy: a process that never
// hands the store GPU memory pins nothing.
type hostPins struct {
	mu sync.Mutex
	m  map[uint64]bool // mapping address → pinned (false: refused, not asked again)
}

func (h *hostPins) ensure(mem []byte, log *slog.Logger) bool {
	return h.ensureRange(hostAddr(mem), uint64(len(mem)), nil, log)
}

// ensureRange pins [addr, addr+size) once; still (when not nil) is asked
// under the lock whether the range may be pinned at all, so a buffer being
// unregistered is never pinned after its unpin. The lock is held while
// pinning: a large segment's first pin makes other first pins wait.
func (h *hostPins) ensureRange(addr, size uint64, still func() bool, log *slog.Logger) bool {
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
	err := gpu.Pin(addr, size)
	if err != nil {
		log.Warn("cannot page-lock host memory; device copies of it run slower", "bytes", size, "err", err)
	}
	h.m[addr] = err == nil
	return err == nil
}

// drop unpins mem (a mapping about to be unmapped) if it was pinned.
func (h *hostPins) drop(mem []byte) {
	if len(mem) > 0 {
		h.dropRange(hostAddr(mem))
	}
}

func (h *hostPins) dropRange(addr uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m[addr] {
		_ = gpu.Unpin(addr)
	}
	delete(h.m, addr)
}

// dropAll unpins everything still pinned (the client closes: registered
// buffers must not stay locked in a process that goes on).
func (h *hostPins) dropAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for addr, pinned := range h.m {
		if pinned {
			_ = gpu.Unpin(addr)
		}
	}
	h.m = nil
}

// pinRegistered page-locks the registered host buffer holding b (once):
// host parts copied to or from GPU memory then move at the bus's speed
// instead of through the driver's own staging. Memory outside every
// registered buffer (the copying API's) is left alone.
func (c *Client) pinRegistered(b []byte) {
	if len(b) == 0 {
		return
	}
	r, ok := c.buffers.rangeOf(hostAddr(b), uint64(len(b)))
	if !ok || r.dev >= 0 {
		return
	}
	c.pins.ensureRange(r.start, r.size, func() bool {
		now, ok := c.buffers.rangeOf(r.start, r.size)
		return ok && now == r
	}, c.log)
}

// finishReads copies the staged reads that succeeded onto their device
// parts, as far as each object's bytes reach (out: bytes read per object).
func (m *mixedCall) finishReads(out []int64, keys []string) {
	for i, n := range out {
		if n <= 0 || !m.has(i) || !m.staged[i] || m.bufs[i] == nil {
			continue
		}
		var start uint64 // offset of bufs[i][j] in the object
		j := 0
		for k, d := range m.dev[i] {
			for ; j < d.Index; j++ {
				start += uint64(len(m.bufs[i][j]))
			}
			if start >= uint64(n) {
				break
			}
			c := min(d.Size, uint64(n)-start)
			if err := gpu.CopyToDevice(d.Device, d.Ptr, hostAddr(m.loans[i][k].mem), c); err != nil {
				m.c.log.Warn("get: writing device memory failed", "key", keys[i], "err", err)
				out[i] = int64(wire.ErrTransferFail)
				break
			}
		}
	}
}

func (m *mixedCall) releaseOne(i int) {
	for _, b := range m.loans[i] {
		m.c.bounces.put(b)
	}
	m.loans[i], m.bufs[i] = nil, nil
}

func (m *mixedCall) release() {
	if m == nil {
		return
	}
	for i := range m.loans {
		m.releaseOne(i)
	}
}

func hostAddr(b []byte) uint64 { return uint64(addrOf(b)) }

// PutBatchDevice is PutBatch (upsert: UpsertBatch) for items whose parts
// may be device memory: dev[i] lists item i's, left nil in its Parts.
func (c *Client) PutBatchDevice(items []PutItem, dev [][]DevicePart, cfg wire.ReplicaConfig, upsert bool) []wire.Code {
	start := wire.OpPutStart
	if upsert {
		start = wire.OpUpsertStart
	}
	return c.write(start, items, cfg, c.newMixed(len(items), dev)) // write releases m
}

// GetFinishDevice is GetFinish for destinations whose parts may be device
// memory: dev[i] lists object i's, left nil in dests[i].
func (c *Client) GetFinishDevice(p *Pending, dests [][][]byte, dev [][]DevicePart) []int64 {
	leave, err := c.enter()
	if err != nil {
		c.endReads(p)
		return wire.Fill(make([]int64, len(p.res)), int64(wire.CodeOf(err)))
	}
	defer leave()
	m := c.newMixed(len(p.res), dev)
	defer m.release()
	return c.finish(p, dests, m)
}
