package storage

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/gostore/gostore/gostore/storage/fileio"
)

// File-per-key backend: one file per object at
// <Path>/<h[0:2]>/<h[2:4]>/<h> with h = hex(sha256(key)). A file is
//
//	header (24 B, little endian):
//	  magic u32 | version u16 (2) | reserved u16 | key_len u32 |
//	  crc32c(key+value) u32 | value_len u64
//	key | zeros up to the next 4 KiB | value | zeros up to the next 4 KiB
//
// The value starts and the file ends on a block boundary, so files are
// written and read O_DIRECT, a value straight into staging memory.
// It is written under a unique temporary name (<h>.tmp.<n>), datasynced and
// renamed over the final name (an atomic replace), then the directory is
// synced. Loads verify the header, the key and the CRC. Opening walks the
// tree to rebuild the in-memory index (key → size); torn files (short header,
// bad magic or version, wrong key, size mismatch) are skipped with a logged
// error and leftover temporary files are deleted. ScanMeta reports that index.
//
// Limits: the value bytes stay within TotalSizeLimit, and the bytes the
// files take (header and key padded to a block, plus the value padded to a
// block) within the disk cap: TotalSizeLimit, but no more than diskcap.go
// allows (90% of the file system, and what the files hold plus 95% of the
// free space at open; the cap is this process's alone). A replacement
// counts the new file on top of the old one until it is renamed over it, as
// the disk holds both until then. Each write must also leave the file
// system above the floor of diskcap.go (10% of it free, whatever the cap
// says; shared by every tier on it): the files being written count as not
// yet on disk, and an object that does not fit is refused as ErrFull. A
// write the disk refuses anyway (ENOSPC: other files grew since the check)
// fails as ErrFull too, the cap unchanged; a failed write never leaves its
// temporary file behind (writeFileAtomic removes it).

const (
	perkeyMagic   = 0x4b505347 // "GSPK"
	perkeyVersion = 2
	perkeyHdrLen  = 24
	perkeyStripes = 256
	perkeyTmpMark = ".tmp."
)

type perkeyBackend struct {
	dir        string
	eng        fileio.Engine
	ownEng     bool
	sizeLimit  uint64
	keysLimit  uint64
	stripes    [perkeyStripes]sync.Mutex // serialise writers/removers of one key
	tmpCounter atomic.Uint64

	mu      sync.Mutex
	index   map[string]uint64
	bytes   uint64 // sum of value sizes, including writes in progress
	keys    uint64 // live keys, including new keys being written
	disk    uint64 // bytes of the files, including writes in progress
	writing uint64 // bytes of the files being written (part of disk)
	diskCap uint64 // the most disk may reach (see diskCap)
	closed  bool
}

// NewFilePerKey opens (creating if needed) a file-per-key backend under
// cfg.Path and rebuilds its index from the files found there.
func NewFilePerKey(cfg Config) (Backend, error) {
	if cfg.Path == "" {
		return nil, errors.New("storage: file_per_key: empty path")
	}
	if err := os.MkdirAll(cfg.Path, 0o755); err != nil {
		return nil, fmt.Errorf("storage: file_per_key: %w", err)
	}
	eng, own, err := kvEngine(cfg)
	if err != nil {
		return nil, err
	}
	b := &perkeyBackend{dir: cfg.Path, eng: eng, ownEng: own, index: make(map[string]uint64)}
	b.sizeLimit, b.keysLimit = kvLimits(cfg)
	err = b.recover()
	if err == nil {
		b.diskCap, err = diskCap(b.Name(), b.dir, b.sizeLimit, b.disk)
	}
	if err != nil {
		if own {
			eng.Close()
		}
		return nil, err
	}
	return b, nil
}

func (b *perkeyBackend) Name() string { return "file_per_key_storage_backend" }

func perkeyHash(key string) string {
	h := sha256.Sum256([]byte(key))
	return hex.EncodeToString(h[:])
}

func (b *perkeyBackend) pathOf(h string) string {
	return filepath.Join(b.dir, h[0:2], h[2:4], h)
}

