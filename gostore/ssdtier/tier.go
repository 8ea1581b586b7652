// tier.go defines Tier: recovery at start, the offload heartbeat feeding
// the offload pipeline (policy, precondition, upgrade = pinning the memory
// replica, transfer = writing the disk and telling the master), and the
// staging RPCs it serves to readers of its disk copies.

package ssdtier

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gostore/gostore/gostore/internal/burstlog"
	"github.com/gostore/gostore/gostore/pipeline"
	"github.com/gostore/gostore/gostore/rpc"
	"github.com/gostore/gostore/gostore/storage"
	"github.com/gostore/gostore/gostore/transfer"
	"github.com/gostore/gostore/gostore/wire"
)

const (
	// heartbeatMax caps the objects (and drops) one offload heartbeat
	// takes; a full answer is followed by another at once.
	heartbeatMax = 1024
	// recoverBatch caps the keys of one RecoverDisk RPC.
	recoverBatch = 4096
	// maxStageKeys caps the keys a peer may stage in one request.
	maxStageKeys = 1 << 16
	// offloadBatchBytes bounds what one upgrade pins and one backend call
	// writes: a bucket's worth.
	offloadBatchBytes = storage.DefaultBucketSizeLimit
)

// Tier is a client's SSD tier. Its methods are safe for concurrent use.
type Tier struct {
	host Host
	log  *slog.Logger
	fs   *storage.FileStorage

	staging  *transfer.LocalSegment // the ClientBuffer's memory, shared with peers
	stageSrv *transfer.Server       // serves it to peers on other hosts
	bufDesc  wire.SegmentDesc       // how peers reach it
	rpc      *rpc.Server            // StageOffloaded / ReleaseStaged
	endpoint string                 // the rpc server's address: our disk copies' endpoint

	pipe       *pipeline.Pipeline[string]
	enqueueCtx context.Context // parent of every item's token; cancelled at close
	cancel     context.CancelFunc

	mu             sync.Mutex
	inflight       map[string]bool        // keys in the pipeline -> a caller asked for it (it waits for its write)
	pins           map[string]*offloadPin // keys past the upgrade
	recoverPending atomic.Bool            // the master may lack what the directory holds
	unmounted      atomic.Bool            // Unmount ran: no offloads, no recovery
	wake           chan struct{}
	stop           chan struct{}
	wg             sync.WaitGroup
	closeOnce      sync.Once

	stats    counters
	failures burstlog.Log // offload failures
}

// counters count the tier's work (a Stats snapshot reports them).
type counters struct {
	offloaded, offloadFailed, dropped, recovered, staleDropped atomic.Int64
	staged, stageFailed, corrupt                               atomic.Int64
	promoted, promoteFailed                                    atomic.Int64
}

// Stats is a snapshot of the tier's counters.
type Stats struct {
	Offloaded, OffloadFailed, Dropped, Recovered, StaleDropped int64
	Staged, StageFailed, Corrupt                               int64
	// Promoted (PromoteFailed): disk copies loaded back into memory at
	// the master's request (that failed).
	Promoted, PromoteFailed int64
	Objects                 int
	Bytes                   uint64
	Pipeline                pipeline.Stats
}

// offloadPin is one object pinned for its offload: its bytes in our
// segment and the epoch they belong to.
type offloadPin struct {
	val       []byte
	epoch     uint64
	persisted bool // a disk copy exists already: nothing to do
	err       error
}

