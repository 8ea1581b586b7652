// core.go defines Core, its configuration and the segment and client registry.

package master

import (
	"bytes"
	"hash/maphash"
	"math"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gostore/gostore/gostore/alloc"
	"github.com/gostore/gostore/gostore/grant"
	"github.com/gostore/gostore/gostore/wire"
)

// NumShards is the number of object-map shards, as in Mooncake's master: with
// many RPC goroutines contending, 1024 independent locks keep the chance that
// two calls wait on the same one small.
const NumShards = 1024

// maxSegmentSize bounds what a client may claim to contribute, so that
// sums over the pool cannot overflow (a segment is memory the client
// mapped: 256 TiB is far beyond any host).
const maxSegmentSize = 256 << 40

// MaxUCXDesc bounds a segment's UCX descriptor (wire.SegmentDesc.UCX), which
// the master keeps, journals and hands to every peer without reading it: a
// worker address and a packed remote key are a few hundred bytes on any
// transport (tens more per verbs device).
const MaxUCXDesc = 4 << 10

// allocAlign is the alignment of replica offsets inside a segment: a cache
// line, so that copies into neighbouring objects never share one.
const allocAlign = 64

// Config holds the master's policy knobs; zero fields take the defaults of
// PYTHON_API.md (AllowEvictSoftPinned excepted: its zero is "no").
type Config struct {
	DefaultKVLeaseTTL time.Duration // reads extend an object's lease this far
	ClientTTL         time.Duration // a client silent this long loses its segments
	SoftPinTTL        time.Duration // with_soft_pin protects this long after the last read
	// AllowEvictSoftPinned lets eviction take soft-pinned objects once the
	// others are gone.
	AllowEvictSoftPinned bool
	EvictionRatio        float64 // share of evictable objects one pass frees, at least
	HighWatermark        float64 // pool usage above which a pass runs
	// PutStartDiscardTimeout: an unfinished put older than this may be
	// taken over by a new put of its key. PutStartReleaseTimeout: the
	// abandoned put's ranges are reused only after this, so a slow writer
	// never scribbles over a newer object.
	PutStartDiscardTimeout time.Duration
	PutStartReleaseTimeout time.Duration
	// EnableOffload turns the SSD tier on: clients are asked to persist
	// objects (all completed ones, or with OffloadOnEvict only those
	// eviction picks), and eviction drops a memory replica only once the
	// object has a disk copy, so nothing is lost while disks have room.
	EnableOffload  bool
	OffloadOnEvict bool
	// MultiTenants: keys are stored scoped by tenant (wire.ScopeKey) and
	// each tenant's memory is accounted, for its quota (tenants.go).
	MultiTenants bool
	// OnChange, when set, is told every change of the durable state (see
	// Change), under the lock that made it: it must not block. The server
	// journals them.
	OnChange func(Change)
	// Events, when set, gets the KV events (kvevents.go): an object
	// becoming readable from memory or disk, no longer so, everything
	// cleared. Pushed under the lock that made the change; never blocks.
	Events *EventQueue
	// RestoreQuarantine: after Restore, how long restored segments' free
	// space takes no new replica (default 0: the journal names every range
	// a writer was given, and Restore holds exactly those).
	RestoreQuarantine time.Duration
	// Limits on one request (limits.go): the longest key, the most keys
	// and the largest object, the master's --max_key_bytes,
	// --max_batch_keys and --max_object_bytes; zero takes the default.
	MaxKeyBytes    int
	MaxBatchKeys   int
	MaxObjectBytes uint64
	// TakeoverSilence: a mount of a name another client holds takes the
	// segment over when that client has been silent (no ping, no call)
	// this long; a client heard from more recently is alive and the mount
	// gets -102 (takeover.go). Default DefaultTakeoverSilence, at most
	// ClientTTL/2.
	TakeoverSilence time.Duration
	// GrantSlack is added to the lifetime of every grant the master mints
	// (grants.go): clock skew between the master and the segments' owners,
	// and the RPC's time on the way.
	GrantSlack time.Duration
	// Promotion on hit and hot-object replicas (server.Options embeds
	// the same two structs, so a flag reaches the core as it was set).
	Promotion
	DynamicReplication
	// Now is the clock; Rand picks among segments. Both injected for tests.
	Now  func() time.Time
	Rand *rand.Rand
}

