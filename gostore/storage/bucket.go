package storage

// BucketStorageBackend (the default backend).
//
// Objects are grouped into buckets. A bucket is two files in Config.Path:
//
//	<id>.bucket  data: records [zeros | hdr 24 B | key | value] (the
//	             zeros align the value to 4 KiB), see bucket_meta.go
//	<id>.meta    the bucket's index: header (magic, version, id, count,
//	             data size), one entry per live object (key, value offset,
//	             size, CRC32C of key+value), trailing CRC32C of the file.
//
// Ids are increasing (nanosecond clock, forced past the largest id seen on
// disk), and zero-padded so the files sort by age.
//
// Write path (BatchOffload): the batch is cut into buckets of at most
// BucketSizeLimit record bytes / BucketKeysLimit objects (an object larger
// than BucketSizeLimit gets a bucket of its own). Difference from the seed:
// the seed holds objects that do not fill a bucket back until the next
// heartbeat; here every call writes what it is given, so a small batch makes
// a small bucket (the caller batches). Per bucket: reserve space (evicting
// under the lock if needed) → OnEvict outside the lock → finalize the
// evicted buckets → write data, datasync → write meta to <id>.meta.tmp,
// datasync, rename, sync the directory → publish in memory. A key written
// again replaces the older copy (the copy in the bucket with the higher id
// wins, in memory and at recovery); the older bucket keeps the dead bytes
// (counted in Usage and the limits until the whole bucket goes) and its meta
// is rewritten without the key so a restart cannot resurrect it. Remove does
// the same; a bucket left without live objects has its files deleted.
//
// Limits: the bytes of all bucket files (data incl. record headers and dead
// records, plus meta, each rounded up to a whole block as the disk holds
// them) must stay within min(TotalSizeLimit, BucketMaxTotalSize), where
// BucketMaxTotalSize 0 means the disk cap of diskcap.go (90% of the file
// system, and what the buckets hold plus 95% of the free space at open; the
// cap is this process's alone); an explicit BucketMaxTotalSize replaces that
// rule. Whatever the cap, each bucket must also leave the file system above
// the floor of diskcap.go (10% of it free; shared by every tier on it):
// reservations check it against an effective cap (see
// prepareEvictionLocked), so the floor evicts or refuses like the cap. A
// write that meets ENOSPC anyway fails as ErrFull (with eviction on, after
// one retry that evicts against the disk as it is then), the cap unchanged.
// The live keys stay within
// TotalKeysLimit (a batch's keys are all counted as new, so replacing keys
// at the key limit may evict slightly early). When a bucket would not fit:
// "none" → ErrFull; "fifo" → evict the oldest buckets; "lru" → evict the
// buckets whose last use is oldest, where a use is the bucket's write
// (publishLocked, recovery included, in id order) or any BatchLoad from it.
// A write must count: a bucket read once would otherwise outlive every
// bucket written after it, and those, evicted first, are often the only
// copy of their objects (Mooncake fixed the same bug, #3097). Last use is a
// logical clock, so ordering is exact even with a coarse clock.
//
// Two-phase eviction: phase 1 under the lock removes the victims' objects
// from the index and collects their keys; OnEvict(keys) is called once,
// outside the lock; phase 2 waits for the victims' in-flight reads (each
// BatchLoad holds a per-bucket reference from lookup to the end of its I/O),
// then closes and deletes their files (meta first, then data).
//
// Reads (BatchLoad) go through Engine.ReadBatch straight into the caller's
// buffers (at most fileio.QueueDepth per submission) and verify CRC32C of
// key+value; a mismatch returns ErrCorrupt and zeroes the destination.
//
// Recovery (at open; ScanMeta then reports the recovered index): every
// <id>.meta is checked (header, checksum, bounds against the data file);
// a torn/corrupt meta or a missing data file skips that bucket with an
// slog error, leaving its files in place. Data files without any meta (a
// crash before the meta was renamed) and *.tmp files are deleted. Record
// CRCs are verified lazily at load (ErrCorrupt), not at recovery: checking
// them eagerly would read every byte on the disk.
//
// Data files are written O_DIRECT in large aligned chunks (seqwriter.go),
// each record's header padded so that its value starts on a 4 KiB
// boundary, the file padded to a whole block; they are read O_DIRECT too,
// straight into staging slots (BatchLoadPadded) or through the engine's
// bounce buffers. Each live bucket keeps its data file open for reads (one
// descriptor per bucket).

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gostore/gostore/gostore/storage/fileio"
)

