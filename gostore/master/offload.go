// offload.go defines the master's side of the SSD tier: which objects a
// client should persist, the LOCAL_DISK copies it reports, and their removal.

package master

import (
	"slices"
	"sync"

	"github.com/gostore/gostore/gostore/wire"
)

// diskCopy is an object's LOCAL_DISK replica: the bytes live in the SSD
// tier of one client, reachable at endpoint.
type diskCopy struct {
	client   string
	endpoint string
	// storage names the directory the copy lives in; it outlives the
	// client process, so a restarted client can claim its copies back.
	storage string
}

// offloadQueues holds, per client, keys in first-come order, each at most
// once (eviction asks again for objects still waiting, pass after pass).
// Entries are hints: the heartbeat re-checks each key, so a removed or
// already-offloaded key costs nothing.
type offloadQueues struct {
	sync.Mutex
	byClient map[string]*keyQueue
}

type keyQueue struct {
	keys   []string
	queued map[string]struct{}
}

// push queues key for client; false: it was queued already.
func (q *offloadQueues) push(client, key string) bool {
	q.Lock()
	defer q.Unlock()
	return q.pushLocked(client, key)
}

func (q *offloadQueues) pushLocked(client, key string) bool {
	if q.byClient == nil {
		q.byClient = make(map[string]*keyQueue)
	}
	kq := q.byClient[client]
	if kq == nil {
		kq = &keyQueue{queued: make(map[string]struct{})}
		q.byClient[client] = kq
	}
	if _, dup := kq.queued[key]; dup {
		return false
	}
	kq.queued[key] = struct{}{}
	kq.keys = append(kq.keys, key)
	return true
}

func (q *offloadQueues) pending(client string) bool {
	q.Lock()
	defer q.Unlock()
	return q.byClient[client] != nil
}

// take removes key from client's queue and reports whether it was there.
func (q *offloadQueues) take(client, key string) bool {
	q.Lock()
	defer q.Unlock()
	return q.takeLocked(client, key)
}

func (q *offloadQueues) takeLocked(client, key string) bool {
	kq := q.byClient[client]
	if kq == nil {
		return false
	}
	if _, ok := kq.queued[key]; !ok {
		return false
	}
	delete(kq.queued, key)
	kq.keys = slices.DeleteFunc(kq.keys, func(k string) bool { return k == key })
	if len(kq.keys) == 0 {
		delete(q.byClient, client)
	}
	return true
}

// all copies every queue.
func (q *offloadQueues) all() map[string][]string {
	q.Lock()
	defer q.Unlock()
	out := make(map[string][]string, len(q.byClient))
	for name, kq := range q.byClient {
		out[name] = slices.Clone(kq.keys)
	}
	return out
}

// forget drops a dead client's queue; the number of keys it held.
func (q *offloadQueues) forget(client string) int {
	q.Lock()
	defer q.Unlock()
	n := 0
	if kq := q.byClient[client]; kq != nil {
		n = len(kq.keys)
	}
	delete(q.byClient, client)
	return n
}

// has reports whether key waits in client's queue.
func (q *offloadQueues) has(client, key string) bool {
	q.Lock()
	defer q.Unlock()
	kq := q.byClient[client]
	if kq == nil {
		return false
	}
	_, ok := kq.queued[key]
	return ok
}

func (q *offloadQueues) pop(client string, max int) []string {
	q.Lock()
	defer q.Unlock()
	return q.popLocked(client, max)
}

func (q *offloadQueues) popLocked(client string, max int) []string {
	kq := q.byClient[client]
	if kq == nil {
		return nil
	}
	n := min(len(kq.keys), max)
	out := kq.keys[:n:n]
	for _, k := range out {
		delete(kq.queued, k)
	}
	if kq.keys = kq.keys[n:]; len(kq.keys) == 0 {
		delete(q.byClient, client)
	}
	return out
}

// offloader returns the client that should persist o: the owner of the
// first memory replica whose segment has an SSD tier ("" if none has).
func (o *object) offloader() string {
	for _, r := range o.reps() {
		if r.seg.desc.Offload && !r.seg.noDisk.Load() {
			return r.seg.desc.ClientID
		}
	}
	return ""
}

