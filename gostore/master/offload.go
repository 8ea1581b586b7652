// offload.go defines the master's side of the SSD tier: which objects a
// client should persist, the LOCAL_DISK copies it reports, and their removal.
package master

import (
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

// offloadQueues holds, per client, keys whose memory replica that client
// holds and which it should persist. Entries are hints: the heartbeat
// re-checks each key, so a removed or already-offloaded key costs nothing.
type offloadQueues struct {
	sync.Mutex
	byClient map[string][]string
}

func (q *offloadQueues) push(client, key string) {
	q.Lock()
	if q.byClient == nil {
		q.byClient = make(map[string][]string)
	}
	q.byClient[client] = append(q.byClient[client], key)
	q.Unlock()
}

// forget drops a dead client's queue.
func (q *offloadQueues) forget(client string) {
	q.Lock()
	delete(q.byClient, client)
	q.Unlock()
}

func (q *offloadQueues) pop(client string, max int) []string {
	q.Lock()
	defer q.Unlock()
	keys := q.byClient[client]
	n := min(len(keys), max)
	out := keys[:n:n]
	if rest := keys[n:]; len(rest) > 0 {
		q.byClient[client] = rest
	} else {
		delete(q.byClient, client)
	}
	return out
}

// offloader returns the client that should persist o: the owner of the
// first memory replica whose segment has an SSD tier ("" if none has).
func (o *object) offloader() string {
	for _, r := range o.replicas {
		if r.seg.desc.Offload {
			return r.seg.desc.ClientID
		}
	}
	return ""
}

// wantOffload queues o (under key) for its offloader; the caller holds o's
// shard lock.
func (c *Core) wantOffload(key string, o *object) {
	if o.disk != nil {
		return
	}
	if client := o.offloader(); client != "" {
		c.offload.push(client, key)
	}
}

// dropDisk forgets o's disk copy (the object is removed or rewritten) and
// tells its holder to delete it, so a restart cannot bring it back. The
// caller holds o's shard lock.
func (c *Core) dropDisk(key string, o *object) {
	if o.disk == nil {
		return
	}
	c.drops.push(o.disk.client, key)
	o.disk = nil
}

// OffloadHeartbeat returns up to max objects (keys and sizes) that clientID
// should write to its SSD tier (complete, without a disk copy, with a
// memory replica on one of its segments), and up to max keys whose disk
// copies it should delete. With offload disabled it returns nothing.
func (c *Core) OffloadHeartbeat(clientID string, max int) (keys []string, sizes []uint64, drop []string) {
	if !c.cfg.EnableOffload || max <= 0 {
		return nil, nil, nil
	}
	c.touch(clientID)
	drop = c.drops.pop(clientID, max)
	for _, key := range c.offload.pop(clientID, max) {
		sh := c.shardOf(key)
		sh.mu.Lock()
		if o, ok := sh.objects[key]; ok && o.disk == nil && !o.unfinished() && o.hasReplicaOf(clientID) {
			keys, sizes = append(keys, key), append(sizes, o.size)
		}
		sh.mu.Unlock()
	}
	return keys, sizes, drop
}

func (o *object) hasReplicaOf(clientID string) bool {
	for _, r := range o.replicas {
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
// write is in progress (the object was replaced; the client should drop
// its copy).
func (c *Core) NotifyOffloaded(clientID, endpoint, storage string, keys []string, sizes, epochs []uint64) []wire.Code {
	out := make([]wire.Code, len(keys))
	if len(sizes) != len(keys) || (len(epochs) != 0 && len(epochs) != len(keys)) {
		return wire.Fill(out, wire.ErrInvalidParams)
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
		default:
			if o.disk != nil && o.disk.client != clientID {
				c.drops.push(o.disk.client, key) // one disk copy per object
			}
			o.disk = &diskCopy{client: clientID, endpoint: endpoint, storage: storage}
			c.stats.Offloaded.Add(1)
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
		case !ok || o.disk == nil || o.disk.client != clientID:
			out[i] = wire.ErrReplicaNotFound
		default:
			o.disk = nil
			if len(o.replicas) == 0 {
				delete(sh.objects, key)
			}
		}
		sh.mu.Unlock()
	}
	return out
}

// RecoverDisk re-registers the objects a restarted client found in its SSD
// tier (directory storage), reachable at endpoint. A missing key becomes a
// disk-only object; a key whose disk copy lives in the same directory is
// rebound to the new process; anything else is ErrObjectAlreadyExists (the
// master holds a newer object or another copy: the client's is stale).
func (c *Core) RecoverDisk(clientID, endpoint, storage string, keys []string, sizes []uint64) []wire.Code {
	out := make([]wire.Code, len(keys))
	if len(sizes) != len(keys) || storage == "" {
		return wire.Fill(out, wire.ErrInvalidParams)
	}
	now := c.now()
	c.touch(clientID)
	for i, key := range keys {
		if key == "" || sizes[i] == 0 {
			out[i] = wire.ErrInvalidParams
			continue
		}
		sh := c.shardOf(key)
		sh.mu.Lock()
		o, ok := sh.objects[key]
		switch {
		case !ok:
			o = &object{size: sizes[i], lastUse: now, started: now, epoch: c.epochs.Add(1),
				disk: &diskCopy{client: clientID, endpoint: endpoint, storage: storage}}
			sh.objects[key] = o
			c.stats.DiskRecovered.Add(1)
		case o.disk != nil && o.disk.storage == storage && o.size == sizes[i] && !o.unfinished():
			o.disk.client, o.disk.endpoint = clientID, endpoint
			c.stats.DiskRecovered.Add(1)
		default:
			out[i] = wire.ErrObjectAlreadyExists
		}
		sh.mu.Unlock()
	}
	return out
}
