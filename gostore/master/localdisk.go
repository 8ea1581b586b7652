// localdisk.go defines UnmountLocalDisk: a client's SSD tier leaves the
// pool while the client and its memory segments stay.

package master

import "github.com/gostore/gostore/gostore/wire"

// UnmountLocalDisk takes clientID's SSD tier out of the pool (Mooncake's
// unmount_local_disk_segment): the master forgets the disk copies it holds
// (an object left with no replica disappears), asks it for nothing more
// and accepts nothing more from it (offloads, re-registrations), and no
// longer keeps objects on the client's segments from eviction until they
// have a disk copy. The files stay in the directory, marked stale for the
// next process that opens it. -1300 when the master runs without the SSD
// tier. Asking again changes nothing.
func (c *Core) UnmountLocalDisk(clientID string) error {
	if !c.cfg.EnableOffload {
		return wire.Errorf(wire.ErrUnableOffload, "the master runs without the SSD tier (--enable_offload)")
	}
	if clientID == "" {
		return wire.Errorf(wire.ErrInvalidParams, "no client id")
	}
	c.touch(clientID)
	c.tiers.Lock()
	if c.tiers.drained == nil {
		c.tiers.drained = make(map[string]bool)
	}
	c.tiers.drained[clientID] = true
	delete(c.tiers.byClient, clientID)
	c.tiers.Unlock()
	c.offload.forget(clientID)
	c.forgetPromotions(clientID)
	c.segs.RLock()
	for _, s := range c.segs.list {
		if s.desc.ClientID == clientID {
			s.noDisk.Store(true)
		}
	}
	c.segs.RUnlock()
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		for key, o := range sh.objects {
			if o.onDisk() == nil || o.onDisk().client != clientID {
				continue
			}
			c.pushDrop(o.onDisk().storage, key) // whoever opens the directory next deletes it
			o.setDisk(nil)
			c.settle(sh, key, o)
		}
		sh.mu.Unlock()
	}
	return nil
}

// diskUnmounted reports whether clientID's SSD tier left (UnmountLocalDisk).
func (c *Core) diskUnmounted(clientID string) bool {
	c.tiers.Lock()
	defer c.tiers.Unlock()
	return c.tiers.drained[clientID]
}