// Promotion is promotion on hit (promotion.go), Mooncake's --promotion_*:
// with PromotionOnHit, an object read from its disk copy alone at least
// PromotionAdmissionThreshold times (by a count-min sketch) is queued for
// its holder, at most PromotionQueueLimit queued or running, and each
// offload heartbeat of the holder takes PromotionMaxPerHeartbeat. Zero
// takes Mooncake's default.
type Promotion struct {
	PromotionOnHit              bool
	PromotionAdmissionThreshold int
	PromotionQueueLimit         int
	PromotionMaxPerHeartbeat    int
}

// DynamicReplication is hot-object replicas (hotreplicas.go), Mooncake's
// --dynamic_replication_*: DynamicReplicationMode is off (or ""), observe
// (count and export only) or enforce. An object used at least
// ceil(QPSThreshold × HeatWindow in seconds) times within one HeatWindow
// is hot; enforce gives it memory replicas on other segments up to
// MaxMemoryReplicas. Zero takes Mooncake's default.
type DynamicReplication struct {
	DynamicReplicationMode              string
	DynamicReplicationHeatWindow        time.Duration
	DynamicReplicationQPSThreshold      float64
	DynamicReplicationMaxMemoryReplicas int
}

// DefaultPutStartDiscardTimeout is Config.PutStartDiscardTimeout's default
// (Mooncake's put_start_discard_timeout_sec).
const DefaultPutStartDiscardTimeout = 30 * time.Second

