package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/gostore/gostore/gostore/alloc"
	"github.com/gostore/gostore/gostore/storage/fileio"
	"golang.org/x/sys/unix"
)

// Offset-allocator backend: one sparse file <Path>/kv_cache.data, space
// handed out by alloc.Allocator in 4 KiB units, and an index of 1024 shards
// (map + mutex each) from key to record. A record starts at a 4 KiB boundary;
// its value starts at the next boundary after the key and is padded to one:
//
//	magic u32 | crc u32 | key_len u32 | value_len u32 | seq u64 | key |
//	zeros | value | zeros
//
// (little endian; crc = CRC32C of key_len..key then the value). Loads read
// the head and the value separately, the value straight into staging
// memory where the destination allows (BatchLoadPadded). seq orders two intact
// records of one key that a crash left behind: the higher one wins. A replace
// writes the new record, datasyncs, switches the index, then invalidates the
// old record (zeroes its first 4 KiB block, datasync) and frees its space, once
// no load still reads it, punching a hole over it so that the file system
// gets its blocks back. Remove does the same without a new record. Opening
// scans the whole file at 4 KiB steps for valid magics (skipping holes with
// SEEK_DATA), verifies each record's CRC, rebuilds index and allocator, and
// logs and skips corrupt or torn records.
//
// Space: the file's size is the allocator's capacity, set with ftruncate,
// but nothing is reserved: blocks are taken as records are written and
// given back (punched) as they are freed, so the disk holds the live
// records only. The records' bytes stay within the disk cap: TotalSizeLimit
// (rounded down to 4 KiB), but no more than diskcap.go allows (90% of the
// file system, and what the file's records hold plus 95% of the free space
// at open; the cap is this process's alone). Each record must also leave
// the file system above the floor of diskcap.go (10% of it free, whatever
// the cap says; shared by every tier on it), the records being written
// counted as not yet on disk: a record that does not fit is refused as
// ErrFull. Opening punches every gap between the records found (dead
// records' tails, torn writes, blocks an older version reserved) before it
// measures the disk. A file from an earlier run that holds records past the
// cap keeps them all: the allocator's capacity reaches the last record, and
// new records are refused until the bytes in use fall below the cap. A
// record whose write or datasync fails gives its extent back and punches
// it; when the disk was full (ENOSPC: other files grew since the floor
// check) the object fails as ErrFull, the cap unchanged.

const (
	offsetMagic   = 0x324f5347 // "GSO2": values block-aligned
	offsetHdrLen  = 24
	offsetShards  = 1024
	offsetFile    = "kv_cache.data"
	offsetScanBuf = 1 << 20
)

type offsetEntry struct {
	off, span uint64 // record position and padded length
	size      uint64 // value length
	refs      int    // loads in flight (guarded by the shard mutex)
	dead      bool   // replaced or removed; freed when refs drops to 0
}

type offsetShard struct {
	mu  sync.Mutex
	idx map[string]*offsetEntry
}

type offsetBackend struct {
	dir       string
	f         *os.File
	eng       fileio.Engine
	ownEng    bool
	keysLimit uint64
	shards    [offsetShards]offsetShard
	seq       atomic.Uint64
	keys      atomic.Int64
	bytes     atomic.Int64
	zero      []byte // one aligned zero block for invalidation

	amu     sync.Mutex
	al      *alloc.Allocator
	limit   uint64 // the most bytes al may hand out: the disk cap
	writing uint64 // bytes of the records being written (the floor counts them)

	closeMu sync.RWMutex // held shared by every operation, exclusively by Close
	closed  bool
}