// Open opens the tier on cfg.Path: the host opens it before it mounts its
// segment, so the segment is announced with it. log is the client's
// logger (the tier adds its component). Start begins its work.
func Open(host Host, cfg Config, log *slog.Logger) (*Tier, error) {
	scfg := storage.FileStorageConfigFromEnv(cfg.Path, cfg.Getenv).Filled()
	t := &Tier{
		host: host, log: log.With("component", "ssd"),
		inflight: map[string]bool{}, pins: map[string]*offloadPin{},
		wake: make(chan struct{}, 1), stop: make(chan struct{}),
	}
	t.enqueueCtx, t.cancel = context.WithCancel(context.Background())
	ok := false
	defer func() {
		if !ok {
			t.Close()
		}
	}()
	var err error
	// Validate the path before allocating the staging memory.
	if scfg.Path == "" {
		return nil, wire.Errorf(wire.ErrInvalidParams, "enable_ssd_offload needs ssd_offload_path (or MOONCAKE_OFFLOAD_FILE_STORAGE_PATH)")
	}
	if t.staging, err = transfer.NewLocalSegment("ssd-staging:"+cfg.Segment, scfg.BufferSize); err != nil {
		return nil, wire.Errorf(wire.ErrInternal, "SSD staging buffer of %d bytes: %v", scfg.BufferSize, err)
	}
	scfg.OnEvict = t.evicted
	if t.fs, err = storage.OpenFileStorage(scfg, t.staging.Bytes(), log); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(cfg.ListenHost, "0"))
	if err != nil {
		return nil, wire.Errorf(wire.ErrInternal, "SSD staging listener on %s: %v", cfg.ListenHost, err)
	}
	t.stageSrv = transfer.NewServer(ln, t.staging.Bytes(), log)
	t.stageSrv.SetAuth(cfg.Auth)
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		t.stageSrv.Serve()
	}()
	t.bufDesc = wire.SegmentDesc{
		ID: stagingSegID(), Name: "ssd-staging:" + cfg.Segment, ClientID: host.ClientID(), Size: t.staging.Size(),
		HostID: transfer.HostID(), ShmPath: t.staging.ShmPath(), TransferAddr: ln.Addr().String(),
	}
	t.stageSrv.SetSegID(t.bufDesc.ID) // the id the tier's own grants name
	rln, err := net.Listen("tcp", net.JoinHostPort(cfg.ListenHost, "0"))
	if err != nil {
		return nil, wire.Errorf(wire.ErrInternal, "SSD RPC listener on %s: %v", cfg.ListenHost, err)
	}
	t.endpoint = rln.Addr().String()
	t.rpc = rpc.NewServer(t.log, nil)
	t.rpc.SetAuth(cfg.Auth)
	rpc.HandleFunc(t.rpc, wire.OpStageOffloaded, t.serveStage)
	rpc.HandleFunc(t.rpc, wire.OpReleaseStaged, t.serveRelease)
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		t.rpc.Serve(rln)
	}()
	t.pipe = pipeline.New[string](pipeline.Config{
		MaxBatch:      offloadBatchKeys(scfg),
		MaxBatchBytes: offloadBatchBytes,
		FlushInterval: 20 * time.Millisecond,
		QueueDepth:    4 * heartbeatMax,
		Workers:       2,
	}, (*stages)(t), (*stages)(t), (*stages)(t), (*stages)(t), t.done)
	ok = true
	return t, nil
}

// offloadBatchKeys is the most objects one pipeline batch (one backend
// call, one bucket) carries: the bucket key limit, the default unless set
// lower.
func offloadBatchKeys(cfg storage.FileStorageConfig) int {
	if n := cfg.BucketKeysLimit; n > 0 && n < storage.DefaultBucketKeysLimit {
		return int(n)
	}
	return storage.DefaultBucketKeysLimit
}

// stagingSegID names the staging buffer in peers' transfer engines: the top
// bit keeps it clear of the master's segment IDs (which count up from 1),
// the random rest apart from other processes' buffers.
func stagingSegID() uint64 {
	var b [8]byte
	rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:]) | 1<<63
}

// Endpoint is the tier's RPC address: how the master and readers name its
// disk copies.
func (t *Tier) Endpoint() string { return t.endpoint }

// Start recovers what the directory holds and starts the heartbeat; the
// host calls it once, after mounting its segment.
func (t *Tier) Start() {
	if err := t.recover(); err != nil {
		t.recoverPending.Store(true)
		t.log.Error("SSD recovery could not reach the master; retrying with the heartbeat", "err", err)
	}
	t.wg.Add(1)
	go t.loop()
}