func (b *perkeyBackend) stripe(h string) *sync.Mutex {
	v, _ := hex.DecodeString(h[:2])
	return &b.stripes[v[0]]
}

func perkeyEncodeHdr(dst []byte, key string, crc uint32, vlen uint64) {
	binary.LittleEndian.PutUint32(dst[0:], perkeyMagic)
	binary.LittleEndian.PutUint16(dst[4:], perkeyVersion)
	binary.LittleEndian.PutUint16(dst[6:], 0)
	binary.LittleEndian.PutUint32(dst[8:], uint32(len(key)))
	binary.LittleEndian.PutUint32(dst[12:], crc)
	binary.LittleEndian.PutUint64(dst[16:], vlen)
}

type perkeyHdr struct {
	keyLen uint32
	crc    uint32
	valLen uint64
}

func perkeyDecodeHdr(p []byte) (perkeyHdr, error) {
	if len(p) < perkeyHdrLen {
		return perkeyHdr{}, errors.New("short header")
	}
	if m := binary.LittleEndian.Uint32(p[0:]); m != perkeyMagic {
		return perkeyHdr{}, fmt.Errorf("bad magic %#x", m)
	}
	if v := binary.LittleEndian.Uint16(p[4:]); v != perkeyVersion {
		return perkeyHdr{}, fmt.Errorf("unknown version %d", v)
	}
	return perkeyHdr{
		keyLen: binary.LittleEndian.Uint32(p[8:]),
		crc:    binary.LittleEndian.Uint32(p[12:]),
		valLen: binary.LittleEndian.Uint64(p[16:]),
	}, nil
}

func (b *perkeyBackend) isClosed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closed
}

func (b *perkeyBackend) BatchOffload(keys []string, values [][]byte) []error {
	if len(keys) != len(values) {
		return kvErrs(len(keys), errors.New("storage: file_per_key: keys and values differ in length"))
	}
	errs := make([]error, len(keys))
	// Writers of one key serialise on its stripe; the last copy of a key
	// in the batch must also be the one that lands last.
	last := lastCopies(keys)
	fileio.ForEach(len(keys), offloadWorkers, func(i int) {
		if last[keys[i]] == i {
			errs[i] = b.offload(keys[i], values[i])
		}
	})
	shareLast(errs, keys, last)
	return errs
}

func (b *perkeyBackend) offload(key string, val []byte) error {
	h := perkeyHash(key)
	st := b.stripe(h)
	st.Lock()
	defer st.Unlock()

	size := uint64(len(val))
	fileLen := perkeyFileLen(len(key), size)
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return os.ErrClosed
	}
	old, exists := b.index[key]
	newKey := uint64(0)
	if !exists {
		newKey = 1
	}
	if b.bytes-old+size > b.sizeLimit || b.keys+newKey > b.keysLimit {
		b.mu.Unlock()
		return fmt.Errorf("%w: key %q (%d bytes)", ErrFull, key, size)
	}
	// The new file is written beside the old one: both count until the
	// rename.
	if b.disk+fileLen > b.diskCap {
		err := fmt.Errorf("%w: key %q: its %d-byte file on top of %d bytes of files exceeds the disk cap %d",
			ErrFull, key, fileLen, b.disk, b.diskCap)
		b.mu.Unlock()
		return err
	}
	// The floor: the files being written may not have taken their blocks
	// yet, so they count on top of what statfs reports in use.
	if err := checkFloor(b.dir, fileLen, b.writing); err != nil {
		b.mu.Unlock()
		return fmt.Errorf("storage: file_per_key: offload %q: %w", key, err)
	}
	b.bytes += size // reserved until the write ends
	b.keys += newKey
	b.disk += fileLen
	b.writing += fileLen
	b.mu.Unlock()

	err := b.writeFile(h, key, val)

	b.mu.Lock()
	defer b.mu.Unlock()
	b.writing -= fileLen
	if err != nil {
		b.bytes -= size
		b.keys -= newKey
		b.disk -= fileLen
		return fmt.Errorf("storage: file_per_key: offload %q: %w", key, noSpace(b.Name(), b.dir, err))
	}
	b.bytes -= old
	if exists {
		b.disk -= perkeyFileLen(len(key), old)
	}
	b.index[key] = size
	return nil
}