// Defaults of the bucket-specific Config fields.
const (
	// DefaultBucketSizeLimit and DefaultBucketKeysLimit bound one bucket
	// (one offload batch: the client sizes its batches by them).
	DefaultBucketSizeLimit  = 256 << 20
	DefaultBucketKeysLimit  = 500
	bucketDefaultPolicy     = "fifo"
	bucketName              = "bucket_storage_backend"
	bucketDataExt           = ".bucket"
	bucketMetaExt           = ".meta"
	bucketTmpExt            = ".tmp"
	bucketPolicyNone        = "none"
	bucketPolicyFIFO        = "fifo"
	bucketPolicyLRU         = "lru"
	bucketErrClosedMsg      = "storage: bucket backend closed"
	bucketIDWidth           = 20
	bucketMaxReadsPerSubmit = fileio.QueueDepth
)

var bucketErrClosed = errors.New(bucketErrClosedMsg)

// bucketLoadHook, when set (tests), is called by BatchLoad after it has taken
// its bucket references and before it reads.
var bucketLoadHook func(keys []string)

// bucketDeleteHook, when set (tests), is called by deleteBucket just before
// it waits for the bucket's reads in flight.
var bucketDeleteHook func(id uint64)

// bucketEntry is one live object.
type bucketEntry struct {
	bk   *bucketFile
	key  string
	off  uint64 // of the value in the data file
	size uint64
	crc  uint32
}

// bucketFile is one published bucket.
type bucketFile struct {
	id       uint64
	f        *os.File // data file, open for reads
	dataSize uint64
	metaSize uint64
	live     map[string]*bucketEntry // guarded by bucketBackend.mu

	lastAccess atomic.Uint64  // b.clock at its write or its last load
	refs       sync.WaitGroup // in-flight reads

	metaMu sync.Mutex // serialises meta rewrites and deletion
	dead   bool       // guarded by metaMu
}

// disk is the bytes bk's files take (both are whole blocks on disk).
func (bk *bucketFile) disk() uint64 { return bk.dataSize + bk.metaSize }

type bucketBackend struct {
	dir     string
	eng     fileio.Engine
	ownEng  bool
	policy  string
	sizeCap uint64
	keysCap uint64
	bSize   uint64
	bKeys   uint64
	onEvict func([]string)

	mu       sync.RWMutex
	closed   bool
	ops      sync.WaitGroup
	index    map[string]*bucketEntry
	buckets  map[uint64]*bucketFile
	disk     uint64 // bytes of published bucket files
	resBytes uint64 // reserved by writes in progress
	resKeys  uint64
	lastID   uint64

	clock atomic.Uint64 // logical LRU clock
}

// NewBucket opens (recovering what is there) or creates the bucket backend
// in cfg.Path.
func NewBucket(cfg Config) (Backend, error) {
	if cfg.Path == "" {
		return nil, errors.New("storage: bucket backend needs a path")
	}
	policy := strings.ToLower(strings.TrimSpace(cfg.EvictionPolicy))
	if policy == "" {
		policy = bucketDefaultPolicy
	}
	switch policy {
	case bucketPolicyNone, bucketPolicyFIFO, bucketPolicyLRU:
	default:
		return nil, fmt.Errorf("storage: unknown bucket eviction policy %q (none, fifo, lru)", cfg.EvictionPolicy)
	}
	if err := os.MkdirAll(cfg.Path, 0o755); err != nil {
		return nil, fmt.Errorf("storage: bucket dir: %w", err)
	}
	b := &bucketBackend{
		dir: cfg.Path, policy: policy, onEvict: cfg.OnEvict,
		bSize: cfg.BucketSizeLimit, bKeys: cfg.BucketKeysLimit,
		index: map[string]*bucketEntry{}, buckets: map[uint64]*bucketFile{},
	}
	b.sizeCap, b.keysCap = kvLimits(cfg)
	if b.bSize == 0 {
		b.bSize = DefaultBucketSizeLimit
	}
	if b.bKeys == 0 {
		b.bKeys = DefaultBucketKeysLimit
	}
	var err error
	if b.eng, b.ownEng, err = kvEngine(cfg); err != nil {
		return nil, err
	}
	if err := b.recover(); err == nil {
		err = b.capToDisk(cfg.BucketMaxTotalSize)
	}
	if err != nil {
		b.closeFiles()
		if b.ownEng {
			b.eng.Close()
		}
		return nil, err
	}
	return b, nil
}