// RecoverSoon has the heartbeat loop, which alone runs recoveries after
// Start, recover again (a master that forgot the client lost its disk
// copies).
func (t *Tier) RecoverSoon() {
	t.recoverPending.Store(true)
	t.Kick()
}

// recoverIfPending runs a recovery that failed or was asked for.
func (t *Tier) recoverIfPending() {
	if !t.recoverPending.Swap(false) {
		return
	}
	if err := t.recover(); err != nil {
		t.recoverPending.Store(true)
		t.log.Debug("SSD recovery still failing", "err", err)
	}
}

// recover re-registers every object found on disk with the master and
// deletes the copies the master calls stale. The caller marks a failed
// recovery pending; the heartbeat retries it.
func (t *Tier) recover() error {
	var keys []string
	var sizes []uint64
	err := t.fs.Backend().ScanMeta(func(key string, size uint64) error {
		keys, sizes = append(keys, key), append(sizes, size)
		return nil
	})
	if err != nil {
		t.log.Error("SSD scan failed", "err", err)
	}
	var registered, stale int
	for start := 0; start < len(keys); start += recoverBatch {
		end := min(start+recoverBatch, len(keys))
		var resp wire.CodesResp
		ctx, cancel := t.host.CallContext()
		err := t.host.CallMaster(ctx, wire.OpRecoverDisk, &wire.RecoverDiskReq{
			ClientID: t.host.ClientID(), Endpoint: t.endpoint, StorageID: t.fs.ID(),
			Keys: keys[start:end], Sizes: sizes[start:end],
		}, &resp)
		cancel()
		if err != nil {
			return err
		}
		var drop []string
		for i, code := range resp.Codes {
			switch code {
			case wire.OK:
				registered++
			case wire.ErrObjectAlreadyExists:
				drop = append(drop, keys[start+i])
			default:
				t.log.Warn("SSD object not re-registered", "key", keys[start+i], "code", code)
			}
		}
		if len(drop) > 0 {
			stale += len(drop)
			if err := t.fs.Backend().Remove(drop); err != nil {
				t.log.Error("deleting stale SSD copies failed", "err", err)
			}
		}
	}
	t.stats.recovered.Add(int64(registered))
	t.stats.staleDropped.Add(int64(stale))
	if len(keys) > 0 {
		t.log.Info("SSD tier recovered", "found", len(keys), "registered", registered, "stale_deleted", stale)
	}
	return nil
}

// Unmount takes the tier out of the pool's service once the master has
// forgotten its copies (Mooncake's unmount_local_disk_segment): from now
// on it asks for no offload work, takes none (Offload fails) and
// re-registers nothing; an offload already past its pin finishes, the
// master refuses the copy and the tier deletes it. Readers already sent to
// its copies are still served. There is no way back short of a new client.
func (t *Tier) Unmount() { t.unmounted.Store(true) }

// Unmounted reports whether Unmount ran.
func (t *Tier) Unmounted() bool { return t.unmounted.Load() }