func (b *perkeyBackend) writeFile(h, key string, val []byte) error {
	final := b.pathOf(h)
	d2 := filepath.Dir(final)
	if err := perkeyMkdir(d2); err != nil {
		return err
	}
	head := make([]byte, perkeyValueOff(len(key)))
	copy(head[perkeyHdrLen:], key)
	crc := crc32.Update(crc32.Checksum([]byte(key), kvCRCTable), kvCRCTable, val)
	perkeyEncodeHdr(head, key, crc, uint64(len(val)))

	tmp := fmt.Sprintf("%s%s%d", final, perkeyTmpMark, b.tmpCounter.Add(1))
	return writeFileAtomic(b.eng, final, tmp, false, head, val)
}

// perkeyFileLen is the bytes the file of a keyLen-byte key and a
// valLen-byte value takes: header and key, then the value, each padded to
// a block.
func perkeyFileLen(keyLen int, valLen uint64) uint64 {
	return uint64(perkeyValueOff(keyLen)) + roundUpAlign(valLen)
}

// perkeyValueOff is where the value of a file holding a keyLen-byte key
// starts: the first block boundary after header and key.
func perkeyValueOff(keyLen int) int64 {
	return int64(roundUpAlign(uint64(perkeyHdrLen + keyLen)))
}

// perkeyMkdir creates dir and its parent as needed, syncing the parent of
// each directory it creates so the new entry is durable.
func perkeyMkdir(dir string) error {
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	parent := filepath.Dir(dir)
	if err := perkeyMkdir(parent); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil
		}
		return err
	}
	return syncDir(parent)
}

func (b *perkeyBackend) BatchLoad(keys []string, dsts [][]byte) []error {
	return b.load(keys, dsts, false)
}

// BatchLoadPadded is BatchLoad for destinations whose capacity reaches the
// next multiple of fileio.Alignment: each value is read straight into its
// destination, the file's padding included.
func (b *perkeyBackend) BatchLoadPadded(keys []string, dsts [][]byte) []error {
	return b.load(keys, dsts, true)
}

func (b *perkeyBackend) load(keys []string, dsts [][]byte, padded bool) []error {
	if len(keys) != len(dsts) {
		return kvErrs(len(keys), errors.New("storage: file_per_key: keys and dsts differ in length"))
	}
	if b.isClosed() {
		return kvErrs(len(keys), os.ErrClosed)
	}
	errs := make([]error, len(keys))
	for start := 0; start < len(keys); start += fileio.QueueDepth / 2 {
		end := min(start+fileio.QueueDepth/2, len(keys))
		b.loadChunk(keys[start:end], dsts[start:end], errs[start:end], padded)
	}
	return errs
}