// capToDisk lowers the size cap to maxTotal or, when that is 0, to the disk
// cap (diskCap) given what the recovered buckets hold.
func (b *bucketBackend) capToDisk(maxTotal uint64) (err error) {
	if maxTotal > 0 {
		b.sizeCap = min(b.sizeCap, maxTotal)
		return nil
	}
	b.sizeCap, err = diskCap(bucketName, b.dir, b.sizeCap, b.disk)
	return err
}

func (b *bucketBackend) Name() string { return bucketName }

// enter registers an operation; false once closed.
func (b *bucketBackend) enter() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	b.ops.Add(1)
	return true
}

func bucketErrs(n int, err error) []error {
	errs := make([]error, n)
	for i := range errs {
		errs[i] = err
	}
	return errs
}

func (b *bucketBackend) path(id uint64, ext string) string {
	return filepath.Join(b.dir, fmt.Sprintf("%0*d%s", bucketIDWidth, id, ext))
}

// nextIDLocked returns a fresh increasing id (b.mu held).
func (b *bucketBackend) nextIDLocked() uint64 {
	id := uint64(time.Now().UnixNano())
	if id <= b.lastID {
		id = b.lastID + 1
	}
	b.lastID = id
	return id
}

// BatchOffload writes the objects as one or more new buckets.
func (b *bucketBackend) BatchOffload(keys []string, values [][]byte) []error {
	if len(keys) != len(values) {
		return bucketErrs(len(keys), fmt.Errorf("storage: %d keys but %d values", len(keys), len(values)))
	}
	if !b.enter() {
		return bucketErrs(len(keys), bucketErrClosed)
	}
	defer b.ops.Done()
	errs := make([]error, len(keys))
	last := lastCopies(keys)
	var group []int
	var groupBytes uint64
	flush := func() {
		if len(group) == 0 {
			return
		}
		err := b.offloadGroup(keys, values, group)
		for _, i := range group {
			errs[i] = err
		}
		group, groupBytes = nil, 0
	}
	for i, k := range keys {
		if last[k] != i {
			continue
		}
		n := bucketRecLen(k, values[i])
		if len(group) > 0 && (groupBytes+n > b.bSize || uint64(len(group)) >= b.bKeys) {
			flush()
		}
		group = append(group, i)
		groupBytes += n
	}
	flush()
	shareLast(errs, keys, last)
	return errs
}

// offloadGroup writes one bucket holding keys[i], values[i] for i in idx.
// A disk that fills up below the size cap and the floor anyway (other
// files grew since the reservation checked it) fails the write as ErrFull,
// the cap unchanged; with eviction on it first retries once: the retry's
// floor check sees the disk as it is now and evicts room for it.
func (b *bucketBackend) offloadGroup(keys []string, values [][]byte, idx []int) error {
	err := b.writeGroup(keys, values, idx)
	if !isNoSpace(err) {
		return err
	}
	if b.policy != bucketPolicyNone {
		if err = b.writeGroup(keys, values, idx); !isNoSpace(err) {
			return err
		}
	}
	return noSpace(bucketName, b.dir, err)
}