// Kick runs the offload heartbeat now (the master has work for the tier,
// or a write waits for room the tier's copies would free).
func (t *Tier) Kick() {
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// loop is the offload heartbeat: every interval, or at once when the ping
// says the master has work, it takes the objects to persist and the
// copies to delete.
func (t *Tier) loop() {
	defer t.wg.Done()
	tick := time.NewTicker(t.fs.Config().HeartbeatInterval)
	defer tick.Stop()
	for {
		var soon <-chan time.Time
		// Unmounted: out of the pool; only the readers' staging RPCs are served.
		if !t.unmounted.Load() {
			t.recoverIfPending()
			if t.heartbeat() {
				// Objects are streaming in: ask again shortly rather than at
				// the next interval or ping, so the pool never waits long
				// for the copies its eviction needs.
				soon = time.After(busyHeartbeat)
			}
		}
		select {
		case <-t.stop:
			return
		case <-tick.C:
		case <-t.wake:
		case <-soon:
		}
	}
}

// busyHeartbeat is the offload heartbeat's period while the master keeps
// handing out work.
const busyHeartbeat = 10 * time.Millisecond

// heartbeat takes the master's work for the tier and reports whether
// there was any.
func (t *Tier) heartbeat() (busy bool) {
	for {
		var resp wire.OffloadHeartbeatResp
		ctx, cancel := t.host.CallContext()
		err := t.host.CallMaster(ctx, wire.OpOffloadHeartbeat, &wire.OffloadHeartbeatReq{ClientID: t.host.ClientID(), Max: heartbeatMax, StorageID: t.fs.ID()}, &resp)
		cancel()
		if err != nil {
			t.log.Debug("offload heartbeat failed", "err", err)
			return busy
		}
		busy = busy || len(resp.Keys) > 0 || len(resp.Drop) > 0 || len(resp.Promote) > 0
		// Drops first: a key both dropped and handed out is a rewrite
		// whose old copy must go before the new one is written.
		if len(resp.Drop) > 0 {
			if err := t.fs.Backend().Remove(resp.Drop); err != nil {
				t.log.Error("deleting SSD copies the master dropped failed", "err", err)
			}
			t.stats.dropped.Add(int64(len(resp.Drop)))
		}
		for i, key := range resp.Keys {
			if i >= len(resp.Sizes) {
				break
			}
			if _, err := t.enqueue(key, resp.Sizes[i], false); err != nil && !errors.Is(err, errInFlight) {
				return false // closing
			}
		}
		t.promote(resp.Promote)
		if len(resp.Keys) < heartbeatMax && len(resp.Drop) < heartbeatMax {
			return busy
		}
	}
}

var errInFlight = errors.New("offload of this key already in progress")

// enqueue hands one object to the pipeline unless it is already there.
func (t *Tier) enqueue(key string, size uint64, requested bool) (pipeline.Handle, error) {
	if t.unmounted.Load() {
		return nil, wire.Errorf(wire.ErrUnableOffload, "the SSD tier was unmounted")
	}
	t.mu.Lock()
	if _, busy := t.inflight[key]; busy {
		t.mu.Unlock()
		return nil, errInFlight
	}
	t.inflight[key] = requested
	t.mu.Unlock()
	h, err := t.pipe.Enqueue(t.enqueueCtx, pipeline.Item[string]{Key: key, Size: size})
	if err != nil {
		t.forget(key)
	}
	return h, err
}

func (t *Tier) forget(key string) {
	t.mu.Lock()
	delete(t.inflight, key)
	t.mu.Unlock()
}

// done is the pipeline's report for every item.
func (t *Tier) done(it pipeline.Item[string], err error) {
	t.forget(it.Key)
	switch {
	case err == nil:
		t.stats.offloaded.Add(1)
		t.failures.OK(func(more int) {
			t.log.Info("offloads succeed again", "failed_since_logged", more)
		})
	case errors.Is(err, context.Canceled):
	default:
		// A full disk fails every offload until room comes back (and the
		// master asks again at every eviction pass): one line a burst.
		t.stats.offloadFailed.Add(1)
		t.failures.Fail(1, func(int) {
			t.log.Warn("offload failed; later failures are counted, not logged, until one succeeds",
				"key", it.Key, "size", it.Size, "err", err)
		})
	}
}

// stages is the Tier as the offload pipeline sees it: the pipeline's four
// seams live on this type so that Tier's exported methods are only the
// tier's API, not calls for the pipeline alone.
type stages Tier

// Admit is the PolicyEvaluator: an object larger than the staging buffer
// could never be read back by another client, so it stays in memory.
func (s *stages) Admit(_ context.Context, it pipeline.Item[string]) bool {
	t := (*Tier)(s)
	ok := it.Size > 0 && it.Size <= t.staging.Size()
	if !ok {
		t.log.Warn("object not offloaded: larger than the staging buffer", "key", it.Key, "size", it.Size,
			"buffer", t.staging.Size())
	}
	return ok
}

// Wait is the PreconditionAwaiter: objects the master hands out are
// complete; one a caller asked for may still be being written, so it waits
// (polling) until it is readable.
func (s *stages) Wait(ctx context.Context, it pipeline.Item[string]) error {
	t := (*Tier)(s)
	t.mu.Lock()
	requested := t.inflight[it.Key]
	t.mu.Unlock()
	if !requested {
		return nil
	}
	for {
		res, err := t.host.Peek([]string{it.Key})
		if err != nil {
			return err
		}
		switch code := res[0].Code; code {
		case wire.OK:
			return nil
		case wire.ErrReplicaIsNotReady:
		default:
			return wire.Errorf(code, "offload of %q", it.Key)
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Upgrade pins the batch's memory replicas (the point of no return): it
// locates each in this client's segment and holds its bytes for the
// transfer. The master is not asked to protect them: an object held by a
// tier is not evicted before its disk copy exists, and one rewritten or
// removed meanwhile changes epoch or disappears, which NotifyOffloaded
// refuses, so a torn copy is never published. (A lease would keep the
// object from the very eviction the copy is made for.)
func (s *stages) Upgrade(_ context.Context, items []pipeline.Item[string]) (func(), error) {
	t := (*Tier)(s)
	keys := make([]string, len(items))
	for i, it := range items {
		keys[i] = it.Key
	}
	res, err := t.host.Peek(keys)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	for i, r := range res {
		pin := &offloadPin{epoch: r.Epoch}
		switch {
		case r.Code != wire.OK:
			pin.err = wire.Errorf(r.Code, "offload of %q", keys[i])
		case r.Disk != "":
			pin.persisted = true // an earlier request of the key did it
		case r.Size != items[i].Size:
			pin.err = wire.Errorf(wire.ErrInvalidParams, "offload of %q: size changed from %d to %d", keys[i], items[i].Size, r.Size)
		default:
			pin.err = wire.Errorf(wire.ErrReplicaNotFound, "offload of %q: no replica on this client's segment", keys[i])
			for _, rep := range r.Replicas {
				if mem := t.host.OwnSegment(rep.SegID); mem != nil && rep.Offset+r.Size <= uint64(len(mem)) {
					pin.val, pin.err = mem[rep.Offset:rep.Offset+r.Size:rep.Offset+r.Size], nil
					break
				}
			}
		}
		t.pins[keys[i]] = pin
	}
	t.mu.Unlock()
	return func() {
		t.mu.Lock()
		for _, k := range keys {
			delete(t.pins, k)
		}
		t.mu.Unlock()
	}, nil
}

// Transfer is the TransferExecutor: it writes the pinned bytes to disk and
// reports the copies to the master. A copy the master refuses (the object
// was replaced or removed, or another directory has it) is deleted again.
func (s *stages) Transfer(_ context.Context, items []pipeline.Item[string]) []error {
	t := (*Tier)(s)
	errs := make([]error, len(items))
	pins := make([]*offloadPin, len(items))
	t.mu.Lock()
	for i, it := range items {
		pins[i] = t.pins[it.Key]
	}
	t.mu.Unlock()
	var keys []string
	var vals [][]byte
	var idx []int
	for i, pin := range pins {
		switch {
		case pin == nil:
			errs[i] = wire.Errorf(wire.ErrInternal, "offload of %q: not pinned", items[i].Key)
		case pin.err != nil:
			errs[i] = pin.err
		case pin.persisted:
		default:
			keys, vals, idx = append(keys, items[i].Key), append(vals, pin.val), append(idx, i)
		}
	}
	if len(keys) == 0 {
		return errs
	}
	werrs := t.fs.Backend().BatchOffload(keys, vals)
	var req wire.NotifyOffloadedReq
	var notified []int
	var undo []string
	for j, err := range werrs {
		i := idx[j]
		if err != nil {
			errs[i] = err
			continue
		}
		req.Keys = append(req.Keys, keys[j])
		req.Sizes = append(req.Sizes, items[i].Size)
		req.Epochs = append(req.Epochs, pins[i].epoch)
		notified = append(notified, i)
	}
	if len(req.Keys) > 0 {
		req.ClientID, req.Endpoint, req.StorageID = t.host.ClientID(), t.endpoint, t.fs.ID()
		var resp wire.CodesResp
		ctx, cancel := t.host.CallContext()
		err := t.host.CallMaster(ctx, wire.OpNotifyOffloaded, &req, &resp)
		cancel()
		if err == nil && len(resp.Codes) != len(req.Keys) {
			err = wire.Errorf(wire.ErrRPCFail, "NotifyOffloaded answered %d of %d keys", len(resp.Codes), len(req.Keys))
		}
		for j, i := range notified {
			switch {
			case err != nil:
				// The master may or may not have the copy: keep it (a
				// restart re-registers or deletes it).
				errs[i] = err
			case resp.Codes[j] != wire.OK:
				errs[i] = wire.Errorf(resp.Codes[j], "master refused the SSD copy of %q", req.Keys[j])
				undo = append(undo, req.Keys[j])
			}
		}
	}
	if len(undo) > 0 {
		if err := t.fs.Backend().Remove(undo); err != nil {
			t.log.Error("deleting refused SSD copies failed", "err", err)
		}
	}
	return errs
}

// evicted is the bucket backend's eviction handler: it tells the master,
// in one RPC, before the files go.
func (t *Tier) evicted(keys []string) {
	ctx, cancel := t.host.CallContext()
	defer cancel()
	var resp wire.CodesResp
	if err := t.host.CallMaster(ctx, wire.OpEvictDiskReplicas, &wire.KeysReq{ClientID: t.host.ClientID(), Keys: keys}, &resp); err != nil {
		t.log.Error("telling the master about evicted SSD copies failed; readers will get errors, not stale bytes", "keys", len(keys), "err", err)
	}
}

// stageGrantSlack is added to the staging lease in the grants a reader
// gets: the reader's clock may run ahead of this host's.
const stageGrantSlack = 10 * time.Second

// serveStage answers a reader: the objects are read into the staging
// buffer under one lease, each with a grant to read it.
func (t *Tier) serveStage(req *wire.StageReq) (*wire.StageResp, error) {
	if len(req.Keys) != len(req.Sizes) || len(req.Keys) > maxStageKeys {
		return nil, wire.Errorf(wire.ErrInvalidParams, "stage: %d keys, %d sizes (at most %d)", len(req.Keys), len(req.Sizes), maxStageKeys)
	}
	id, offs, errs := t.fs.Stage(req.Keys, req.Sizes)
	ttl := t.fs.Buffer().TTL()
	resp := &wire.StageResp{BatchID: id, Codes: make([]wire.Code, len(errs)), Offsets: offs,
		Buffer: t.bufDesc, GCTTLMS: ttl.Milliseconds(), Grants: make([][]byte, len(errs))}
	// The reader pulls the bytes from the staging buffer: each object's
	// grant lets it read that object, for the lease (plus slack for the
	// clocks; a pull that outlives the lease is discarded anyway).
	expiry := time.Now().Add(ttl + stageGrantSlack)
	var corrupt []string
	for i, err := range errs {
		resp.Codes[i] = wire.CodeOf(err)
		if err == nil {
			t.stats.staged.Add(1)
			resp.Grants[i] = t.stageSrv.Mint(offs[i], req.Sizes[i], false, expiry)
			continue
		}
		t.stats.stageFailed.Add(1)
		if errors.Is(err, storage.ErrCorrupt) {
			corrupt = append(corrupt, req.Keys[i])
		} else {
			t.log.Warn("stage for a reader failed", "key", req.Keys[i], "err", err)
		}
	}
	if len(corrupt) > 0 {
		t.dropCorrupt(corrupt)
	}
	return resp, nil
}

// dropCorrupt forgets copies that failed their checksum, on disk and at the
// master, so no reader is sent to them again.
func (t *Tier) dropCorrupt(keys []string) {
	t.stats.corrupt.Add(int64(len(keys)))
	t.log.Error("SSD copies failed their checksum; deleting them", "keys", keys)
	t.evicted(keys)
	if err := t.fs.Backend().Remove(keys); err != nil {
		t.log.Error("deleting corrupt SSD copies failed", "err", err)
	}
}

func (t *Tier) serveRelease(req *wire.ReleaseStagedReq) (*wire.CodesResp, error) {
	t.fs.Buffer().Release(req.BatchID)
	return &wire.CodesResp{}, nil
}

// loadLocal reads this tier's own copies straight into the caller's
// buffers (a reader that is the holder needs no staging).
func (t *Tier) loadLocal(keys []string, sizes []uint64, dests [][][]byte) []wire.Code {
	dsts := make([][]byte, len(keys))
	scatter := make([]bool, len(keys))
	for i, bufs := range dests {
		if len(bufs) == 1 && uint64(len(bufs[0])) == sizes[i] {
			dsts[i] = bufs[0]
		} else {
			dsts[i], scatter[i] = make([]byte, sizes[i]), true
		}
	}
	out := make([]wire.Code, len(keys))
	var corrupt []string
	for i, err := range t.fs.Backend().BatchLoad(keys, dsts) {
		out[i] = wire.CodeOf(err)
		if errors.Is(err, storage.ErrCorrupt) {
			corrupt = append(corrupt, keys[i])
		}
		if err == nil && scatter[i] {
			transfer.CopyScatter(dsts[i], 0, dests[i], false) // dests[i] holds sizes[i] bytes: in range
		}
	}
	if len(corrupt) > 0 {
		t.dropCorrupt(corrupt)
	}
	return out
}

// Close stops the heartbeat and the pipeline (offloads not yet past their
// upgrade are cancelled; committed ones finish), then the servers and the
// storage. Idempotent.
func (t *Tier) Close() {
	t.closeOnce.Do(func() {
		t.cancel()
		close(t.stop)
		if t.rpc != nil {
			t.rpc.Close()
		}
		if t.stageSrv != nil {
			t.stageSrv.Close()
		}
		t.wg.Wait()
		if t.pipe != nil {
			t.pipe.Close()
		}
		if t.fs != nil {
			if err := t.fs.Close(); err != nil {
				t.log.Error("closing the SSD tier", "err", err)
			}
		}
		if t.staging != nil {
			t.staging.Close()
		}
	})
}

// Stats reports the tier's counters.
func (t *Tier) Stats() Stats {
	s := &t.stats
	bytes, objects := t.fs.Backend().Usage()
	return Stats{
		Offloaded: s.offloaded.Load(), OffloadFailed: s.offloadFailed.Load(), Dropped: s.dropped.Load(),
		Recovered: s.recovered.Load(), StaleDropped: s.staleDropped.Load(),
		Staged: s.staged.Load(), StageFailed: s.stageFailed.Load(), Corrupt: s.corrupt.Load(),
		Promoted: s.promoted.Load(), PromoteFailed: s.promoteFailed.Load(),
		Objects: objects, Bytes: bytes, Pipeline: t.pipe.Stats(),
	}
}

// Offload asks the tier to persist keys now, whether or not the master
// asked for them (an object still being written is waited for). Each
// handle reports the outcome and can cancel its offload until the point of
// no return (the pin of the memory replica). Keys already on their way
// get a nil handle.
func (t *Tier) Offload(keys []string, sizes []uint64) ([]pipeline.Handle, error) {
	if len(keys) != len(sizes) {
		return nil, wire.Errorf(wire.ErrInvalidParams, "%d keys, %d sizes", len(keys), len(sizes))
	}
	hs := make([]pipeline.Handle, len(keys))
	for i, k := range keys {
		h, err := t.enqueue(k, sizes[i], true)
		switch {
		case errors.Is(err, errInFlight):
		case err != nil:
			return hs, wire.Errorf(wire.ErrInternal, "offload of %q: %v", k, err)
		default:
			hs[i] = h
		}
	}
	return hs, nil
}