// loadChunk reads up to QueueDepth/2 objects with one ReadBatch: per object
// one read of header+key and one of the value straight into dst. The
// heads are whole blocks of one aligned allocation, so the O_DIRECT reads
// need no bounce buffer.
func (b *perkeyBackend) loadChunk(keys []string, dsts [][]byte, errs []error, padded bool) {
	files := make([]*os.File, len(keys))
	heads := make([][]byte, len(keys))
	var headsLen int64
	for _, key := range keys {
		headsLen += perkeyValueOff(len(key))
	}
	headMem := fileio.AlignedBuffer(int(headsLen), fileio.Alignment)
	defer fileio.FreeAligned(headMem)
	reqs := make([]fileio.Request, 0, 2*len(keys))
	owner := make([]int, 0, 2*len(keys))
	defer func() {
		for _, f := range files {
			if f != nil {
				f.Close()
			}
		}
	}()
	for i, key := range keys {
		size, ok := b.Size(key)
		if !ok {
			errs[i] = fmt.Errorf("%w: %q", ErrNotFound, key)
			continue
		}
		if size != uint64(len(dsts[i])) {
			errs[i] = fmt.Errorf("%w: %q is %d bytes, dst %d", ErrSize, key, size, len(dsts[i]))
			continue
		}
		f, _, err := fileio.OpenDirect(b.pathOf(perkeyHash(key)), os.O_RDONLY, 0)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				err = fmt.Errorf("%w: %q", ErrNotFound, key)
			}
			errs[i] = err
			continue
		}
		files[i] = f
		n := perkeyValueOff(len(key))
		heads[i], headMem = headMem[:n:n], headMem[n:]
		reqs = append(reqs, fileio.Request{File: f, Buf: heads[i], Off: 0})
		owner = append(owner, i)
		if len(dsts[i]) > 0 {
			buf := dsts[i]
			if n := int(roundUpAlign(uint64(len(buf)))); padded && cap(buf) >= n {
				buf = buf[:n]
			}
			reqs = append(reqs, fileio.Request{File: f, Buf: buf, Off: perkeyValueOff(len(key))})
			owner = append(owner, i)
		}
	}
	if len(reqs) == 0 {
		return
	}
	rerrs := b.eng.ReadBatch(reqs)
	for j, err := range rerrs {
		if i := owner[j]; err != nil && errs[i] == nil {
			if errors.Is(err, io.ErrUnexpectedEOF) {
				err = fmt.Errorf("%w: %q: file is short: %v", ErrCorrupt, keys[i], err)
			}
			errs[i] = err
		}
	}
	for i, key := range keys {
		if files[i] == nil {
			continue
		}
		if errs[i] == nil {
			errs[i] = perkeyVerify(heads[i][:perkeyHdrLen+len(key)], key, dsts[i])
		}
		if errs[i] != nil {
			clear(dsts[i]) // whatever was read into it is not key's value: never hand out wrong bytes
		}
	}
}

// perkeyVerify checks a loaded header+key against key and the value in val.
// A file holding another key (a hash collision) is ErrNotFound; anything
// else that does not match is ErrCorrupt.
func perkeyVerify(head []byte, key string, val []byte) error {
	h, err := perkeyDecodeHdr(head)
	if err != nil {
		return fmt.Errorf("%w: %q: %v", ErrCorrupt, key, err)
	}
	if h.keyLen != uint32(len(key)) || string(head[perkeyHdrLen:]) != key {
		return fmt.Errorf("%w: %q (file holds another key)", ErrNotFound, key)
	}
	if h.valLen != uint64(len(val)) {
		return fmt.Errorf("%w: %q is %d bytes, dst %d", ErrSize, key, h.valLen, len(val))
	}
	crc := crc32.Update(crc32.Checksum(head[perkeyHdrLen:], kvCRCTable), kvCRCTable, val)
	if crc != h.crc {
		return fmt.Errorf("%w: %q", ErrCorrupt, key)
	}
	return nil
}

func (b *perkeyBackend) Size(key string) (uint64, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.index[key]
	return s, ok
}

func (b *perkeyBackend) Remove(keys []string) error {
	var errs []error
	for _, key := range keys {
		h := perkeyHash(key)
		st := b.stripe(h)
		st.Lock()
		if b.isClosed() {
			st.Unlock()
			return os.ErrClosed
		}
		path := b.pathOf(h)
		err := os.Remove(path)
		if err == nil {
			err = syncDir(filepath.Dir(path))
		} else if errors.Is(err, fs.ErrNotExist) {
			err = nil
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("storage: file_per_key: remove %q: %w", key, err))
		} else {
			b.mu.Lock()
			if size, ok := b.index[key]; ok {
				delete(b.index, key)
				b.bytes -= size
				b.keys--
				b.disk -= perkeyFileLen(len(key), size)
			}
			b.mu.Unlock()
		}
		st.Unlock()
	}
	return errors.Join(errs...)
}