func (b *bucketBackend) writeGroup(keys []string, values [][]byte, idx []int) error {
	ents := make([]*bucketEntry, len(idx))
	vals := make([][]byte, len(idx))
	var dataSize uint64
	for j, i := range idx {
		ents[j] = &bucketEntry{key: keys[i], size: uint64(len(values[i])), crc: bucketCRC(keys[i], values[i])}
		vals[j] = values[i]
		dataSize = bucketAppend(dataSize, keys[i], uint64(len(values[i])))
	}
	need := roundUpAlign(dataSize) + roundUpAlign(bucketMetaLen(ents))
	nkeys := uint64(len(ents))

	// Phase 1: reserve, evicting under the lock.
	b.mu.Lock()
	victims, evicted, err := b.prepareEvictionLocked(need, nkeys)
	if err != nil {
		b.mu.Unlock()
		return err
	}
	id := b.nextIDLocked()
	b.resBytes += need
	b.resKeys += nkeys
	b.mu.Unlock()

	if len(evicted) > 0 && b.onEvict != nil {
		b.onEvict(evicted)
	}
	// Phase 2.
	for _, bk := range victims {
		b.deleteBucket(bk)
	}

	bk, err := b.writeBucket(id, ents, vals)

	b.mu.Lock()
	b.resBytes -= need
	b.resKeys -= nkeys
	if err != nil {
		b.mu.Unlock()
		return err
	}
	emptied, touched := b.publishLocked(bk, ents)
	b.mu.Unlock()
	return b.afterUnlink(emptied, touched)
}

// prepareEvictionLocked makes room for need bytes and nkeys keys on top of
// what is published and reserved, within the size cap and above the floor
// of diskcap.go. It returns the evicted buckets (already unlinked from the
// index) and their keys.
//
// The floor enters as an effective cap, computed once from one statfs
// before anything is evicted:
//
//	capNow = min(sizeCap, disk + room)    (0 when disk + room < 0)
//
// where disk is the published buckets' bytes and room = free - floor
// (diskRoom; negative below the floor). A reservation fits when
// disk + resBytes + need <= capNow, that is resBytes + need <= room plus
// the bytes of the buckets it evicts. That is never too little eviction:
//   - the published buckets are on disk (not in free), and the victims
//     evicted here are deleted (phase 2) before this bucket is written, so
//     each one's bytes do come back to the free space first;
//   - reservations in flight (resBytes, this one's need) are counted whole,
//     as if none of their blocks were written yet: what they did write is
//     out of free already and so counts twice (slight over-eviction);
//   - buckets unlinked by other writes whose files are not deleted yet are
//     out of both disk and free: counted as used, freed later (over-eviction
//     again, never under).
//
// capNow stays fixed while victims go (disk drops by each one): recomputed,
// it would lose the victims' bytes, which the statfs cannot see freed yet.
func (b *bucketBackend) prepareEvictionLocked(need, nkeys uint64) ([]*bucketFile, []string, error) {
	room, err := diskRoom(b.dir)
	if err != nil {
		return nil, nil, err
	}
	capNow := b.sizeCap
	if floorCap := int64(b.disk) + room; floorCap < 0 {
		capNow = 0
	} else if uint64(floorCap) < capNow {
		capNow = uint64(floorCap)
	}
	fits := func() bool {
		return b.disk+b.resBytes+need <= capNow && uint64(len(b.index))+b.resKeys+nkeys <= b.keysCap
	}
	if fits() {
		return nil, nil, nil
	}
	if b.policy == bucketPolicyNone {
		return nil, nil, fmt.Errorf("%w: %d bytes in use + %d needed > %d (the size cap %d, or the disk's free space above its %.0f%% floor), or %d keys + %d > %d (eviction policy none)",
			ErrFull, b.disk+b.resBytes, need, capNow, b.sizeCap, (1-diskShare)*100, uint64(len(b.index))+b.resKeys, nkeys, b.keysCap)
	}
	// Even evicting every published bucket would not be enough.
	if b.resBytes+need > capNow || b.resKeys+nkeys > b.keysCap {
		return nil, nil, fmt.Errorf("%w: bucket of %d bytes / %d keys exceeds the limits (%d bytes: the size cap %d or the disk's free space above its floor; %d keys) with %d bytes reserved",
			ErrFull, need, nkeys, capNow, b.sizeCap, b.keysCap, b.resBytes)
	}
	var victims []*bucketFile
	var keys []string
	for !fits() {
		bk := b.candidateLocked()
		if bk == nil { // cannot happen given the check above
			return victims, keys, fmt.Errorf("%w: nothing left to evict", ErrFull)
		}
		for k := range bk.live {
			delete(b.index, k)
			keys = append(keys, k)
		}
		delete(b.buckets, bk.id)
		b.disk -= bk.disk()
		victims = append(victims, bk)
	}
	sort.Strings(keys)
	return victims, keys, nil
}

