// peermaps.go defines peerMaps, the Engine's cache of peer segments opened
// in this process: shared mappings of same-host host segments (shm.go) and
// same-host GPU segments opened from their IPC handles (device.go).

package transfer

import (
	"log/slog"
	"sync"

	"github.com/gostore/gostore/gostore/wire"
)

// peerMap is one peer segment opened in this process.
type peerMap[M any] struct {
	once sync.Once
	err  error

	mu   sync.RWMutex // read-held during copies, write-held to close
	mem  M
	live bool // false until opened and once closed
}

// peerMaps opens peer segments on first use and closes them once no copy
// uses them; it remembers the ones that could not be opened, which then go
// over TCP until forgotten.
type peerMaps[M any] struct {
	what   string                // what opening is, for the log: "map a same-host segment"
	open   func(Peer) (M, error) // opens a peer's segment
	opened func(*peerMap[M])     // runs after a successful open (nil: nothing)
	close  func(M)               // closes an opened segment, no copy using it

	log      *slog.Logger
	mu       sync.Mutex
	maps     map[uint64]*peerMap[M]
	fallback map[uint64]error // SegID → why opening failed
	closed   bool             // after forgetAll: open nothing more
}

func newPeerMaps[M any](what string, open func(Peer) (M, error), close func(M), log *slog.Logger) *peerMaps[M] {
	return &peerMaps[M]{what: what, open: open, close: close, log: log,
		maps: map[uint64]*peerMap[M]{}, fallback: map[uint64]error{}}
}

// failed reports whether segID could not be opened (until forgotten).
func (c *peerMaps[M]) failed(segID uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, bad := c.fallback[segID]
	return bad
}

// acquire returns p's opened segment, read-locked: the caller copies, then
// calls release. useTCP reports that the segment cannot be opened
// (remembered until forget), so the caller should go over TCP instead.
func (c *peerMaps[M]) acquire(p Peer) (m *peerMap[M], useTCP bool, err error) {
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
			m = &peerMap[M]{}
			c.maps[p.SegID] = m
		}
		c.mu.Unlock()

		m.once.Do(func() {
			mem, err := c.open(p)
			m.mu.Lock()
			m.mem, m.err, m.live = mem, err, err == nil
			m.mu.Unlock()
			if err == nil && c.opened != nil {
				c.opened(m)
			}
		})
		if m.err != nil {
			c.mu.Lock()
			if c.maps[p.SegID] != m { // forgotten meanwhile: look again
				c.mu.Unlock()
				continue
			}
			delete(c.maps, p.SegID)
			c.fallback[p.SegID] = m.err
			c.mu.Unlock()
			c.log.Warn("transfer: cannot "+c.what+", using TCP for it", "seg", p.SegID, "err", m.err)
			return nil, true, m.err
		}
		m.mu.RLock()
		if m.live {
			return m, false, nil
		}
		m.mu.RUnlock() // forgotten between lookup and lock: look again
	}
	return nil, false, wire.Errorf(wire.ErrTransferFail, "segment %d was forgotten during the transfer", p.SegID)
}

func (m *peerMap[M]) release() { m.mu.RUnlock() }

// forget closes segID's segment once no copy uses it and clears its
// fallback mark.
func (c *peerMaps[M]) forget(segID uint64) {
	c.mu.Lock()
	m := c.maps[segID]
	delete(c.maps, segID)
	delete(c.fallback, segID)
	c.mu.Unlock()
	if m != nil {
		c.shut(m)
	}
}

// forgetAll closes every segment (Engine.Close).
func (c *peerMaps[M]) forgetAll() {
	c.mu.Lock()
	maps := c.maps
	c.maps = map[uint64]*peerMap[M]{}
	c.fallback = map[uint64]error{}
	c.closed = true
	c.mu.Unlock()
	for _, m := range maps {
		c.shut(m)
	}
}

func (c *peerMaps[M]) shut(m *peerMap[M]) {
	m.once.Do(func() { m.err = wire.Errorf(wire.ErrTransferFail, "segment forgotten") })
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.live {
		c.close(m.mem)
		m.live = false
	}
}
