// device.go defines DeviceMemory, segment memory on a GPU that host code
// cannot address, and the Engine's IPC path: a same-host peer's device
// segment opened from its IPC handle and copied to by the driver.
package transfer

import (
	"log/slog"
	"sync"

	"github.com/gostore/gostore/gostore/wire"
)

// DeviceMemory is a segment whose bytes only a driver moves (gpu.Segment):
// the Server and the Engine copy through it instead of slicing memory.
type DeviceMemory interface {
	Size() uint64
	// CopyFrom writes src to [off, off+len(src)); CopyTo reads
	// [off, off+len(dst)) into dst.
	CopyFrom(off uint64, src []byte) error
	CopyTo(dst []byte, off uint64) error
	// CopyFromDevice / CopyToDevice move n bytes between the segment and
	// device memory at a raw address (a caller's GPU buffer): one copy on
	// the GPUs, the host never sees the bytes.
	CopyFromDevice(off, src, n uint64) error
	CopyToDevice(dst, off, n uint64) error
	Close() error
}

// DeviceOpener maps a same-host peer's device segment (Peer.IPC) into this
// process. The client supplies it (gostore/gpu), so this package needs no
// driver.
type DeviceOpener func(p Peer) (DeviceMemory, error)

// CopyDevice copies between the range of mem starting at off and the
// scatter list bufs: into mem when write, out of it otherwise. A range
// outside mem is an error and nothing is copied.
func CopyDevice(mem DeviceMemory, off uint64, bufs [][]byte, write bool) error {
	var total uint64
	for _, b := range bufs {
		total += uint64(len(b))
	}
	if !inRange(off, total, mem.Size()) {
		return wire.Errorf(wire.ErrInvalidParams, "range [%d,+%d) outside a device segment of %d bytes", off, total, mem.Size())
	}
	for _, b := range bufs {
		var err error
		if write {
			err = mem.CopyFrom(off, b)
		} else {
			err = mem.CopyTo(b, off)
		}
		if err != nil {
			return wire.Errorf(wire.ErrTransferFail, "device copy of %d bytes at %d: %v", len(b), off, err)
		}
		off += uint64(len(b))
	}
	return nil
}

// ipcMap is one peer device segment opened in this process.
type ipcMap struct {
	once sync.Once
	err  error

	mu  sync.RWMutex // read-held during copies, write-held to close
	mem DeviceMemory // nil once closed
}

// ipcCache opens peer device segments on first use and remembers the ones
// that could not be opened, which then go over TCP.
type ipcCache struct {
	open     DeviceOpener
	log      *slog.Logger
	mu       sync.Mutex
	maps     map[uint64]*ipcMap
	fallback map[uint64]error
	closed   bool
}

func newIPCCache(open DeviceOpener, log *slog.Logger) *ipcCache {
	return &ipcCache{open: open, log: log, maps: map[uint64]*ipcMap{}, fallback: map[uint64]error{}}
}

func (c *ipcCache) usable(segID uint64) bool {
	if c.open == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	_, bad := c.fallback[segID]
	return !bad && !c.closed
}

// acquire returns p's opened segment, read-locked until release; useTCP
// when it cannot be opened (remembered until forget).
func (c *ipcCache) acquire(p Peer) (m *ipcMap, useTCP bool, err error) {
	for attempt := 0; attempt < 4; attempt++ {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return nil, false, wire.Errorf(wire.ErrTransferFail, "transfer engine closed")
		}
		if err, bad := c.fallback[p.SegID]; bad {
			c.mu.Unlock()
			return nil, true, err
		}
		m = c.maps[p.SegID]
		if m == nil {
			m = &ipcMap{}
			c.maps[p.SegID] = m
		}
		c.mu.Unlock()
		m.once.Do(func() { m.mem, m.err = c.open(p) })
		if m.err != nil {
			c.mu.Lock()
			if c.maps[p.SegID] != m {
				c.mu.Unlock()
				continue
			}
			delete(c.maps, p.SegID)
			c.fallback[p.SegID] = m.err
			c.mu.Unlock()
			c.log.Warn("transfer: cannot open a same-host device segment, using TCP for it", "seg", p.SegID, "err", m.err)
			return nil, true, m.err
		}
		m.mu.RLock()
		if m.mem != nil {
			return m, false, nil
		}
		m.mu.RUnlock()
	}
	return nil, false, wire.Errorf(wire.ErrTransferFail, "segment %d was forgotten during the transfer", p.SegID)
}

func (m *ipcMap) release() { m.mu.RUnlock() }

func (m *ipcMap) close() {
	m.once.Do(func() { m.err = wire.Errorf(wire.ErrTransferFail, "segment forgotten") })
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mem != nil {
		_ = m.mem.Close()
		m.mem = nil
	}
}

// forget closes segID's mapping once no copy uses it.
func (c *ipcCache) forget(segID uint64) {
	c.mu.Lock()
	m := c.maps[segID]
	delete(c.maps, segID)
	delete(c.fallback, segID)
	c.mu.Unlock()
	if m != nil {
		m.close()
	}
}

func (c *ipcCache) forgetAll() {
	c.mu.Lock()
	maps := c.maps
	c.maps = map[uint64]*ipcMap{}
	c.closed = true
	c.mu.Unlock()
	for _, m := range maps {
		m.close()
	}
}