// candidateLocked selects the next bucket to evict.
func (b *bucketBackend) candidateLocked() *bucketFile {
	var best *bucketFile
	for _, bk := range b.buckets {
		if best == nil {
			best = bk
			continue
		}
		if b.policy == bucketPolicyLRU {
			a, c := bk.lastAccess.Load(), best.lastAccess.Load()
			if a < c || (a == c && bk.id < best.id) {
				best = bk
			}
		} else if bk.id < best.id {
			best = bk
		}
	}
	return best
}

// publishLocked adds a written (or recovered) bucket to the index. A key
// already stored in a newer bucket keeps that copy. It returns the older
// buckets left empty (unlinked, to delete) and those that lost keys (to
// rewrite their meta).
func (b *bucketBackend) publishLocked(bk *bucketFile, ents []*bucketEntry) (emptied, touched []*bucketFile) {
	bk.lastAccess.Store(b.clock.Add(1)) // its write is its first use (lru)
	b.buckets[bk.id] = bk
	b.disk += bk.disk()
	seen := map[*bucketFile]bool{}
	for _, e := range ents {
		e.bk = bk
		if old, ok := b.index[e.key]; ok {
			if old.bk.id > bk.id {
				continue // dead on arrival
			}
			delete(old.bk.live, e.key)
			if !seen[old.bk] {
				seen[old.bk] = true
				touched = append(touched, old.bk)
			}
		}
		b.index[e.key] = e
		bk.live[e.key] = e
	}
	if len(bk.live) < len(ents) || len(ents) == 0 {
		touched = append(touched, bk)
	}
	return b.splitEmptyLocked(touched)
}

// splitEmptyLocked unlinks the buckets of list that have no live object.
func (b *bucketBackend) splitEmptyLocked(list []*bucketFile) (emptied, touched []*bucketFile) {
	for _, bk := range list {
		if len(bk.live) == 0 {
			delete(b.buckets, bk.id)
			b.disk -= bk.disk()
			emptied = append(emptied, bk)
		} else {
			touched = append(touched, bk)
		}
	}
	return emptied, touched
}

// afterUnlink deletes emptied buckets and rewrites the meta of touched ones.
func (b *bucketBackend) afterUnlink(emptied, touched []*bucketFile) error {
	for _, bk := range emptied {
		b.deleteBucket(bk)
	}
	var errs []error
	for _, bk := range touched {
		errs = append(errs, b.rewriteMeta(bk))
	}
	return errors.Join(errs...)
}

// deleteBucket is phase 2 of eviction (and the end of an emptied bucket):
// bk is already unlinked; wait for its reads, then close and delete.
func (b *bucketBackend) deleteBucket(bk *bucketFile) {
	if h := bucketDeleteHook; h != nil {
		h(bk.id)
	}
	bk.refs.Wait()
	bk.metaMu.Lock()
	defer bk.metaMu.Unlock()
	if bk.dead {
		return
	}
	bk.dead = true
	if err := bk.f.Close(); err != nil {
		slog.Error("storage: bucket close", "id", bk.id, "err", err)
	}
	for _, p := range []string{b.path(bk.id, bucketMetaExt), b.path(bk.id, bucketDataExt)} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			slog.Error("storage: bucket delete", "path", p, "err", err)
		}
	}
	if err := syncDir(b.dir); err != nil {
		slog.Error("storage: bucket dir sync", "dir", b.dir, "err", err)
	}
}