// ScanMeta reports every object of the index rebuilt from disk when the
// backend was opened, plus those written since.
func (b *perkeyBackend) ScanMeta(fn func(key string, size uint64) error) error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return os.ErrClosed
	}
	snap := make(map[string]uint64, len(b.index))
	for k, v := range b.index {
		snap[k] = v
	}
	b.mu.Unlock()
	for k, v := range snap {
		if err := fn(k, v); err != nil {
			return err
		}
	}
	return nil
}

func (b *perkeyBackend) Usage() (uint64, int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.bytes, len(b.index)
}

func (b *perkeyBackend) Close() error {
	// Take every stripe so no write or remove is in flight.
	for i := range b.stripes {
		b.stripes[i].Lock()
	}
	defer func() {
		for i := range b.stripes {
			b.stripes[i].Unlock()
		}
	}()
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	b.mu.Unlock()
	if b.ownEng {
		return b.eng.Close()
	}
	return nil
}

func perkeyIsHex2(s string) bool {
	if len(s) != 2 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// recover walks <dir>/<xx>/<yy>/ and indexes every intact file.
func (b *perkeyBackend) recover() error {
	l1, err := os.ReadDir(b.dir)
	if err != nil {
		return fmt.Errorf("storage: file_per_key: %w", err)
	}
	for _, d1 := range l1 {
		if !d1.IsDir() || !perkeyIsHex2(d1.Name()) {
			continue
		}
		p1 := filepath.Join(b.dir, d1.Name())
		l2, err := os.ReadDir(p1)
		if err != nil {
			slog.Error("storage: file_per_key: recovery: skipping directory", "dir", p1, "err", err)
			continue
		}
		for _, d2 := range l2 {
			if !d2.IsDir() || !perkeyIsHex2(d2.Name()) {
				continue
			}
			p2 := filepath.Join(p1, d2.Name())
			files, err := os.ReadDir(p2)
			if err != nil {
				slog.Error("storage: file_per_key: recovery: skipping directory", "dir", p2, "err", err)
				continue
			}
			for _, fe := range files {
				b.recoverFile(p2, fe)
			}
		}
	}
	return nil
}

func (b *perkeyBackend) recoverFile(dir string, fe fs.DirEntry) {
	name := fe.Name()
	path := filepath.Join(dir, name)
	if strings.Contains(name, perkeyTmpMark) {
		if err := os.Remove(path); err != nil {
			slog.Warn("storage: file_per_key: recovery: cannot delete temporary file", "file", path, "err", err)
		}
		return
	}
	if !fe.Type().IsRegular() || len(name) != sha256.Size*2 {
		return
	}
	key, size, err := b.readMeta(path)
	if err == nil && perkeyHash(key) != name {
		err = errors.New("key does not hash to the file name")
	}
	if err != nil {
		slog.Error("storage: file_per_key: recovery: skipping torn or foreign file", "file", path, "err", err)
		return
	}
	if _, dup := b.index[key]; !dup {
		b.index[key] = size
		b.bytes += size
		b.keys++
		b.disk += perkeyFileLen(len(key), size)
	}
}

// readMeta reads a file's header and key and checks the file's length.
func (b *perkeyBackend) readMeta(path string) (string, uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", 0, err
	}
	if fi.Size() < perkeyHdrLen {
		return "", 0, fmt.Errorf("short header: file is %d bytes", fi.Size())
	}
	hb := make([]byte, perkeyHdrLen)
	if err := b.eng.ReadAt(f, hb, 0); err != nil {
		return "", 0, err
	}
	h, err := perkeyDecodeHdr(hb)
	if err != nil {
		return "", 0, err
	}
	want := uint64(perkeyValueOff(int(min(h.keyLen, 1<<20)))) + roundUpAlign(h.valLen)
	if h.keyLen > 1<<20 || want < h.valLen || uint64(fi.Size()) != want {
		return "", 0, fmt.Errorf("size mismatch: file is %d bytes, header says %d", fi.Size(), want)
	}
	kb := make([]byte, h.keyLen)
	if err := b.eng.ReadAt(f, kb, perkeyHdrLen); err != nil {
		return "", 0, err
	}
	return string(kb), h.valLen, nil
}