// wantOffload queues o (under key) for its offloader; the caller holds o's
// shard lock.
func (c *Core) wantOffload(key string, o *object) {
	if o.onDisk() != nil {
		return
	}
	if client := o.offloader(); client != "" {
		c.offload.push(client, key)
	}
}

// dropDisk forgets o's disk copy (the object is removed or rewritten) and
// tells its directory's holder to delete it, so a restart cannot bring it
// back. Drops are kept per directory, not per process: one removed while
// its holder is down reaches the holder's successor. The caller holds o's
// shard lock.
func (c *Core) dropDisk(key string, o *object) {
	if o.onDisk() == nil {
		return
	}
	c.pushDrop(o.onDisk().storage, key)
	o.setDisk(nil)
}

// deleteObject removes key from sh and drops its disk copy, if any: every
// path that forgets an object while its directory may still hold a copy
// goes through here, so a restart cannot bring the copy back. The caller
// holds sh's lock.
func (c *Core) deleteObject(sh *shard, key string, o *object) {
	c.dropDisk(key, o)
	sh.remove(key)
	c.recordGone(key, o)
}

// settle removes o when nothing serves it any more (no memory replica, no
// disk copy) and reports its durable state either way, after a change
// that took replicas or its disk copy away. The caller holds sh's lock.
func (c *Core) settle(sh *shard, key string, o *object) {
	if o.numReplicas() == 0 && o.onDisk() == nil {
		sh.remove(key)
		c.recordGone(key, o)
		return
	}
	c.record(key, o)
}

// OffloadPending reports whether clientID has objects to persist or disk
// copies to delete: the ping tells it, so it need not wait for its next
// offload heartbeat while eviction waits on it.
func (c *Core) OffloadPending(clientID string) bool {
	if !c.cfg.EnableOffload {
		return false
	}
	c.tiers.Lock()
	storage := c.tiers.byClient[clientID]
	c.tiers.Unlock()
	return c.offload.pending(clientID) || (storage != "" && c.drops.pending(storage)) || c.promotionPending(clientID)
}

// tierOf records which directory clientID's SSD tier runs on (its offload
// heartbeats say), so its ping can tell it about drops for it.
func (c *Core) tierOf(clientID, storage string) {
	if storage == "" {
		return
	}
	c.tiers.Lock()
	if c.tiers.byClient == nil {
		c.tiers.byClient = make(map[string]string)
	}
	c.tiers.byClient[clientID] = storage
	c.tiers.Unlock()
}

// OffloadHeartbeat returns up to max objects (keys and sizes) that clientID
// should write to its SSD tier (complete, without a disk copy, with a
// memory replica on one of its segments), and up to max keys whose disk
// copies in its directory (storage) it should delete. With offload
// disabled it returns nothing. max is capped at MaxBatchKeys, which bounds
// every batch (and so every answer) the master handles.
func (c *Core) OffloadHeartbeat(clientID, storage string, max int) (keys []string, sizes []uint64, drop []string) {
	if !c.cfg.EnableOffload || max <= 0 || c.diskUnmounted(clientID) {
		return nil, nil, nil
	}
	max = min(max, c.cfg.MaxBatchKeys)
	c.touch(clientID)
	if storage != "" {
		c.tierOf(clientID, storage)
		drop = c.popDrops(storage, max)
	}
	for _, key := range c.offload.pop(clientID, max) {
		sh := c.shardOf(key)
		sh.mu.Lock()
		if o, ok := sh.objects[key]; ok && o.onDisk() == nil && !o.unfinished() && o.hasReplicaOf(clientID) {
			keys, sizes = append(keys, key), append(sizes, o.size)
		}
		sh.mu.Unlock()
	}
	return keys, sizes, drop
}

func (o *object) hasReplicaOf(clientID string) bool {
	for _, r := range o.reps() {
		if r.seg.desc.ClientID == clientID {
			return true
		}
	}
	return false
}