// rewriteMeta writes bk's meta with its live objects only.
func (b *bucketBackend) rewriteMeta(bk *bucketFile) error {
	bk.metaMu.Lock()
	defer bk.metaMu.Unlock()
	if bk.dead {
		return nil
	}
	b.mu.RLock()
	ents := make([]*bucketEntry, 0, len(bk.live))
	for _, e := range bk.live {
		ents = append(ents, e)
	}
	b.mu.RUnlock()
	sort.Slice(ents, func(i, j int) bool { return ents[i].off < ents[j].off })
	if err := b.writeMeta(b.path(bk.id, bucketMetaExt), bucketEncodeMeta(bk.id, bk.dataSize, ents)); err != nil {
		return fmt.Errorf("storage: rewrite meta of bucket %d: %w", bk.id, err)
	}
	return nil
}

// writeBucket writes and syncs the data then the meta of a new bucket, and
// fills ents' offsets. The data goes through a seqWriter on an O_DIRECT
// descriptor (buffered where the filesystem refuses O_DIRECT), which the
// bucket keeps for its reads.
func (b *bucketBackend) writeBucket(id uint64, ents []*bucketEntry, vals [][]byte) (bk *bucketFile, err error) {
	dataPath, metaPath := b.path(id, bucketDataExt), b.path(id, bucketMetaExt)
	f, _, err := fileio.OpenDirect(dataPath, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, fmt.Errorf("storage: create bucket: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(dataPath)
			os.Remove(metaPath)
		}
	}()
	w := newSeqWriter(b.eng, f)
	for j, e := range ents {
		hdr := bucketEncodeRecHdr(e.key, e.size, e.crc)
		w.AlignAfter(uint64(len(hdr)))
		w.Write(hdr)
		e.off = w.Offset()
		w.Write(vals[j])
	}
	end := w.Offset()
	if err = w.Close(); err != nil {
		return nil, fmt.Errorf("storage: write bucket %d: %w", id, err)
	}
	if err = b.eng.Datasync(f); err != nil {
		return nil, fmt.Errorf("storage: sync bucket %d: %w", id, err)
	}
	meta := bucketEncodeMeta(id, end, ents)
	if err = b.writeMeta(metaPath, meta); err != nil {
		return nil, fmt.Errorf("storage: write meta of bucket %d: %w", id, err)
	}
	return &bucketFile{id: id, f: f, dataSize: roundUpAlign(end), metaSize: roundUpAlign(uint64(len(meta))),
		live: make(map[string]*bucketEntry, len(ents))}, nil
}

type bucketRead struct {
	i int
	e *bucketEntry
}

// BatchLoad reads objects into dsts, verifying their checksums.
func (b *bucketBackend) BatchLoad(keys []string, dsts [][]byte) []error {
	return b.load(keys, dsts, false)
}

// BatchLoadPadded is BatchLoad for destinations whose capacity reaches the
// next multiple of fileio.Alignment (staging slots): values start on block
// boundaries, so each read then goes straight from the O_DIRECT file into
// the destination, bytes past the value included.
func (b *bucketBackend) BatchLoadPadded(keys []string, dsts [][]byte) []error {
	return b.load(keys, dsts, true)
}

