// spots.go defines the speculative single-object read: where a key's
// object was last found, and a get that reads it from there while it asks
// the master.

package client

import (
	"sync"
	"time"

	"github.com/gostore/gostore/gostore/grant"
	"github.com/gostore/gostore/gostore/transfer"
	"github.com/gostore/gostore/gostore/wire"
)

// A get of one object over TCP or UCX is two round trips in a row:
// GetReplicas to the master, then the read from the owner (a request to
// its server over TCP; over UCX a one-sided get, which on tcp and shared
// memory the owner's worker serves). When this client wrote the key
// or read it a moment ago, it knows where the object was (a spot) and the
// read can go out first, answered while the master answers; the bytes are
// kept only when the master's answer shows that nothing changed:
//
//   - the same epoch: no write of the key began since the spot was taken
//     (an upsert in place takes a new epoch when it begins), and none can
//     begin before this read ends, as this client is now a counted reader
//     (a read that ends past the answer's lease is discarded, as any read
//     is: the count lapses with the lease);
//   - the same replica set (wire.GetResult.Placed) with the spot's replica
//     (segment and offset) still in it: the range belonged to the object
//     from the spot to the answer, so nothing but the object's bytes was
//     there (a range that left and came back would have a new name); and
//   - the read was allowed: under the grant the spot holds (a read's
//     grant, or the write's, which reads its range back), before it ends
//     (checked by the owner's server over TCP, by the engine before it
//     posts over UCX, as for any UCX op).
//
// Otherwise the bytes are discarded and the object is read as any get
// reads it, from the master's fresh answer: one more round trip, only for
// keys that changed. A put that returned before this get began is seen,
// since the master's answer is taken after the get began. Spots are kept
// until their grant ends, a read's no longer than its lease (the last
// maxSpots at most); shared memory and the own segment gain nothing from
// them (a local read is no round trip).

// maxSpots bounds the spots kept. They live in two generations: new
// spots go to the young one, and when it holds maxSpots/2 it becomes the
// old one (the old one's spots are dropped); a spot found in the old
// generation moves back to the young. So the spots used or made last are
// kept, without a list to maintain: a key read again before maxSpots/2
// newer spots came keeps its spot however many writes go by.
const maxSpots = 16384

// spot is where one key's object was found: the replica a get reads
// first, and what the master's answer must repeat for a read from it to
// count.
type spot struct {
	rep    wire.Replica // grant included: the owner checks it
	size   uint64
	epoch  uint64
	placed uint64
	until  time.Time // when its grant (or a read's lease) ends
}

type spots struct {
	mu         sync.Mutex
	young, old map[string]spot
}

func (s *spots) get(key string, now time.Time) (spot, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sp, ok := s.young[key]
	if !ok {
		if sp, ok = s.old[key]; ok {
			delete(s.old, key)
			s.add(key, sp)
		}
	}
	if ok && !now.Before(sp.until) {
		delete(s.young, key)
		return spot{}, false
	}
	return sp, ok
}

func (s *spots) put(key string, sp spot) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.old, key)
	s.add(key, sp)
}

// add files sp as key's spot in the young generation; s.mu is held.
func (s *spots) add(key string, sp spot) {
	if _, ok := s.young[key]; !ok && len(s.young) >= maxSpots/2 {
		s.old, s.young = s.young, nil
	}
	if s.young == nil {
		s.young = make(map[string]spot, maxSpots/2)
	}
	s.young[key] = sp
}

func (s *spots) drop(key string) {
	s.mu.Lock()
	delete(s.young, key)
	delete(s.old, key)
	s.mu.Unlock()
}

// remember records where p found its single key, when that is a replica
// a read would go to first over TCP or UCX; anything else forgets the key.
func (c *Reads) remember(p *Pending) {
	key, r := p.keys[0], p.res[0]
	lease := p.sent.Add(time.Duration(r.LeaseMS) * time.Millisecond)
	if r.Code != wire.OK || r.LeaseMS <= 0 || !c.rememberSpot(key, r.Replicas, r.Size, r.Epoch, r.Placed, lease) {
		c.spots.drop(key)
	}
}

// rememberWritten records where this client just wrote key (epoch names
// the write, and its replica set until a task changes that), for a read
// of its own write. A write elsewhere than over TCP or UCX leaves any
// older spot of the key as it is: a read does not use it, or the master's
// answer turns it down (and a put over shared memory pays for no lock
// here).
func (c *Reads) rememberWritten(key string, reps []wire.Replica, size, epoch uint64) {
	c.rememberSpot(key, reps, size, epoch, epoch, time.Time{})
}

