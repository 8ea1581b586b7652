// readdone.go defines readEnds: how this client tells the master it ended
// its reads (ReadDone), in batches and on the back of its next call.

package client

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gostore/gostore/gostore/rpc"
	"github.com/gostore/gostore/gostore/wire"
)

// readEnds tells the master which reads this client ended (ReadDone) and
// owns what waits to be told: readsDone (the batch the background sender
// writes) and laterReads (keys whose ReadDone rides on the next call to
// the master). Locks: laterReads.mu and keyBatch's own, each held only
// inside its methods; no other lock is held while they are.
type readEnds struct {
	*core
	readsDone keyBatch // ReadDone of ended reads
	// laterReads: keys whose ReadDone waits for the next call;
	// readDoneAlone counts the gets that sent a waiting one first, on
	// its own (for tests)
	laterReads    laterReads
	readDoneAlone atomic.Int64
}

// endReads tells the master (in the background, batched) that this client
// no longer reads the objects p found.
func (c *readEnds) endReads(p *Pending) {
	if !p.read {
		return
	}
	p.read = false
	req := wire.KeysReq{ClientID: c.id}
	var bytes uint64
	for i, r := range p.res {
		if r.Code == wire.OK {
			req.Keys = append(req.Keys, p.keys[i])
			req.Epochs = append(req.Epochs, r.Epoch)
			bytes += r.Size
		}
	}
	if len(req.Keys) == 0 {
		return
	}
	// After a small read the ReadDone rides on this client's next call to
	// the master, in the same write (rpc.Client.NotifyLater), or goes on
	// its own after Config.ReadDoneWait when no call comes: no write of
	// its own on the reading thread, no thread woken. After a read of
	// more keys than laterReadMax, or when too many wait, the reading
	// thread writes it itself, without waiting for the answer; the
	// background sender takes the rest. (After a large read, the
	// master's handling of an immediate ReadDone landed in the next
	// read's copy: 16 MiB gets over shared memory lost 13-15 %, which a
	// woken sender, a moment later, did not cost.) After an error other
	// than ErrNotifyUnavailable the ReadDone may have been sent: it is not
	// sent again (a second one could end another reader's count), and the
	// master counts those readers until their leases end.
	if bytes > notifyReadBytes {
		c.addReadsDone(&req)
		return
	}
	ctx, cancel := c.ctx()
	var err error
	if wait := c.readDoneWait(); wait > 0 && c.laterReads.add(req.Keys) {
		err = c.master.NotifyLater(ctx, wire.OpReadDone, &req, wait)
	} else {
		err = c.master.Notify(ctx, wire.OpReadDone, &req)
	}
	cancel()
	if errors.Is(err, rpc.ErrNotifyUnavailable) {
		c.addReadsDone(&req)
	} else if err != nil {
		c.log.Debug("ReadDone not delivered", "keys", len(req.Keys), "err", err)
	}
}

// notifyReadBytes is the largest read whose ReadDone its own thread sends.
const notifyReadBytes = 1 << 20

// defaultReadDoneWait is Config.ReadDoneWait's default.
const defaultReadDoneWait = 500 * time.Microsecond

// readDoneWait is how long a small read's ReadDone waits for the next call
// to carry it (Config.ReadDoneWait); 0 or less: not at all.
func (c *readEnds) readDoneWait() time.Duration {
	if c.cfg.ReadDoneWait == 0 {
		return defaultReadDoneWait
	}
	return c.cfg.ReadDoneWait
}

// laterKeysMax bounds the keys whose ReadDone waits for the next call,
// and laterReadMax the keys of a read whose ReadDone may wait: past them,
// a ReadDone is written at once. They keep the check of each lookup's
// keys against those waiting short; a batch saves little by waiting.
const (
	laterKeysMax = 16
	laterReadMax = 4
)

// laterReads holds the keys whose ReadDone waits for the next call to the
// master (NotifyLater), for the next GetReplicas to check: it is emptied
// by each read's lookup, which carries them (so a key may stay here after
// another call carried its ReadDone: the check then sends nothing).
type laterReads struct {
	mu   sync.Mutex
	keys []string
}

// add records keys as waiting; false (nothing recorded) when they are
// more than laterReadMax or would pass laterKeysMax.
func (l *laterReads) add(keys []string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(keys) > laterReadMax || len(l.keys)+len(keys) > laterKeysMax {
		return false
	}
	l.keys = append(l.keys, keys...)
	return true
}

// overlap empties the set and reports whether it held one of keys.
func (l *laterReads) overlap(keys []string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.keys) == 0 {
		return false
	}
	hit := false
waiting:
	for _, w := range l.keys {
		for _, k := range keys {
			if k == w {
				hit = true
				break waiting
			}
		}
	}
	clear(l.keys)
	l.keys = l.keys[:0]
	return hit
}

func (c *readEnds) addReadsDone(req *wire.KeysReq) {
	for i, key := range req.Keys {
		c.readsDone.add(key, req.Epochs[i])
	}
}

// flushReadEnds returns once the master knows of every read this client
// ended: before its own upserts (its finished reads must not make them
// busy), the SSD tier's rewrites and Close.
func (c *readEnds) flushReadEnds() {
	ctx, cancel := c.ctx()
	if err := c.master.NotifyFlush(ctx); err != nil {
		c.log.Debug("ReadDone answers not read", "err", err)
	}
	c.readsDone.flush(ctx, c.master, c.id, c.log)
	cancel()
}