func (b *bucketBackend) load(keys []string, dsts [][]byte, padded bool) []error {
	if len(keys) != len(dsts) {
		return bucketErrs(len(keys), fmt.Errorf("storage: %d keys but %d buffers", len(keys), len(dsts)))
	}
	if !b.enter() {
		return bucketErrs(len(keys), bucketErrClosed)
	}
	defer b.ops.Done()
	errs := make([]error, len(keys))
	reads := make([]bucketRead, 0, len(keys))
	b.mu.RLock()
	for i, k := range keys {
		e, ok := b.index[k]
		switch {
		case !ok:
			errs[i] = fmt.Errorf("%w: %q", ErrNotFound, k)
		case uint64(len(dsts[i])) != e.size:
			errs[i] = fmt.Errorf("%w: %q is %d bytes, buffer %d", ErrSize, k, e.size, len(dsts[i]))
		default:
			e.bk.refs.Add(1) // the bucket is linked: its deletion waits for this
			e.bk.lastAccess.Store(b.clock.Add(1))
			reads = append(reads, bucketRead{i, e})
		}
	}
	b.mu.RUnlock()
	defer func() {
		for _, r := range reads {
			r.e.bk.refs.Done()
		}
	}()
	if h := bucketLoadHook; h != nil {
		h(keys)
	}
	for start := 0; start < len(reads); start += bucketMaxReadsPerSubmit {
		chunk := reads[start:min(start+bucketMaxReadsPerSubmit, len(reads))]
		reqs := make([]fileio.Request, len(chunk))
		for j, r := range chunk {
			buf := dsts[r.i]
			if n := int(roundUpAlign(r.e.size)); padded && isAligned(r.e.off) && cap(buf) >= n {
				buf = buf[:n]
			}
			reqs[j] = fileio.Request{File: r.e.bk.f, Buf: buf, Off: int64(r.e.off)}
		}
		rerrs := b.eng.ReadBatch(reqs)
		for j, r := range chunk {
			dst := dsts[r.i]
			switch {
			case rerrs[j] != nil:
				clear(dst)
				errs[r.i] = fmt.Errorf("storage: read %q from bucket %d: %w", r.e.key, r.e.bk.id, rerrs[j])
			case bucketCRC(r.e.key, dst) != r.e.crc:
				clear(dst)
				errs[r.i] = fmt.Errorf("%w: %q in bucket %d at offset %d", ErrCorrupt, r.e.key, r.e.bk.id, r.e.off)
			}
		}
	}
	return errs
}

func (b *bucketBackend) Size(key string) (uint64, bool) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if e, ok := b.index[key]; ok {
		return e.size, true
	}
	return 0, false
}

// Remove unlinks the keys, rewrites the meta of the buckets that keep other
// objects and deletes the files of those left empty.
func (b *bucketBackend) Remove(keys []string) error {
	if !b.enter() {
		return bucketErrClosed
	}
	defer b.ops.Done()
	b.mu.Lock()
	seen := map[*bucketFile]bool{}
	var list []*bucketFile
	for _, k := range keys {
		e, ok := b.index[k]
		if !ok {
			continue
		}
		delete(b.index, k)
		delete(e.bk.live, k)
		if !seen[e.bk] {
			seen[e.bk] = true
			list = append(list, e.bk)
		}
	}
	emptied, touched := b.splitEmptyLocked(list)
	b.mu.Unlock()
	return b.afterUnlink(emptied, touched)
}

// ScanMeta reports every object recovered at open (or written since).
func (b *bucketBackend) ScanMeta(fn func(key string, size uint64) error) error {
	b.mu.RLock()
	if b.closed {
		b.mu.RUnlock()
		return bucketErrClosed
	}
	snap := make([]bucketEntry, 0, len(b.index))
	for _, e := range b.index {
		snap = append(snap, bucketEntry{key: e.key, size: e.size})
	}
	b.mu.RUnlock()
	for _, e := range snap {
		if err := fn(e.key, e.size); err != nil {
			return err
		}
	}
	return nil
}

// Usage reports the bytes of the bucket files (records incl. headers and
// dead copies, plus metas) and the number of live keys.
func (b *bucketBackend) Usage() (uint64, int) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.disk, len(b.index)
}

func (b *bucketBackend) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	b.mu.Unlock()
	b.ops.Wait()
	b.closeFiles()
	if b.ownEng {
		return b.eng.Close()
	}
	return nil
}

func (b *bucketBackend) closeFiles() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, bk := range b.buckets {
		bk.f.Close()
	}
}

