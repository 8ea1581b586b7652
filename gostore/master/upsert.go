// upsert.go defines UpsertStart: insert-or-replace, after the Hard Pin and
// Upsert RFC. UpsertEnd and UpsertRevoke are PutEnd and PutRevoke.

package master

import "github.com/gostore/gostore/gostore/wire"

// UpsertStart prepares each key for writing, whatever it holds now:
//
//   - missing (case A): allocated like a put;
//   - an unfinished put/upsert is preempted first: its PROCESSING ranges go
//     to the quarantine (its writer may still be copying) and, if nothing
//     complete remains, the key is treated as missing;
//   - a running copy/move task a client asked for: -708 (one the master
//     started, a promotion or a hot object's extra replica, is pre-empted);
//     readers copying out: -714;
//   - same size (case B): rewritten in place: every replica turns
//     PROCESSING (readers get -703) under a new epoch, same ranges returned;
//   - other size (case C): the old ranges go to the quarantine and new ones
//     are allocated.
//
// A hard pin is kept across upserts; a soft pin follows the new config.
func (c *Core) UpsertStart(clientID, hostID string, keys []string, sizes []uint64, cfg wire.ReplicaConfig) ([]wire.PutStartResult, error) {
	return c.startWrites(clientID, hostID, keys, sizes, cfg, c.upsertOne)
}

func (c *Core) upsertOne(now int64, clientID, key string, size uint64, cfg wire.ReplicaConfig, p *placer) wire.PutStartResult {
	c.stats.UpsertStarts.Add(1)
	sh := c.shardOf(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	o, ok := sh.objects[key]
	if !ok {
		return c.insertLocked(sh, now, clientID, key, size, cfg, cfg.HardPin, p)
	}
	hardPin := o.hardPin || cfg.HardPin
	if o.taskCount() > 0 && !c.preemptStarted(o, now) {
		return wire.PutStartResult{Code: wire.ErrObjectHasReplicationTask}
	}
	if o.unfinished() {
		c.discard(o.takeReplicas(replicaProcessing), o.size, now)
		c.stats.WritesPreempted.Add(1)
		if o.numReplicas() == 0 {
			c.deleteObject(sh, key, o)
			return c.insertLocked(sh, now, clientID, key, size, cfg, hardPin, p)
		}
		c.record(key, o) // its ranges moved to the quarantine
	}
	if o.busy(now) {
		return wire.PutStartResult{Code: wire.ErrObjectReplicaBusy}
	}
	if o.size == size && o.numReplicas() > 0 { // a disk-only object has no ranges to reuse
		o.setStatus(replicaProcessing)
		o.hardPin = hardPin
		c.startWrite(o, now, clientID, cfg)
		c.stats.UpsertsInPlace.Add(1)
		// Durable before the writer overwrites the bytes in place: a
		// restart must not bring back an object half rewritten.
		c.record(key, o)
		return c.writeResult(o, now)
	}
	c.discard(o.replicaList(), o.size, now)
	c.deleteObject(sh, key, o)
	return c.insertLocked(sh, now, clientID, key, size, cfg, hardPin, p)
}

// takeReplicas removes and returns the replicas in the given state.
func (o *object) takeReplicas(st replicaStatus) []replica {
	var taken, kept []replica
	for _, r := range o.reps() {
		if r.status == st {
			taken = append(taken, r)
		} else {
			kept = append(kept, r)
		}
	}
	if len(taken) > 0 {
		o.setReplicas(kept)
	}
	return taken
}