// rememberSpot keeps the replica of reps a read would go to first as
// key's spot, until its grant ends or until, if that is sooner (zero: no
// bound); false when that replica is not read over TCP or UCX (or has no
// grant), and nothing is kept.
func (c *Reads) rememberSpot(key string, reps []wire.Replica, size, epoch, placed uint64, until time.Time) bool {
	if len(reps) == 0 {
		return false
	}
	c.orderReplicas(reps) // as the read will
	rep := reps[0]
	peer, ok := c.peers.get(rep.SegID)
	if !ok || !roundTrip(c.engine.Route(peer)) {
		return false
	}
	g, err := grant.Decode(rep.Grant)
	if err != nil {
		return false
	}
	if end := time.Unix(0, g.Expiry); until.IsZero() || end.Before(until) {
		until = end
	}
	c.spots.put(key, spot{rep: rep, size: size, epoch: epoch, placed: placed, until: until})
	return true
}

// roundTrip reports whether a read over r is a round trip to the owner,
// which a read from a spot overlaps with the master's: TCP (a request to
// the owner's server) and UCX (over tcp and shared memory the owner's
// worker serves the one-sided get; over verbs the NIC does, still a round
// trip on the wire).
func roundTrip(r transfer.Route) bool {
	return r == transfer.RouteTCP || r == transfer.RouteUCX
}

// confirms reports whether the master's answer r keeps a read from sp.
func (sp spot) confirms(r wire.GetResult) bool {
	if r.Code != wire.OK || r.Epoch != sp.epoch || r.Placed != sp.placed || r.Size != sp.size {
		return false
	}
	for _, rep := range r.Replicas {
		if rep.SegID == sp.rep.SegID && rep.Offset == sp.rep.Offset {
			return true
		}
	}
	return false
}

// GetIntoOne reads one object into dest (host memory the caller owns): the
// bytes read or a negative code, as GetInto for one key. When this client
// has a spot for the key, the read from it goes out while the master is
// asked (see the top of this file).
func (c *Reads) GetIntoOne(key string, dest [][]byte) int64 {
	leave, err := c.enter()
	if err != nil {
		return int64(wire.CodeOf(err))
	}
	defer leave()
	got, _ := c.getOne(key, dest, false)
	return got
}

// GetOneStart reads one object into scratch when it fits there and
// returns (nil, its size); an object larger than scratch comes back
// unread, as (its lookup, its size), for the caller to finish into memory
// of that size (GetFinish) or Abort. A miss or an error is (nil, code).
func (c *Reads) GetOneStart(key string, scratch []byte) (*Pending, int64) {
	leave, err := c.enter()
	if err != nil {
		return nil, int64(wire.CodeOf(err))
	}
	defer leave()
	got, p := c.getOne(key, [][]byte{scratch}, true)
	return p, got
}

// getOne is GetIntoOne and GetOneStart: with large set, an object larger
// than dest is returned unread with its Pending, else the Pending is nil.
func (c *Reads) getOne(key string, dest [][]byte, large bool) (int64, *Pending) {
	ctx, cancel := c.ctx()
	defer cancel()
	var begun *transfer.Begun
	sp, ok := c.spots.get(key, time.Now())
	if ok && capacity(dest) >= sp.size {
		if peer, known := c.peers.get(sp.rep.SegID); known {
			if bufs, _, err := transfer.Trim(dest, nil, sp.size); err == nil {
				begun = c.engine.Begin(ctx, transfer.Op{Peer: peer, Offset: sp.rep.Offset, Bufs: bufs, Grant: sp.rep.Grant})
			}
		}
	}
	began := time.Now()
	p, err := c.GetStart([]string{key})
	var spec error
	hit := false
	if begun != nil {
		spec = begun.Wait()
		// The read counts only if it ended inside the lease the answer
		// granted (as finish's reads): past it this client is no longer a
		// counted reader, and an upsert in place may have begun.
		hit = err == nil && spec == nil && sp.confirms(p.res[0]) && time.Now().Before(sp.until) && !expired(p.res[0], p.sent)
		c.specReads.Add(1)
		if hit {
			c.specHits.Add(1)
		}
		c.metrics.Spot(hit)
	}
	if err != nil {
		return int64(wire.CodeOf(err)), nil
	}
	if hit {
		out := []int64{int64(sp.size)}
		c.remember(p)
		c.noteRead(p, out, began)
		c.ends.endReads(p)
		return out[0], nil
	}
	if spec != nil {
		c.log.Debug("get: the read from the last known spot failed; reading as the master says", "key", key, "err", spec)
	}
	if n := p.Sizes()[0]; large && n > 0 && uint64(n) > capacity(dest) {
		return n, p
	}
	got := c.finish(p, [][][]byte{dest}, nil)[0]
	c.remember(p) // after the read: it resolves the replicas' segments
	return got, nil
}
