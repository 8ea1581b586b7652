// Package server drives the master's metadata core: it serves the core over
// the RPC protocol, runs the clock (Tick) and answers HTTP for operators
// (/metrics, /health, /get_all_segments, /get_all_keys, /query_key,
// /api/v1/tenant_quotas) and routers
// (/query_prefix: the leading pages of a request stored, per medium and
// host; a request it cannot read is refused whole, with one log line).
//
// It is used by the gostore-master binary and by the master embedded in a
// Python process (bindings), with the same flags.
//
// # Durability
//
// With a state directory (--snapshot_backup_dir) or under HA
// (--enable_ha) the core reports every durable change (master.Change)
// through Config.OnChange; the server encodes it and enqueues it on its
// change log (the local journal, or the leader's log on etcd), and the
// RPCs that change durable state, or hand out ranges, answer only once
// the log holds everything enqueued so far (durableOps). Write starts
// (writeOps) wait for that too, except that their own holds, and other
// puts' ends (master.Change.Completes: they free nothing a start could be
// handed), need only be written to the local journal: they are synced
// with the put's end, and
// a restart after a reboot of the machine quarantines restored segments
// for the writers whose holds it may have lost. Snapshots fold
// the log periodically, after a restore and at a clean stop, one at a
// time and while the core serves: the log's position is read first, then
// master.Core.WriteState streams a fuzzy snapshot (state version 2, the
// log's own records) into journal.SnapshotWith (the log on etcd takes the
// bytes whole); each logs one line and sets gostore_master_snapshot_*.
// stateOf reads version 2 and the older msgpack envelope (version 1).
// Start restores from the log before it serves, and snapshots the
// restored state in the background. The state directory's version-2
// snapshot is restored as a stream (savedState: journal
// Options.StreamSnapshot into master.Core.RestoreFrom), never whole in
// memory. Under HA, Start campaigns first (a standby following
// the log until it leads) and the server steps down (Done closes) when
// its leadership is lost. An HA master's state directory holds its
// snapshots only (the log is on etcd): the leader writes one once its
// records are all on etcd, then trims the log on etcd to a bounded tail
// (ha.Trim), and serves its newest at /ha/snapshot for standbys whose
// state the log no longer reaches (hastate.go). A master never leads with
// a state the log does not continue: it gives the leadership back.
//
// # Tenants
//
// Under --enable_multi_tenants (tenants.go) every handler of a request
// that names keys scopes them by the request's tenant (wire.ScopeKey)
// before it calls the core, and unscopes the keys it answers with; the
// SSD tier's requests (peeks naming no tenant, offloads, disk recovery
// and eviction) carry stored keys already and are not touched; a peek
// naming a tenant (the plan API's) is scoped. QueryTask answers only the
// caller's tenant's tasks; EvictUntil is refused under a quota policy.
// The HTTP queries take ?tenant_id=. The core sees stored keys only.
// Tenants separate cooperating clients: the tenant is the client's claim,
// and --auth is the access control.
//
// # Limits
//
// The limit flags reach the core (master.Config: key length, keys per
// request, object size) and the RPC server (rpc.ServerOptions: request
// bytes, connections and requests in flight per IP address). Before a
// handler runs, admit checks every request that names keys (wire.Keyed)
// against the core's limits, so a refusal leaves the core untouched; the
// RPC server answers and logs it (docs/operations.md, "Limits").
//
// # KV events
//
// With --enable_kv_events the core gets a bounded event queue
// (master.EventQueue, first an all-cleared event, held unbounded until the
// publisher starts so a restore's announcements all stay); kvevents.go drains it
// in one goroutine, never under a core lock, into numbered msgpack batches
// for every subscriber of its PUB socket, and keeps the last batches for
// the replay endpoint (a request of the wrong shape is logged once and
// ends its connection). Both sockets are zmtp.go's: zmq4's ZMTP
// handshake on listeners of our own, then frames read and written by
// zmtp.go (a peer's PING answered by a flushed PONG, a message written
// whole under the connection's lock), each peer's reads bounded
// (zmq4's sockets would allocate whatever a frame header claims), each
// subscriber with a queue of its own. The sockets carry no authentication: off loopback they
// need --allow_insecure. /kv_events/status and gostore_master_kv_events_*
// count what was published, dropped and skipped.
package server