// NewOffsetAllocator opens (creating if needed) the data file under
// cfg.Path, recovers the records already in it and sizes it to the disk
// cap (sparse: nothing is reserved).
func NewOffsetAllocator(cfg Config) (Backend, error) {
	if cfg.Path == "" {
		return nil, errors.New("storage: offset_allocator: empty path")
	}
	if err := os.MkdirAll(cfg.Path, 0o755); err != nil {
		return nil, fmt.Errorf("storage: offset_allocator: %w", err)
	}
	sizeLimit, keysLimit := kvLimits(cfg)
	if sizeLimit < fileio.Alignment {
		return nil, fmt.Errorf("storage: offset_allocator: size limit %d is below %d", sizeLimit, fileio.Alignment)
	}
	f, _, err := fileio.OpenDirect(filepath.Join(cfg.Path, offsetFile), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("storage: offset_allocator: %w", err)
	}
	eng, own, err := kvEngine(cfg)
	if err != nil {
		f.Close()
		return nil, err
	}
	b := &offsetBackend{dir: cfg.Path, f: f, eng: eng, ownEng: own, keysLimit: keysLimit,
		zero: fileio.AlignedBuffer(fileio.Alignment, fileio.Alignment)}
	for i := range b.shards {
		b.shards[i].idx = make(map[string]*offsetEntry)
	}
	if err := b.recover(sizeLimit); err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

func (b *offsetBackend) Name() string { return "offset_allocator_storage_backend" }

func (b *offsetBackend) shard(key string) *offsetShard {
	// FNV-1a, 32 bit.
	h := uint32(2166136261)
	for i := 0; i < len(key); i++ {
		h ^= uint32(key[i])
		h *= 16777619
	}
	return &b.shards[h%offsetShards]
}

func offsetSpan(key string, vlen uint64) uint64 {
	_, span := offsetLayout(uint64(len(key)), vlen)
	return span
}

// offsetLayout is where a record's value starts (after header and key, on
// a block boundary) and the bytes the whole record takes.
func offsetLayout(keyLen, valLen uint64) (valOff, span uint64) {
	valOff = roundUpAlign(offsetHdrLen + keyLen)
	return valOff, valOff + roundUpAlign(valLen)
}

// offsetCRC is a record's checksum: its header from key_len on, its key
// and its value.
func offsetCRC(head []byte, keyLen uint32, val []byte) uint32 {
	return crc32.Update(crc32.Checksum(head[8:offsetHdrLen+keyLen], kvCRCTable), kvCRCTable, val)
}

func (b *offsetBackend) enter() bool {
	b.closeMu.RLock()
	if b.closed {
		b.closeMu.RUnlock()
		return false
	}
	return true
}

func (b *offsetBackend) BatchOffload(keys []string, values [][]byte) []error {
	if len(keys) != len(values) {
		return kvErrs(len(keys), errors.New("storage: offset_allocator: keys and values differ in length"))
	}
	if !b.enter() {
		return kvErrs(len(keys), os.ErrClosed)
	}
	defer b.closeMu.RUnlock()
	errs := make([]error, len(keys))
	// One key twice in a batch: only its last copy is written (two
	// parallel writes of one key would race for the index).
	last := lastCopies(keys)
	// Write every record (in parallel), make them durable with one
	// datasync, publish them, then retire the records they replaced with
	// one more.
	pend := make([]*offsetPending, len(keys))
	fileio.ForEach(len(keys), offloadWorkers, func(i int) {
		if last[keys[i]] == i {
			pend[i], errs[i] = b.write(keys[i], values[i])
		}
	})
	synced := noSpace(b.Name(), b.dir, b.eng.Datasync(b.f))
	var replaced []*offsetEntry
	for i, p := range pend {
		switch {
		case p == nil:
		case synced != nil:
			errs[i] = fmt.Errorf("storage: offset_allocator: offload %q: %w", keys[i], synced)
			b.abandon(p)
		default:
			if old := b.publish(keys[i], p); old != nil {
				replaced = append(replaced, old)
			}
		}
	}
	b.release(replaced...)
	shareLast(errs, keys, last)
	return errs
}

// offsetPending is a record written but not yet durable nor indexed.
type offsetPending struct {
	e        *offsetEntry
	reserved bool // a new key: counted against the key limit already
}

// write reserves room for key's record and writes it (not yet synced).
func (b *offsetBackend) write(key string, val []byte) (*offsetPending, error) {
	if len(key) > 1<<20 || uint64(len(val)) > 0xffffffff {
		return nil, fmt.Errorf("storage: offset_allocator: key or value of %q too large", key)
	}
	sh := b.shard(key)
	sh.mu.Lock()
	_, exists := sh.idx[key]
	sh.mu.Unlock()
	p := &offsetPending{}
	if !exists {
		if uint64(b.keys.Add(1)) > b.keysLimit {
			b.keys.Add(-1)
			return nil, fmt.Errorf("%w: key limit %d, key %q", ErrFull, b.keysLimit, key)
		}
		p.reserved = true
	}
	span := offsetSpan(key, uint64(len(val)))
	b.amu.Lock()
	off, ok, used, limit := uint64(0), false, b.al.Used(), b.limit
	// The floor: the records being written may not have taken their
	// blocks yet, so they count on top of what statfs reports in use.
	err := checkFloor(b.dir, span, b.writing)
	if err == nil && used+span <= limit {
		off, ok = b.al.Alloc(span)
	}
	if ok {
		b.writing += span
	}
	b.amu.Unlock()
	p.e = &offsetEntry{off: off, span: span, size: uint64(len(val))}
	if !ok {
		p.e.span = 0
		b.abandon(p)
		if err != nil {
			return nil, fmt.Errorf("storage: offset_allocator: offload %q: %w", key, err)
		}
		return nil, fmt.Errorf("%w: no %d-byte extent for %q (%d of %d bytes in use)", ErrFull, span, key, used, limit)
	}
	err = b.writeRecord(off, span, key, val)
	b.amu.Lock()
	b.writing -= span // its blocks are taken now (or punched by abandon)
	b.amu.Unlock()
	if err != nil {
		b.abandon(p)
		return nil, fmt.Errorf("storage: offset_allocator: offload %q: %w", key, noSpace(b.Name(), b.dir, err))
	}
	return p, nil
}

// abandon gives back what write reserved: the key, and the extent with the
// blocks a write took there (the record may be whole but not durable, or
// torn). Where the file system cannot punch, zeroing the first block
// invalidates what was written, so a restart cannot resurrect it.
func (b *offsetBackend) abandon(p *offsetPending) {
	if p.e.span > 0 {
		if err := punchHole(b.f, p.e.off, p.e.span); err != nil {
			b.eng.WriteAt(b.f, b.zero, int64(p.e.off)) // best effort; recovery checks CRCs anyway
		}
		b.free(p.e.off, p.e.span)
	}
	if p.reserved {
		b.keys.Add(-1)
	}
}

// publish makes a durable record the key's current one. It returns the
// record it replaced when no read holds that one any more: the caller
// releases it.
func (b *offsetBackend) publish(key string, p *offsetPending) *offsetEntry {
	e := p.e
	sh := b.shard(key)
	sh.mu.Lock()
	old := sh.idx[key]
	sh.idx[key] = e
	switch {
	case old != nil && p.reserved:
		b.keys.Add(-1)
	case old == nil && !p.reserved:
		b.keys.Add(1)
	}
	b.bytes.Add(int64(e.size))
	var release *offsetEntry
	if old != nil {
		b.bytes.Add(-int64(old.size))
		old.dead = true
		if old.refs == 0 {
			release = old
		}
	}
	sh.mu.Unlock()
	return release
}

// writeRecord writes one record (the caller syncs).
func (b *offsetBackend) writeRecord(off, span uint64, key string, val []byte) error {
	buf := fileio.AlignedBuffer(int(span), fileio.Alignment)
	defer fileio.FreeAligned(buf)
	binary.LittleEndian.PutUint32(buf[0:], offsetMagic)
	binary.LittleEndian.PutUint32(buf[8:], uint32(len(key)))
	binary.LittleEndian.PutUint32(buf[12:], uint32(len(val)))
	binary.LittleEndian.PutUint64(buf[16:], b.seq.Add(1))
	copy(buf[offsetHdrLen:], key)
	valOff, _ := offsetLayout(uint64(len(key)), uint64(len(val)))
	copy(buf[valOff:], val)
	binary.LittleEndian.PutUint32(buf[4:], offsetCRC(buf, uint32(len(key)), val))
	return b.eng.WriteAt(b.f, buf, int64(off))
}

// release invalidates dead records on disk, with one datasync for all,
// gives their blocks back to the file system (best effort: a file system
// that cannot punch holes keeps them until the space is reused) and frees
// their extents.
func (b *offsetBackend) release(dead ...*offsetEntry) {
	if len(dead) == 0 {
		return
	}
	var err error
	for _, e := range dead {
		if err = b.eng.WriteAt(b.f, b.zero, int64(e.off)); err != nil {
			break
		}
	}
	if err == nil {
		err = b.eng.Datasync(b.f)
	}
	if err != nil {
		// Keep the space allocated: a still-valid header there must not be
		// overwritten by a new record's tail and must not be resurrected
		// with wrong data; recovery resolves it by seq.
		slog.Error("storage: offset_allocator: cannot invalidate dead records; leaking their space",
			"records", len(dead), "offset", dead[0].off, "err", err)
		return
	}
	var perr error
	for _, e := range dead {
		if err := punchHole(b.f, e.off, e.span); err != nil && perr == nil && !errors.Is(err, unix.EOPNOTSUPP) {
			perr = err
		}
		b.free(e.off, e.span)
	}
	if perr != nil {
		slog.Warn("storage: offset_allocator: cannot give freed blocks back to the file system",
			"records", len(dead), "err", perr)
	}
}

func (b *offsetBackend) free(off, span uint64) {
	b.amu.Lock()
	err := b.al.Free(off, span)
	b.amu.Unlock()
	if err != nil {
		slog.Error("storage: offset_allocator: free", "offset", off, "span", span, "err", err)
	}
}

func (b *offsetBackend) BatchLoad(keys []string, dsts [][]byte) []error {
	return b.load(keys, dsts, false)
}

// BatchLoadPadded is BatchLoad for destinations whose capacity reaches the
// next multiple of fileio.Alignment: each value is read straight into its
// destination (O_DIRECT, fixed buffers on io_uring), its padding included.
func (b *offsetBackend) BatchLoadPadded(keys []string, dsts [][]byte) []error {
	return b.load(keys, dsts, true)
}

func (b *offsetBackend) load(keys []string, dsts [][]byte, padded bool) []error {
	if len(keys) != len(dsts) {
		return kvErrs(len(keys), errors.New("storage: offset_allocator: keys and dsts differ in length"))
	}
	if !b.enter() {
		return kvErrs(len(keys), os.ErrClosed)
	}
	defer b.closeMu.RUnlock()
	errs := make([]error, len(keys))
	for start := 0; start < len(keys); start += fileio.QueueDepth / 2 {
		end := min(start+fileio.QueueDepth/2, len(keys))
		b.loadChunk(keys[start:end], dsts[start:end], errs[start:end], padded)
	}
	return errs
}

// loadChunk reads up to QueueDepth/2 objects with one ReadBatch: per object
// its head (header and key) and its value, into the destination or, when
// that cannot take the padded read, into scratch memory copied out once
// the record checks out. All heads and scratch values share one aligned
// allocation.
func (b *offsetBackend) loadChunk(keys []string, dsts [][]byte, errs []error, padded bool) {
	ents := make([]*offsetEntry, len(keys))
	inPlace := make([]bool, len(keys))
	var scratchLen uint64
	for i, key := range keys {
		sh := b.shard(key)
		sh.mu.Lock()
		e := sh.idx[key]
		if e != nil && e.size == uint64(len(dsts[i])) {
			e.refs++
		}
		sh.mu.Unlock()
		switch {
		case e == nil:
			errs[i] = fmt.Errorf("%w: %q", ErrNotFound, key)
			continue
		case e.size != uint64(len(dsts[i])):
			errs[i] = fmt.Errorf("%w: %q is %d bytes, dst %d", ErrSize, key, e.size, len(dsts[i]))
			continue
		}
		ents[i] = e
		valOff, _ := offsetLayout(uint64(len(key)), e.size)
		n := roundUpAlign(e.size)
		inPlace[i] = padded && uint64(cap(dsts[i])) >= n
		scratchLen += valOff
		if !inPlace[i] {
			scratchLen += n
		}
	}
	scratch := fileio.AlignedBuffer(int(scratchLen), fileio.Alignment)
	defer fileio.FreeAligned(scratch)
	take := func(n uint64) []byte {
		p := scratch[:n:n]
		scratch = scratch[n:]
		return p
	}
	heads := make([][]byte, len(keys))
	vals := make([][]byte, len(keys)) // the padded read of each value
	reqs := make([]fileio.Request, 0, 2*len(keys))
	owner := make([]int, 0, 2*len(keys))
	for i, e := range ents {
		if e == nil {
			continue
		}
		valOff, _ := offsetLayout(uint64(len(keys[i])), e.size)
		n := roundUpAlign(e.size)
		heads[i] = take(valOff)
		reqs = append(reqs, fileio.Request{File: b.f, Buf: heads[i], Off: int64(e.off)})
		owner = append(owner, i)
		if inPlace[i] {
			vals[i] = dsts[i][:n]
		} else {
			vals[i] = take(n)
		}
		if n > 0 {
			reqs = append(reqs, fileio.Request{File: b.f, Buf: vals[i], Off: int64(e.off + valOff)})
			owner = append(owner, i)
		}
	}
	if len(reqs) > 0 {
		for j, err := range b.eng.ReadBatch(reqs) {
			if i := owner[j]; err != nil && errs[i] == nil {
				errs[i] = fmt.Errorf("storage: offset_allocator: read %q: %w", keys[i], err)
			}
		}
	}
	var dead []*offsetEntry
	for i, e := range ents {
		if e == nil {
			continue
		}
		if errs[i] == nil {
			errs[i] = offsetVerify(heads[i], keys[i], vals[i][:e.size])
		}
		switch {
		case errs[i] != nil:
			clear(dsts[i]) // never hand out wrong bytes
		case !inPlace[i]:
			copy(dsts[i], vals[i])
		}
		sh := b.shard(keys[i])
		sh.mu.Lock()
		e.refs--
		if e.dead && e.refs == 0 {
			dead = append(dead, e)
		}
		sh.mu.Unlock()
	}
	b.release(dead...)
}

// offsetVerify checks a record's head and value read from disk against
// key and its checksum.
func offsetVerify(head []byte, key string, val []byte) error {
	kl, vl, err := offsetParseHdr(head)
	if err != nil {
		return fmt.Errorf("%w: %q: %v", ErrCorrupt, key, err)
	}
	if kl != uint32(len(key)) || vl != uint32(len(val)) || offsetHdrLen+uint64(kl) > uint64(len(head)) ||
		string(head[offsetHdrLen:offsetHdrLen+kl]) != key {
		return fmt.Errorf("%w: %q: record header does not match the index", ErrCorrupt, key)
	}
	if offsetCRC(head, kl, val) != binary.LittleEndian.Uint32(head[4:]) {
		return fmt.Errorf("%w: %q", ErrCorrupt, key)
	}
	return nil
}

func offsetParseHdr(rec []byte) (kl, vl uint32, err error) {
	if len(rec) < offsetHdrLen {
		return 0, 0, errors.New("short record")
	}
	if m := binary.LittleEndian.Uint32(rec); m != offsetMagic {
		return 0, 0, fmt.Errorf("bad magic %#x", m)
	}
	return binary.LittleEndian.Uint32(rec[8:]), binary.LittleEndian.Uint32(rec[12:]), nil
}

func (b *offsetBackend) Size(key string) (uint64, bool) {
	sh := b.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := sh.idx[key]; e != nil {
		return e.size, true
	}
	return 0, false
}

func (b *offsetBackend) Remove(keys []string) error {
	if !b.enter() {
		return os.ErrClosed
	}
	defer b.closeMu.RUnlock()
	var dead []*offsetEntry
	for _, key := range keys {
		sh := b.shard(key)
		sh.mu.Lock()
		if e := sh.idx[key]; e != nil {
			delete(sh.idx, key)
			b.keys.Add(-1)
			b.bytes.Add(-int64(e.size))
			e.dead = true
			if e.refs == 0 {
				dead = append(dead, e)
			}
		}
		sh.mu.Unlock()
	}
	b.release(dead...)
	return nil
}

// ScanMeta reports the index, which opening rebuilt from the file.
func (b *offsetBackend) ScanMeta(fn func(key string, size uint64) error) error {
	if !b.enter() {
		return os.ErrClosed
	}
	type kv struct {
		k string
		s uint64
	}
	var all []kv
	for i := range b.shards {
		sh := &b.shards[i]
		sh.mu.Lock()
		for k, e := range sh.idx {
			all = append(all, kv{k, e.size})
		}
		sh.mu.Unlock()
	}
	b.closeMu.RUnlock()
	for _, x := range all {
		if err := fn(x.k, x.s); err != nil {
			return err
		}
	}
	return nil
}

func (b *offsetBackend) Usage() (uint64, int) {
	return uint64(b.bytes.Load()), int(b.keys.Load())
}

func (b *offsetBackend) Close() error {
	b.closeMu.Lock()
	defer b.closeMu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	err := b.f.Close()
	if b.ownEng {
		err = errors.Join(err, b.eng.Close())
	}
	fileio.FreeAligned(b.zero)
	return err
}

type offsetFound struct {
	key       string
	off, span uint64
	size      uint64
	seq       uint64
}

// recover finds the records of the data file, gives the blocks between them
// back to the file system, sets the cap from sizeLimit and the disk, sizes
// the file to the allocator's capacity (the cap, or further to the last
// record) and rebuilds index and allocator.
func (b *offsetBackend) recover(sizeLimit uint64) error {
	fi, err := b.f.Stat()
	if err != nil {
		return fmt.Errorf("storage: offset_allocator: %w", err)
	}
	size := uint64(fi.Size())
	byKey, stale, err := b.scan(roundDownAlign(size))
	if err != nil {
		return err
	}
	recs := make([]offsetFound, 0, len(byKey)+len(stale))
	for _, r := range byKey {
		recs = append(recs, r)
	}
	recs = append(recs, stale...)
	slices.SortFunc(recs, func(a, c offsetFound) int {
		switch {
		case a.off < c.off:
			return -1
		case a.off > c.off:
			return 1
		}
		return 0
	})

	// Nothing live lies between the records (dead records' tails, torn
	// writes, blocks reserved by an older version): punched before the disk
	// is measured, it counts as free space.
	var held, end uint64
	punch := func(off, n uint64) {
		if n == 0 {
			return
		}
		if err := punchHole(b.f, off, n); err != nil && !errors.Is(err, unix.EOPNOTSUPP) {
			slog.Warn("storage: offset_allocator: recovery: cannot give unused blocks back to the file system",
				"offset", off, "bytes", n, "err", err)
		}
	}
	for _, r := range recs {
		if r.off >= end { // records never overlap (the scan resumes after each), but never punch one
			punch(end, r.off-end)
		}
		held += r.span
		end = max(end, r.off+r.span)
	}
	if size > end {
		punch(end, size-end)
	}
	limit, err := diskCap(b.Name(), b.dir, sizeLimit, held)
	if err != nil {
		return err
	}
	b.limit = roundDownAlign(limit)
	if held > b.limit {
		slog.Warn("storage: offset_allocator: the records found exceed the size cap; all are kept, new ones are refused until removals make room",
			"dir", b.dir, "held", held, "cap", b.limit)
	}
	// The allocator covers every record found, past the cap too: a file
	// from a run with a larger cap loses nothing.
	capacity := max(b.limit, end, fileio.Alignment)
	if size != capacity {
		if err := b.f.Truncate(int64(capacity)); err != nil {
			return fmt.Errorf("storage: offset_allocator: size the data file to %d bytes: %w", capacity, err)
		}
	}
	if err := b.rebuild(capacity, recs); err != nil {
		return err
	}
	var maxSeq uint64
	for _, r := range byKey {
		sh := b.shard(r.key)
		sh.idx[r.key] = &offsetEntry{off: r.off, span: r.span, size: r.size}
		b.keys.Add(1)
		b.bytes.Add(int64(r.size))
		maxSeq = max(maxSeq, r.seq)
	}
	dead := make([]*offsetEntry, len(stale))
	for i, r := range stale {
		maxSeq = max(maxSeq, r.seq)
		dead[i] = &offsetEntry{off: r.off, span: r.span}
	}
	b.release(dead...)
	b.seq.Store(maxSeq)
	return nil
}

// scan finds the intact records of [0, capacity): the newest of each key,
// and the older copies (stale) that a crash left behind.
func (b *offsetBackend) scan(capacity uint64) (byKey map[string]offsetFound, stale []offsetFound, err error) {
	byKey = make(map[string]offsetFound)
	fd := int(b.f.Fd())
	buf := fileio.AlignedBuffer(offsetScanBuf, fileio.Alignment)
	defer fileio.FreeAligned(buf)
	var long []byte // the value of a record longer than buf, read in turns
	pos := uint64(0)
	for pos < capacity {
		// Skip holes (never-written space of a sparse file).
		if d, err := unix.Seek(fd, int64(pos), unix.SEEK_DATA); errors.Is(err, unix.ENXIO) {
			break // no data after pos
		} else if err != nil || d < 0 {
			// SEEK_DATA unsupported: scan everything.
		} else if a := roundDownAlign(uint64(d)); a > pos {
			pos = a
			if pos >= capacity {
				break
			}
		}
		n := min(uint64(len(buf)), capacity-pos)
		chunk := buf[:n]
		if err := b.eng.ReadAt(b.f, chunk, int64(pos)); err != nil {
			return nil, nil, fmt.Errorf("storage: offset_allocator: recovery read at %d: %w", pos, err)
		}
		next := pos + n
		for o := uint64(0); o < n; o += fileio.Alignment {
			at := pos + o
			kl, vl, err := offsetParseHdr(chunk[o:])
			if err != nil {
				continue // free or invalidated block
			}
			_, span := offsetLayout(uint64(kl), uint64(vl))
			if kl > 1<<20 || at+span > capacity {
				slog.Error("storage: offset_allocator: recovery: skipping record past the end of the file",
					"offset", at, "span", span)
				continue
			}
			var found offsetFound
			if o+span <= n {
				found, err = offsetCheck(chunk[o:o+span], kl, vl)
			} else {
				if long == nil {
					long = fileio.AlignedBuffer(offsetScanBuf, fileio.Alignment)
					defer fileio.FreeAligned(long)
				}
				found, err = b.checkLong(at, kl, vl, long)
			}
			if err != nil {
				slog.Error("storage: offset_allocator: recovery: skipping corrupt or torn record",
					"offset", at, "err", err)
				continue
			}
			found.off, found.span = at, span
			if prev, dup := byKey[found.key]; dup {
				if prev.seq > found.seq {
					stale = append(stale, found)
					found = prev
				} else {
					stale = append(stale, prev)
				}
			}
			byKey[found.key] = found
			if at+span > next {
				next = at + span
			}
			o += span - fileio.Alignment // continue after the record
		}
		pos = next
	}
	return byKey, stale, nil
}

// rebuild makes the allocator over [0, capacity) with the records recs
// (sorted by offset) allocated: with one free extent [cur, capacity) left,
// Alloc always splits at cur, so allocating the gaps and records in offset
// order reproduces the layout; the gaps are then freed.
func (b *offsetBackend) rebuild(capacity uint64, recs []offsetFound) error {
	b.al = alloc.New(capacity, fileio.Alignment)
	var gaps [][2]uint64
	cur := uint64(0)
	take := func(off, size uint64) error {
		got, ok := b.al.Alloc(size)
		if !ok || got != off {
			return fmt.Errorf("storage: offset_allocator: recovery: allocator rebuild at %d got %d (%v)", off, got, ok)
		}
		return nil
	}
	for _, r := range recs {
		if r.off < cur {
			continue // overlaps a previous record (cannot happen with sane data)
		}
		if r.off > cur {
			if err := take(cur, r.off-cur); err != nil {
				return err
			}
			gaps = append(gaps, [2]uint64{cur, r.off - cur})
		}
		if err := take(r.off, r.span); err != nil {
			return err
		}
		cur = r.off + r.span
	}
	for _, g := range gaps {
		if err := b.al.Free(g[0], g[1]); err != nil {
			return err
		}
	}
	return nil
}

// offsetCheck verifies a whole record whose header gave kl and vl.
func offsetCheck(rec []byte, kl, vl uint32) (offsetFound, error) {
	valOff, _ := offsetLayout(uint64(kl), uint64(vl))
	end := valOff + uint64(vl)
	if end > uint64(len(rec)) {
		return offsetFound{}, errors.New("record longer than its span")
	}
	if offsetCRC(rec, kl, rec[valOff:end]) != binary.LittleEndian.Uint32(rec[4:]) {
		return offsetFound{}, errors.New("checksum mismatch")
	}
	return offsetFoundIn(rec, kl, vl), nil
}

func offsetFoundIn(head []byte, kl, vl uint32) offsetFound {
	return offsetFound{
		key:  string(head[offsetHdrLen : offsetHdrLen+kl]),
		size: uint64(vl),
		seq:  binary.LittleEndian.Uint64(head[16:]),
	}
}

// checkLong is offsetCheck for a record that runs past the scan buffer:
// its head (key at most 1 MiB) is read whole and its value through buf in
// turns, so a length a damaged header claims (up to 4 GiB) costs reads,
// never its size in memory.
func (b *offsetBackend) checkLong(at uint64, kl, vl uint32, buf []byte) (offsetFound, error) {
	valOff, _ := offsetLayout(uint64(kl), uint64(vl))
	head := fileio.AlignedBuffer(int(valOff), fileio.Alignment)
	defer fileio.FreeAligned(head)
	if err := b.eng.ReadAt(b.f, head, int64(at)); err != nil {
		return offsetFound{}, err
	}
	crc := crc32.Checksum(head[8:offsetHdrLen+kl], kvCRCTable)
	for done := uint64(0); done < uint64(vl); {
		part := buf[:min(uint64(len(buf)), roundUpAlign(uint64(vl)-done))]
		if err := b.eng.ReadAt(b.f, part, int64(at+valOff+done)); err != nil {
			return offsetFound{}, err
		}
		use := min(uint64(len(part)), uint64(vl)-done)
		crc = crc32.Update(crc, kvCRCTable, part[:use])
		done += use
	}
	if crc != binary.LittleEndian.Uint32(head[4:]) {
		return offsetFound{}, errors.New("checksum mismatch")
	}
	return offsetFoundIn(head, kl, vl), nil
}
