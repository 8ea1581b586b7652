// grants.go defines how the master signs the ranges it hands out
// (gostore/grant): a write's replicas, a read's replicas under its lease,
// a task's sources and targets.

package master

import (
	"bytes"
	"time"

	"github.com/gostore/gostore/gostore/grant"
	"github.com/gostore/gostore/gostore/wire"
)

// DefaultGrantSlack is Config.GrantSlack's default: NTP keeps hosts
// within milliseconds of each other; seconds cover a badly kept clock and
// a slow RPC without stretching the window a grant stays usable by much.
const DefaultGrantSlack = 10 * time.Second

// Grant lifetimes, from the moment the master mints them (all plus
// Config.GrantSlack):
//   - a write (PutStart, UpsertStart): PutStartDiscardTimeout, after which
//     another put may take the key over anyway;
//   - a read (GetReplicas): the lease, after which the reader discards
//     what it read;
//   - a task: two PutStartDiscardTimeouts, for its read and its write (the
//     client bounds each by a call's timeout).
func (c *Core) writeGrantExpiry(now int64) int64 {
	return now + int64(c.cfg.PutStartDiscardTimeout+c.cfg.GrantSlack)
}

func (c *Core) readGrantExpiry(now int64) int64 {
	return now + int64(c.cfg.DefaultKVLeaseTTL+c.cfg.GrantSlack)
}

func (c *Core) taskGrantExpiry(now int64) int64 {
	return now + int64(2*c.cfg.PutStartDiscardTimeout+c.cfg.GrantSlack)
}

// wireReplica is r as a client sees it, with a grant to read (write
// false) or write its size bytes until expiry: none when its segment has
// no key.
func wireReplica(r replica, size uint64, write bool, expiry int64) wire.Replica {
	out := wire.Replica{SegID: r.seg.desc.ID, Offset: r.offset}
	if k := r.seg.key.Load(); k != nil {
		out.Grant = grant.Mint(nil, k.signer, grant.Fields{SegID: r.seg.desc.ID, Offset: r.offset, Length: size,
			Write: write, Expiry: expiry})
	}
	return out
}

// hasKey reports whether secret is s's grant key now.
func (s *segment) hasKey(secret []byte) bool {
	k := s.key.Load()
	return k != nil && bytes.Equal(k.secret, secret)
}

// keySecret is s's grant key as its owner sent it (nil: none).
func (s *segment) keySecret() []byte {
	if k := s.key.Load(); k != nil {
		return k.secret
	}
	return nil
}
