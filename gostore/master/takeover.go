// takeover.go defines when a mount may take over a segment name another
// client holds: a storage node restarted under its old name (a pod
// restart, a fixed local_hostname host:port) must not wait client_ttl for
// its dead predecessor to expire, and a live client's segment is never
// taken.

package master

import "time"

// DefaultTakeoverSilence is Config.TakeoverSilence's default: more than
// three of the clients' default ping intervals (300 ms), so a live
// client, which pings on time, is never mistaken for a dead one.
const DefaultTakeoverSilence = time.Second

// holderSilence says how long clientID, a segment's holder, has not been
// heard from, and whether that makes it dead for a takeover. The proof of
// death is in two parts. The new client holds the name's listener: a
// client names its segment after the host:port its transfer server has
// bound, which a live holder on the same host would still hold (even
// stopped), so only a process that is gone, or one on another host (or
// network namespace) with the same name, lets it be bound. The holder's
// silence rules out the second: a live client pings every ping interval
// wherever it runs. A client the core does not know (restored from a
// journal and not heard from since counts from the restore) is silent
// since the start. Called under segs' lock (clients' lock is taken after
// it, as everywhere).
func (c *Core) holderSilence(clientID string) (silent time.Duration, dead bool) {
	now := c.cfg.Now()
	c.clients.Lock()
	seen, ok := c.clients.lastSeen[clientID]
	c.clients.Unlock()
	if !ok {
		// Neither alive nor left: its segment outlived it (it is being
		// dropped right now); take it over.
		return c.cfg.ClientTTL, true
	}
	silent = now.Sub(seen)
	return silent, silent >= c.cfg.TakeoverSilence
}

// retire forgets a client whose segment a new client takes over, as if it
// had left (ClientLeave): its segments go with the objects only they held
// (the memory died with the process), its unfinished writes are dropped,
// and a late call of its own is refused. Its disk copies stay known, bound
// to their directory: the new client's SSD tier, opened on the same
// directory, claims them back (RecoverDisk); those nobody claims are
// forgotten a ClientTTL later, as a left client's are.
func (c *Core) retire(clientID string) {
	c.leave(clientID)
	c.stats.ClientsTakenOver.Add(1)
}