func (c *Config) fill() {
	orDefault(&c.DefaultKVLeaseTTL, 10*time.Second)
	orDefault(&c.ClientTTL, 10*time.Second)
	orDefault(&c.SoftPinTTL, 30*time.Minute)
	orDefault(&c.EvictionRatio, 0.05)
	orDefault(&c.HighWatermark, 0.90)
	orDefault(&c.PutStartDiscardTimeout, DefaultPutStartDiscardTimeout)
	orDefault(&c.PutStartReleaseTimeout, 600*time.Second)
	orDefault(&c.DynamicReplicationHeatWindow, DefaultDynamicReplicationHeatWindow)
	orDefault(&c.DynamicReplicationQPSThreshold, DefaultDynamicReplicationQPSThreshold)
	orDefault(&c.DynamicReplicationMaxMemoryReplicas, DefaultDynamicReplicationMaxMemoryReplicas)
	orDefault(&c.PromotionAdmissionThreshold, DefaultPromotionAdmissionThreshold)
	orDefault(&c.PromotionQueueLimit, DefaultPromotionQueueLimit)
	orDefault(&c.PromotionMaxPerHeartbeat, DefaultPromotionMaxPerHeartbeat)
	orDefault(&c.MaxKeyBytes, DefaultMaxKeyBytes)
	orDefault(&c.MaxBatchKeys, DefaultMaxBatchKeys)
	orDefault(&c.MaxObjectBytes, DefaultMaxObjectBytes)
	orDefault(&c.GrantSlack, DefaultGrantSlack)
	orDefault(&c.TakeoverSilence, min(DefaultTakeoverSilence, c.ClientTTL/2))
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Rand == nil {
		c.Rand = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
}

// orDefault sets *p to def where it holds its type's zero, the value a
// Config field leaves for "Mooncake's default".
func orDefault[T comparable](p *T, def T) {
	var zero T
	if *p == zero {
		*p = def
	}
}

// Core is the metadata state machine. All methods are safe for concurrent use.
type Core struct {
	cfg    Config
	seed   maphash.Seed
	shards [NumShards]shard
	ledger *tenantLedger // the tenants' accounts; nil without MultiTenants

	randMu sync.Mutex // guards cfg.Rand

	segs struct {
		sync.RWMutex
		byID   map[uint64]*segment
		byName map[string]*segment
		list   []*segment // mounted segments; replaced, never changed in place
		nextID uint64
	}
	clients struct {
		sync.Mutex
		lastSeen map[string]time.Time
		// pinged holds the clients that pinged since they were last
		// unknown. Any call keeps a client alive, but only a ping answers
		// "known": a client whose first call to a restarted master is not
		// a ping is still told, by its next ping, to mount again.
		pinged map[string]bool
		// left holds clients that closed, until expireClients forgets them
		// a ClientTTL later: an RPC of theirs still on the way must not
		// bring them back to expire, and their disk copies stay known as
		// long as a silent client's would (a restart on the same directory
		// claims them back).
		left map[string]time.Time
	}
	discarded struct {
		sync.Mutex
		list []discardedPut // in release order
	}
	// evictSoon asks the next Tick for an eviction pass (an allocation
	// failed). reclaimable is what the last pass found it could free, now
	// or once disk copies exist: a writer refused for space waits while it
	// is positive (see noSpace).
	evictSoon   atomic.Bool
	reclaimable atomic.Int64
	// usageBits is the pool's usage (math.Float64bits) as the last Tick
	// saw it: what promotion's watermark gate reads on a get, which must
	// not take every segment's lock.
	usageBits atomic.Uint64
	epochs    atomic.Uint64
	// placements names replica sets a task or a restart made (see
	// wire.GetResult.Placed). It starts at a random point in each master
	// process: the names are not durable, and one minted before a restart
	// must not come back after it.
	placements atomic.Uint64
	holds      atomic.Uint64 // ids of ranges held out of use (see holdRanges)
	// held mirrors the holds as the journal knows them (only when
	// journaling): their changes are reported under its lock, and
	// WriteState reads it under the same lock (see WriteState).
	held struct {
		sync.Mutex
		byID map[uint64]DurableHold
	}
	// reclaimCursor is the next shard reclaimAbandoned looks at.
	reclaimCursor atomic.Int64
	tasks         taskTable
	offload       offloadQueues // per client: keys to persist
	promo         promotions    // promotion on hit (promotion.go)
	hot           hotReplicas   // hot-object replicas (hotreplicas.go)
	drops         offloadQueues // per SSD directory: disk copies to delete
	plan          planMembers   // segments hosting plan objects, by rank
	tiers         struct {      // client → its SSD directory
		sync.Mutex
		byClient map[string]string
		drained  map[string]bool // clients whose SSD tier left (UnmountLocalDisk)
	}
	stats Stats
}

// Stats are monotonically increasing counters the server exports.
type Stats struct {
	PutStarts, PutEnds, PutRevokes, Gets, GetMisses, Removes atomic.Int64
	AllocFailures, ClientsExpired, ClientsLeft, FreeErrors   atomic.Int64
	PutsTakenOver, PutsOfDeadClients, DiscardedReleased      atomic.Int64
	EvictionPasses, EvictedObjects, EvictedBytes             atomic.Int64
	UpsertStarts, UpsertsInPlace, WritesPreempted            atomic.Int64
	TasksCreated, TasksSucceeded, TasksFailed                atomic.Int64
	Offloaded, EvictionsOffloadWait, DiskRecovered           atomic.Int64
	PutsReclaimed                                            atomic.Int64
	// ClientsTakenOver counts dead clients whose segment a new client of
	// the same name took over (takeover.go).
	ClientsTakenOver atomic.Int64
	// EvictionPassesEffective counts the passes that evicted objects or
	// asked for the disk copies that let them evict.
	EvictionPassesEffective atomic.Int64
	// Discarded counts the writes whose ranges went to the quarantine
	// (DiscardedReleased, those that came out of it).
	Discarded atomic.Int64
}

// roomFreed counts the events that free room in the pool, or let
// eviction free it: a writer waiting for room watches it move.
func (st *Stats) roomFreed() uint64 {
	return uint64(st.EvictedObjects.Load() + st.Offloaded.Load() + st.Removes.Load() + st.PutRevokes.Load() +
		st.PutsReclaimed.Load() + st.DiscardedReleased.Load() + st.PutsOfDeadClients.Load() +
		st.ClientsLeft.Load() + st.ClientsExpired.Load() + st.ClientsTakenOver.Load())
}

type shard struct {
	mu      sync.Mutex
	objects map[string]*object
	// n is len(objects), kept for readers that take no lock (objectCount):
	// every insert and delete goes through set and remove.
	n atomic.Int64
	// heat holds the heat windows of the shard's recently used objects
	// (hotreplicas.go; nil while dynamic replication is off), by object:
	// a pointer hashes faster than a key, and a rewritten key starts cold.
	heat        map[*object]heatWindow
	heatPruneAt int64 // a full heat map is not looked through before then
	// ledger, under MultiTenants, is refunded what a deleted object was
	// charged (tenants.go).
	ledger *tenantLedger
	// spread rotates the replicas its objects' reads see (enforce mode):
	// a counter per shard, under its lock, not one all reads contend on.
	spread uint32
}

// set stores o under key; the caller holds mu.
func (sh *shard) set(key string, o *object) {
	if sh.ledger != nil {
		if old := sh.objects[key]; old != nil && old != o {
			sh.ledger.uncharge(key, old)
		}
	}
	sh.objects[key] = o
	sh.n.Store(int64(len(sh.objects)))
}

// remove deletes key; the caller holds mu.
func (sh *shard) remove(key string) {
	if sh.ledger != nil {
		if old := sh.objects[key]; old != nil {
			sh.ledger.uncharge(key, old)
		}
	}
	if sh.heat != nil { // a removed object's heat window goes with it
		if o := sh.objects[key]; o != nil {
			delete(sh.heat, o)
		}
	}
	delete(sh.objects, key)
	sh.n.Store(int64(len(sh.objects)))
}

// sweepChunk bounds the objects a sweep looks at per hold of a shard's
// lock: at 10^8 objects a shard holds ~10^5, and a call on one of its keys
// must not wait for all of them.
const sweepChunk = 1024

// sweep calls f on every object of sh with sh.mu held, taking the lock for
// at most sweepChunk objects at a time: a larger shard's keys are listed
// under one hold (no object is looked at: a fraction of a millisecond at
// 10^5 keys), then looked up again a chunk at a time. f may delete the
// object. A key inserted during the sweep may be missed; one deleted is
// not seen; one replaced is seen with its new object, so f decides on what
// the shard holds now.
func (sh *shard) sweep(f func(key string, o *object)) {
	sh.mu.Lock()
	if len(sh.objects) <= sweepChunk {
		for key, o := range sh.objects {
			f(key, o)
		}
		sh.mu.Unlock()
		return
	}
	keys := make([]string, 0, len(sh.objects))
	for key := range sh.objects {
		keys = append(keys, key)
	}
	sh.mu.Unlock()
	for len(keys) > 0 {
		n := min(sweepChunk, len(keys))
		sh.mu.Lock()
		for _, key := range keys[:n] {
			if o, ok := sh.objects[key]; ok {
				f(key, o)
			}
		}
		sh.mu.Unlock()
		keys = keys[n:]
	}
}

type segment struct {
	desc wire.SegmentDesc
	mu   sync.Mutex // guards alloc, dead and drainAt; desc.UCX with segs' lock (a remount changes it)
	// alloc owns the segment's byte ranges.
	alloc *alloc.Allocator
	dead  bool
	// drainAt, when not 0, is when a graceful unmount removes the
	// segment (ns on the core's clock): until then it keeps serving its
	// objects but takes no new replicas.
	drainAt int64
	// noDisk: the owner's SSD tier left (UnmountLocalDisk): desc.Offload
	// no longer holds.
	noDisk atomic.Bool
	// quarantineUntil: a restored segment's free space takes no new
	// replica before then (ns on the core's clock; see Restore).
	quarantineUntil int64
	// key signs the segment's grants (nil: its owner gave none, and its
	// ranges come without grants). A remount may replace it.
	key atomic.Pointer[segmentKey]
}

// segmentKey is a segment's grant key: as the owner sent it (for the
// durable state) and ready to sign.
type segmentKey struct {
	secret []byte
	signer *grant.Key
}

// New returns an empty core.
func New(cfg Config) *Core {
	cfg.fill()
	c := &Core{cfg: cfg, seed: maphash.MakeSeed()}
	if cfg.MultiTenants {
		c.ledger = &tenantLedger{}
	}
	for i := range c.shards {
		c.shards[i].objects = make(map[string]*object)
		c.shards[i].ledger = c.ledger
	}
	c.segs.byID = make(map[uint64]*segment)
	c.segs.byName = make(map[string]*segment)
	c.clients.lastSeen = make(map[string]time.Time)
	c.clients.pinged = make(map[string]bool)
	c.clients.left = make(map[string]time.Time)
	c.tasks.byID = make(map[string]*task)
	c.hot.init(&c.cfg)
	if cfg.PromotionOnHit && cfg.EnableOffload {
		c.promo.sketch = new(countMinSketch)
	}
	c.placements.Store(c.cfg.Rand.Uint64())
	return c
}

// Stats returns the core's counters.
func (c *Core) Stats() *Stats { return &c.stats }

// Config returns the configuration in force (defaults filled in).
func (c *Core) Config() Config { return c.cfg }

// now reads the injected clock as nanoseconds.
func (c *Core) now() int64 { return c.cfg.Now().UnixNano() }

func (c *Core) shardOf(key string) *shard {
	return &c.shards[maphash.String(c.seed, key)%NumShards]
}

// Ping records that a client is alive. It reports false when the client was
// unknown (new, expired, or the master restarted): the client must then mount
// its segments again.
func (c *Core) Ping(clientID string) bool {
	if clientID == "" {
		return false
	}
	now := c.cfg.Now()
	c.clients.Lock()
	defer c.clients.Unlock()
	if _, gone := c.clients.left[clientID]; gone {
		return false
	}
	known := c.clients.pinged[clientID]
	c.clients.pinged[clientID] = true
	c.clients.lastSeen[clientID] = now
	return known
}

// MountSegment adds a client's memory to the pool and returns its new ID
// (Mount without the takeover's report).
func (c *Core) MountSegment(d wire.SegmentDesc, grantKey []byte) (uint64, error) {
	r, err := c.Mount(d, grantKey)
	return r.ID, err
}

// MountResult is what Mount did.
type MountResult struct {
	ID uint64
	// TookOver is the client whose segment of the same name this mount
	// took over (it was silent past TakeoverSilence: dead), "" if none.
	TookOver string
	// Silent is how long TookOver had not been heard from.
	Silent time.Duration
}

// Mount adds a client's memory to the pool and returns its new ID.
// grantKey is the key the owner verifies the segment's grants with
// (grant.KeySize bytes; nil from an owner that checks none: its ranges get
// no grants). Mounting a name the same client already mounted returns the
// existing ID (a retried RPC must not fail, and an owner remounting after
// a restart finds its segment), taking the key it brings. A name another
// client holds is taken over when that client is dead (takeover.go), else
// -102 naming the holder.
func (c *Core) Mount(d wire.SegmentDesc, grantKey []byte) (MountResult, error) {
	defer c.refreshShares() // the tenants' shares follow the pool's capacity at once
	var res MountResult
	if d.Name == "" || d.ClientID == "" || d.Size < allocAlign || d.Size > maxSegmentSize {
		return res, wire.Errorf(wire.ErrInvalidParams, "segment needs a name, a client id and %d bytes to %d TiB", allocAlign, maxSegmentSize>>40)
	}
	if len(d.UCX) > MaxUCXDesc {
		return res, wire.Errorf(wire.ErrInvalidParams, "segment %q: a UCX descriptor of %d bytes, at most %d", d.Name, len(d.UCX), MaxUCXDesc)
	}
	var key *segmentKey
	if grantKey != nil {
		signer, ok := grant.NewKey(grantKey)
		if !ok {
			return res, wire.Errorf(wire.ErrInvalidParams, "a grant key of %d bytes, not %d", len(grantKey), grant.KeySize)
		}
		key = &segmentKey{secret: append([]byte(nil), grantKey...), signer: signer}
	}
	c.touch(d.ClientID)
	id, dead, silent, err := c.mountOnce(d, key)
	if dead != "" {
		// The holder is gone: retire it as if it had left, then mount.
		// Once: a name some other client mounted meanwhile is theirs.
		c.retire(dead)
		res.TookOver, res.Silent = dead, silent
		id, _, _, err = c.mountOnce(d, key)
	}
	res.ID = id
	return res, err
}

// mountOnce mounts d unless its name is held by another client; dead is
// that client when it may be taken over (nothing is mounted then).
func (c *Core) mountOnce(d wire.SegmentDesc, key *segmentKey) (id uint64, dead string, silent time.Duration, err error) {
	c.segs.Lock()
	defer c.segs.Unlock()
	// Under segs' lock: a leave either came first (refused here) or sweeps
	// this segment after us (dropClients takes segs' lock).
	c.clients.Lock()
	_, gone := c.clients.left[d.ClientID]
	c.clients.Unlock()
	if gone {
		// A remount that crossed the client's leave: nobody would ever
		// unmount it.
		return 0, "", 0, wire.Errorf(wire.ErrIllegalClient, "client %s has left", d.ClientID)
	}
	if d.Offload && c.diskUnmounted(d.ClientID) {
		d.Offload = false
	}
	if old, ok := c.segs.byName[d.Name]; ok {
		if old.desc.ClientID == d.ClientID && old.desc.Size == d.Size && old.desc.ShmPath == d.ShmPath {
			newKey := key != nil && !old.hasKey(key.secret)
			if newKey {
				// A segment restored without its key (a state written
				// before grants), or an owner that made a new one.
				old.key.Store(key)
			}
			newUCX := !bytes.Equal(old.desc.UCX, d.UCX)
			if newUCX {
				// The owner exposes its memory afresh at each mount and
				// closes the old exposure once this one succeeded: peers
				// must get the new one. Under s.mu too: Segments copies
				// desc under it alone.
				old.mu.Lock()
				old.desc.UCX = bytes.Clone(d.UCX)
				old.mu.Unlock()
			}
			if newKey || newUCX {
				c.recordSegment(old, true)
			}
			return old.desc.ID, "", 0, nil
		}
		if old.desc.ClientID == d.ClientID {
			return 0, "", 0, wire.Errorf(wire.ErrSegmentAlreadyExists, "segment %q is already mounted by this client with another size or memory", d.Name)
		}
		silent, dead := c.holderSilence(old.desc.ClientID)
		if !dead {
			return 0, "", 0, wire.Errorf(wire.ErrSegmentAlreadyExists,
				"segment %q is held by live client %s (at %s, heard from %v ago): a client takes a name over only from one silent for %v",
				d.Name, old.desc.ClientID, old.desc.TransferAddr, silent.Round(time.Millisecond), c.cfg.TakeoverSilence)
		}
		return 0, old.desc.ClientID, silent, wire.Errorf(wire.ErrSegmentAlreadyExists, "segment %q: its holder %s is being retired", d.Name, old.desc.ClientID)
	}
	c.segs.nextID++
	d.ID = c.segs.nextID
	s := &segment{desc: d, alloc: alloc.New(d.Size, allocAlign)}
	s.key.Store(key)
	c.segs.byID[d.ID] = s
	c.segs.byName[d.Name] = s
	c.segs.list = append(c.segs.list, s)
	c.recordSegment(s, true)
	return d.ID, "", 0, nil
}

// UnmountSegment removes a client's segment from the pool; replicas there are
// dropped and objects left without replicas disappear.
func (c *Core) UnmountSegment(clientID, name string) error {
	c.segs.Lock()
	s, ok := c.segs.byName[name]
	if !ok {
		c.segs.Unlock()
		return wire.Errorf(wire.ErrSegmentNotFound, "segment %q is not mounted", name)
	}
	if s.desc.ClientID != clientID {
		c.segs.Unlock()
		return wire.Errorf(wire.ErrIllegalClient, "segment %q belongs to another client", name)
	}
	c.removeSegmentLocked(s)
	c.segs.Unlock()
	c.dropReplicasOn(s)
	return nil
}

// DrainSegment is the graceful unmount of a client's segment: from now on
// it takes no new replicas (puts, copies, moves go elsewhere) while the
// objects it holds stay readable, and the first Tick at or after now+grace
// removes it as UnmountSegment would. grace <= 0 unmounts at once. Asking
// again while it drains keeps the earlier deadline.
func (c *Core) DrainSegment(clientID, name string, grace time.Duration) error {
	defer c.refreshShares()
	if grace <= 0 {
		return c.UnmountSegment(clientID, name)
	}
	c.segs.RLock()
	defer c.segs.RUnlock()
	s, ok := c.segs.byName[name]
	if !ok {
		return wire.Errorf(wire.ErrSegmentNotFound, "segment %q is not mounted", name)
	}
	if s.desc.ClientID != clientID {
		return wire.Errorf(wire.ErrIllegalClient, "segment %q belongs to another client", name)
	}
	at := c.now() + int64(grace)
	s.mu.Lock()
	if s.drainAt == 0 || at < s.drainAt {
		s.drainAt = at
	}
	s.mu.Unlock()
	return nil
}

// finishDrains removes the segments whose grace period ended by now.
func (c *Core) finishDrains(now int64) {
	c.segs.Lock()
	var done []*segment
	for _, s := range c.segs.list { // removeSegmentLocked replaces the list, never edits it
		s.mu.Lock()
		due := s.drainAt != 0 && s.drainAt <= now
		s.mu.Unlock()
		if due {
			c.removeSegmentLocked(s)
			done = append(done, s)
		}
	}
	c.segs.Unlock()
	for _, s := range done {
		c.dropReplicasOn(s)
	}
}

// removeSegmentLocked takes s out of the registry and marks it dead; the
// caller holds segs' write lock and sweeps the shards afterwards.
func (c *Core) removeSegmentLocked(s *segment) {
	delete(c.segs.byID, s.desc.ID)
	delete(c.segs.byName, s.desc.Name)
	// Copy on write: readers keep using the slice they loaded under the
	// read lock after releasing it (placement, usage).
	kept := make([]*segment, 0, len(c.segs.list))
	for _, x := range c.segs.list {
		if x != s {
			kept = append(kept, x)
		}
	}
	c.segs.list = kept
	s.mu.Lock()
	s.dead = true
	s.mu.Unlock()
	c.recordSegment(s, false)
}

// dropReplicasOn sweeps every shard for replicas on the dead segment s.
// An object left without memory replicas lives on if it has a disk copy.
func (c *Core) dropReplicasOn(s *segment) {
	for i := range c.shards {
		sh := &c.shards[i]
		sh.sweep(func(key string, o *object) {
			if o.dropReplicasOn(s) {
				c.settle(sh, key, o)
			}
		})
	}
}

// QuerySegments returns the descriptors of the given segment IDs that are
// still mounted.
func (c *Core) QuerySegments(ids []uint64) []wire.SegmentDesc {
	c.segs.RLock()
	defer c.segs.RUnlock()
	out := make([]wire.SegmentDesc, 0, len(ids))
	for _, id := range ids {
		if s, ok := c.segs.byID[id]; ok {
			out = append(out, s.desc)
		}
	}
	return out
}

// SegmentInfo is a segment's descriptor with its allocator figures.
type SegmentInfo struct {
	wire.SegmentDesc
	Used, LargestFree uint64
	FreeExtents       int
	// Draining: a graceful unmount is under way (no new replicas land
	// here; the segment goes when its grace period ends).
	Draining bool
}

// Segments lists the mounted segments sorted by name.
func (c *Core) Segments() []SegmentInfo {
	c.segs.RLock()
	list := c.segs.list // copy-on-write: safe to keep after RUnlock
	c.segs.RUnlock()
	out := make([]SegmentInfo, 0, len(list))
	for _, s := range list {
		s.mu.Lock()
		out = append(out, SegmentInfo{SegmentDesc: s.desc, Used: s.alloc.Used(),
			LargestFree: s.alloc.LargestFree(), FreeExtents: s.alloc.FreeExtents(), Draining: s.drainAt != 0})
		s.mu.Unlock()
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func (c *Core) touch(clientID string) {
	now := c.cfg.Now()
	c.clients.Lock()
	if _, gone := c.clients.left[clientID]; !gone {
		c.clients.lastSeen[clientID] = now
	}
	c.clients.Unlock()
}

// Tick runs time-driven work and returns the IDs of clients it expired:
//   - clients silent for ClientTTL are forgotten, their segments unmounted
//     and their unfinished puts dropped;
//   - segments whose graceful unmount (DrainSegment) is due are removed;
//   - quarantined ranges of taken-over puts are released when due;
//   - hot objects get their extra replica tasks (hotreplicas.go);
//   - an eviction pass runs when usage is above HighWatermark or a put
//     found no space since the last Tick, after hot objects' extra
//     replicas are dropped.
func (c *Core) Tick() []string {
	now := c.cfg.Now()
	expired := c.expireClients(now)
	dead := make(map[string]bool, len(expired))
	for _, id := range expired {
		dead[id] = true
	}
	c.finishDrains(now.UnixNano())
	c.endQuarantines(now.UnixNano())
	c.tickTasks(now.UnixNano(), dead)
	c.reclaimAbandoned(now.UnixNano())
	c.releaseDiscarded(now.UnixNano())
	u := c.usage()
	c.usageBits.Store(math.Float64bits(u))
	if c.tickHotReplicas(now.UnixNano(), u) {
		u = c.usage()
	}
	c.refreshShares()
	due := c.evictSoon.Swap(false)
	if due || u > c.cfg.HighWatermark {
		// Hot objects' extra replicas go first, up to what a pass would
		// free; objects are evicted when the pool is still above the
		// watermark, or a writer waits for a pass.
		_, capacity := c.poolBytes()
		want := uint64(max(c.cfg.EvictionRatio, u-c.cfg.HighWatermark+c.cfg.EvictionRatio) * float64(capacity))
		// A writer waiting for a pass has it once the drops freed a
		// pass's worth: evicting on top would take objects for nothing.
		freed := c.dropHotReplicas(now.UnixNano(), want)
		if (due && freed < want) || c.usage() > c.cfg.HighWatermark {
			c.Evict()
		}
		c.usageBits.Store(math.Float64bits(c.usage()))
	}
	return expired
}

func (c *Core) expireClients(now time.Time) []string {
	var expired []string
	c.clients.Lock()
	for id, seen := range c.clients.lastSeen {
		if now.Sub(seen) > c.cfg.ClientTTL {
			expired = append(expired, id)
			delete(c.clients.lastSeen, id)
			delete(c.clients.pinged, id)
		}
	}
	var gone map[string]bool // left a ClientTTL ago
	for id, at := range c.clients.left {
		if now.Sub(at) > c.cfg.ClientTTL {
			delete(c.clients.left, id)
			if gone == nil {
				gone = make(map[string]bool)
			}
			gone[id] = true
		}
	}
	c.clients.Unlock()
	if gone != nil {
		c.forgetClients(gone, true)
	}
	if len(expired) == 0 {
		return nil
	}
	c.dropClients(expired, true)
	c.stats.ClientsExpired.Add(int64(len(expired)))
	sort.Strings(expired)
	return expired
}

// ClientLeave forgets a client that closed: its segments are unmounted
// (objects living only there disappear), its unfinished puts go, and it is
// not expired later. Its SSD copies stay known for a ClientTTL, as a
// silent client's would. It reports whether the client was known.
func (c *Core) ClientLeave(clientID string) bool {
	if clientID == "" {
		return false
	}
	known := c.leave(clientID)
	if known {
		c.stats.ClientsLeft.Add(1)
	}
	return known
}

// leave forgets a client as ClientLeave says; it reports whether the
// client was known.
func (c *Core) leave(clientID string) bool {
	c.clients.Lock()
	_, known := c.clients.lastSeen[clientID]
	delete(c.clients.lastSeen, clientID)
	delete(c.clients.pinged, clientID)
	c.clients.left[clientID] = c.cfg.Now()
	c.clients.Unlock()
	c.dropClients([]string{clientID}, false)
	return known
}

// Clients is the number of clients the master considers alive.
func (c *Core) Clients() int {
	c.clients.Lock()
	defer c.clients.Unlock()
	return len(c.clients.lastSeen)
}

// dropClients unmounts the segments of clients that are gone and forgets
// what they left behind (their disk copies too, with disks).
func (c *Core) dropClients(ids []string, disks bool) {
	gone := make(map[string]bool, len(ids))
	for _, id := range ids {
		gone[id] = true
	}
	c.segs.Lock()
	var dead []*segment
	for _, s := range c.segs.list { // removeSegmentLocked replaces the list, never edits it
		if gone[s.desc.ClientID] {
			c.removeSegmentLocked(s)
			dead = append(dead, s)
		}
	}
	c.segs.Unlock()
	for _, s := range dead {
		c.dropReplicasOn(s)
	}
	c.forgetClients(gone, disks)
}

// Totals sums the pool: segments, capacity, used bytes, objects.
type Totals struct {
	Segments                int
	Capacity, Used, Objects uint64
}

// Totals computes the pool's totals (for metrics).
func (c *Core) Totals() Totals {
	var t Totals
	for _, s := range c.Segments() {
		t.Segments++
		t.Capacity += s.Size
		t.Used += s.Used
	}
	t.Objects = uint64(c.objectCount())
	return t
}

// Census counts objects by what they hold, for gauges.
type Census struct {
	SoftPinned int // soft pin still running
	InMemory   int // with a complete memory replica
	OnDisk     int // with a disk copy in an SSD tier
}

// Census looks at every object once: a scrape's cost, O(objects) with
// each shard locked a chunk at a time (shard.sweep), never all at once.
func (c *Core) Census() Census {
	var n Census
	now := c.now()
	for i := range c.shards {
		c.shards[i].sweep(func(_ string, o *object) {
			if o.softPinned(now) {
				n.SoftPinned++
			}
			if o.complete() {
				n.InMemory++
			}
			if o.onDisk() != nil {
				n.OnDisk++
			}
		})
	}
	return n
}

// Quarantined is what the quarantine holds: ranges of writes taken over or
// abandoned, not reused until PutStartReleaseTimeout has passed.
func (c *Core) Quarantined() (writes int, bytes uint64) {
	c.discarded.Lock()
	defer c.discarded.Unlock()
	for _, d := range c.discarded.list {
		bytes += d.size * uint64(len(d.replicas))
	}
	return len(c.discarded.list), bytes
}
