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

// wantOffload queues o (under key) for the client holding its first memory
// replica; the caller holds o's shard lock.
func (c *Core) wantOffload(key string, o *object) {
	if len(o.replicas) == 0 || o.disk != nil {
		return
	}
	c.offload.push(o.replicas[0].seg.desc.ClientID, key)
}

// OffloadHeartbeat returns up to max objects (keys and sizes) that clientID
// should write to its SSD tier: complete, without a disk copy, with a
// memory replica on one of its segments. With offload disabled it returns
// nothing.
func (c *Core) OffloadHeartbeat(clientID string, max int) (keys []string, sizes []uint64) {
	if !c.cfg.EnableOffload || max <= 0 {
		return nil, nil
	}
	c.touch(clientID)
	for _, key := range c.offload.pop(clientID, max) {
		sh := c.shardOf(key)
		sh.mu.Lock()
		if o, ok := sh.objects[key]; ok && o.disk == nil && !o.unfinished() && o.hasReplicaOf(clientID) {
			keys, sizes = append(keys, key), append(sizes, o.size)
		}
		sh.mu.Unlock()
	}
	return keys, sizes
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
// its SSD tier, reachable at endpoint: the object gains a LOCAL_DISK replica
// and, with the tier on, its memory replicas become evictable.
// -704: the object is gone; -600: the size differs (the object was
// replaced meanwhile; the client should drop its copy).
func (c *Core) NotifyOffloaded(clientID, endpoint string, keys []string, sizes []uint64) []wire.Code {
	out := make([]wire.Code, len(keys))
	if len(sizes) != len(keys) {
		for i := range out {
			out[i] = wire.ErrInvalidParams
		}
		return out
	}
	c.touch(clientID)
	for i, key := range keys {
		sh := c.shardOf(key)
		sh.mu.Lock()
		o, ok := sh.objects[key]
		switch {
		case !ok:
			out[i] = wire.ErrObjectNotFound
		case o.size != sizes[i] || o.unfinished():
			out[i] = wire.ErrInvalidParams
		default:
			o.disk = &diskCopy{client: clientID, endpoint: endpoint}
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