// NotifyOffloaded records that clientID holds keys[i] (of sizes[i] bytes) in
// its SSD tier (directory storage), reachable at endpoint: the object gains
// a LOCAL_DISK replica and, with the tier on, its memory replicas become
// evictable. epochs, when given, are those of the reads the copies came
// from. -704: the object is gone; -600: the size or epoch differs, or a
// write is in progress (the object was replaced); -711: another directory
// holds the copy. The client drops a refused copy.
func (c *Core) NotifyOffloaded(clientID, endpoint, storage string, keys []string, sizes, epochs []uint64) []wire.Code {
	out := make([]wire.Code, len(keys))
	if len(sizes) != len(keys) || (len(epochs) != 0 && len(epochs) != len(keys)) {
		return wire.Fill(out, wire.ErrInvalidParams)
	}
	if c.diskUnmounted(clientID) {
		return wire.Fill(out, wire.ErrUnableOffload)
	}
	c.touch(clientID)
	for i, key := range keys {
		sh := c.shardOf(key)
		sh.mu.Lock()
		o, ok := sh.objects[key]
		switch {
		case !ok:
			out[i] = wire.ErrObjectNotFound
		case o.size != sizes[i] || o.unfinished() || (len(epochs) != 0 && epochs[i] != o.epoch):
			out[i] = wire.ErrInvalidParams
		case o.onDisk() != nil && o.onDisk().storage != storage:
			// One disk copy per object, the first: once it exists the
			// memory this copy was read from may have been evicted.
			out[i] = wire.ErrReplicaAlreadyExists
		default:
			o.setDisk(&diskCopy{client: clientID, endpoint: endpoint, storage: storage})
			c.stats.Offloaded.Add(1)
			c.record(key, o)
		}
		sh.mu.Unlock()
	}
	return out
}

// EvictDiskReplicas forgets clientID's SSD copies of keys (its disk tier
// evicted them). An object left with no replica at all disappears.
func (c *Core) EvictDiskReplicas(clientID string, keys []string) []wire.Code {
	out := make([]wire.Code, len(keys))
	for i, key := range keys {
		sh := c.shardOf(key)
		sh.mu.Lock()
		o, ok := sh.objects[key]
		switch {
		case !ok || o.onDisk() == nil || o.onDisk().client != clientID:
			out[i] = wire.ErrReplicaNotFound
		default:
			o.setDisk(nil)
			c.settle(sh, key, o)
		}
		sh.mu.Unlock()
	}
	return out
}

// RecoverDisk re-registers the objects a restarted client found in its SSD
// tier (directory storage), reachable at endpoint. A key the directory was
// told to drop is stale; otherwise a missing key becomes a disk-only
// object and a key whose disk copy lives in the same directory is rebound
// to the new process; anything else is ErrObjectAlreadyExists (the master
// holds a newer object or another copy: the client's is stale).
func (c *Core) RecoverDisk(clientID, endpoint, storage string, keys []string, sizes []uint64) []wire.Code {
	out := make([]wire.Code, len(keys))
	if len(sizes) != len(keys) || storage == "" {
		return wire.Fill(out, wire.ErrInvalidParams)
	}
	if c.diskUnmounted(clientID) {
		return wire.Fill(out, wire.ErrUnableOffload)
	}
	now := c.now()
	c.touch(clientID)
	for i, key := range keys {
		if key == "" || sizes[i] == 0 {
			out[i] = wire.ErrInvalidParams
			continue
		}
		if c.takeDrop(storage, key) {
			out[i] = wire.ErrObjectAlreadyExists
			continue
		}
		sh := c.shardOf(key)
		sh.mu.Lock()
		o, ok := sh.objects[key]
		switch {
		case !ok:
			o = &object{size: sizes[i], lastUse: now, epoch: c.epochs.Add(1)}
			o.setDisk(&diskCopy{client: clientID, endpoint: endpoint, storage: storage})
			o.placed = o.epoch
			sh.set(key, o)
			c.stats.DiskRecovered.Add(1)
			c.record(key, o)
		case o.onDisk() != nil && o.onDisk().storage == storage && o.size == sizes[i] && !o.unfinished():
			o.onDisk().client, o.onDisk().endpoint = clientID, endpoint
			c.stats.DiskRecovered.Add(1)
			c.record(key, o)
		default:
			out[i] = wire.ErrObjectAlreadyExists
		}
		sh.mu.Unlock()
	}
	return out
}