// recover loads every intact bucket from the directory.
func (b *bucketBackend) recover() error {
	des, err := os.ReadDir(b.dir)
	if err != nil {
		return fmt.Errorf("storage: read bucket dir: %w", err)
	}
	metas := map[uint64]bool{}
	datas := map[uint64]bool{}
	for _, de := range des {
		name := de.Name()
		if !de.Type().IsRegular() {
			continue
		}
		if strings.HasSuffix(name, bucketTmpExt) {
			os.Remove(filepath.Join(b.dir, name))
			continue
		}
		ext := filepath.Ext(name)
		if ext != bucketDataExt && ext != bucketMetaExt {
			continue
		}
		id, err := strconv.ParseUint(strings.TrimSuffix(name, ext), 10, 64)
		if err != nil {
			continue
		}
		b.lastID = max(b.lastID, id)
		if ext == bucketDataExt {
			datas[id] = true
		} else {
			metas[id] = true
		}
	}
	for id := range datas {
		if !metas[id] {
			p := b.path(id, bucketDataExt)
			slog.Warn("storage: deleting bucket data without meta (interrupted write)", "path", p)
			os.Remove(p)
		}
	}
	ids := make([]uint64, 0, len(metas))
	for id := range metas {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	var emptied, touched []*bucketFile
	for _, id := range ids {
		bk, ents, err := b.openBucket(id, datas[id])
		if err != nil {
			slog.Error("storage: skipping bucket", "id", id, "dir", b.dir, "err", err)
			continue
		}
		e, t := b.publishLocked(bk, ents)
		emptied = append(emptied, e...)
		touched = append(touched, t...)
	}
	// Buckets fully superseded by newer ones (a crash before their meta was
	// rewritten) go; partially superseded ones get their meta rewritten.
	b.afterUnlinkRecovery(emptied, touched)
	return nil
}

func (b *bucketBackend) afterUnlinkRecovery(emptied, touched []*bucketFile) {
	live := touched[:0]
	for _, bk := range touched {
		if len(bk.live) > 0 && b.buckets[bk.id] == bk {
			live = append(live, bk)
		}
	}
	if err := b.afterUnlink(emptied, live); err != nil {
		slog.Error("storage: bucket recovery cleanup", "err", err)
	}
}

// openBucket reads and checks one bucket's meta and opens its data file.
func (b *bucketBackend) openBucket(id uint64, haveData bool) (*bucketFile, []*bucketEntry, error) {
	if !haveData {
		return nil, nil, errors.New("data file missing")
	}
	metaPath := b.path(id, bucketMetaExt)
	mf, err := os.Open(metaPath)
	if err != nil {
		return nil, nil, err
	}
	st, err := mf.Stat()
	if err != nil {
		mf.Close()
		return nil, nil, err
	}
	// Each entry of a meta stands for a record of the data file at least as
	// long, so a meta longer than its data file (and its own header) is no
	// meta of this bucket: refused before its length is allocated.
	if ds, err := os.Stat(b.path(id, bucketDataExt)); err != nil {
		mf.Close()
		return nil, nil, err
	} else if st.Size() > ds.Size()+bucketMetaHdrLen+4 {
		mf.Close()
		return nil, nil, fmt.Errorf("meta %s is %d bytes, longer than its data file (%d)", metaPath, st.Size(), ds.Size())
	}
	raw := make([]byte, st.Size())
	err = b.eng.ReadAt(mf, raw, 0)
	mf.Close()
	if err != nil {
		return nil, nil, fmt.Errorf("read meta: %w", err)
	}
	hdr, ents, err := bucketDecodeMeta(raw)
	if err != nil {
		return nil, nil, fmt.Errorf("meta %s: %w", metaPath, err)
	}
	if hdr.id != id {
		return nil, nil, fmt.Errorf("meta %s names bucket %d", metaPath, hdr.id)
	}
	f, _, err := fileio.OpenDirect(b.path(id, bucketDataExt), os.O_RDONLY, 0)
	if err != nil {
		return nil, nil, err
	}
	dst, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if uint64(dst.Size()) < hdr.dataSize {
		f.Close()
		return nil, nil, fmt.Errorf("data file is %d bytes, meta says %d", dst.Size(), hdr.dataSize)
	}
	return &bucketFile{id: id, f: f, dataSize: roundUpAlign(uint64(dst.Size())), metaSize: roundUpAlign(uint64(len(raw))),
		live: make(map[string]*bucketEntry, len(ents))}, ents, nil
}

// writeMeta replaces a meta file atomically (see writeFileAtomic).
func (b *bucketBackend) writeMeta(path string, p []byte) error {
	return writeFileAtomic(b.eng, path, path+bucketTmpExt, true, p)
}
