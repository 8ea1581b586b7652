package storage

import (
	"hash/crc32"
	"os"
	"path/filepath"

	"github.com/gostore/gostore/gostore/storage/fileio"
)

// Helpers shared by the backends (the file-per-key and offset-allocator
// ones above all).

// kvCRCTable is the CRC32C (Castagnoli) table used by their records.
var kvCRCTable = crc32.MakeTable(crc32.Castagnoli)

// Defaults of the Config limits (see Config).
const (
	kvDefaultTotalSizeLimit = 2 << 40  // 2 TiB
	kvDefaultTotalKeysLimit = 10000000 // 10M
)

// kvLimits returns cfg's total size and key limits with defaults applied.
func kvLimits(cfg Config) (size, keys uint64) {
	size, keys = cfg.TotalSizeLimit, cfg.TotalKeysLimit
	if size == 0 {
		size = kvDefaultTotalSizeLimit
	}
	if keys == 0 {
		keys = kvDefaultTotalKeysLimit
	}
	return size, keys
}

// kvEngine returns cfg.Engine, or a new one as cfg.UseURing says that the
// caller owns (own is true) and must close.
func kvEngine(cfg Config) (e fileio.Engine, own bool, err error) {
	if cfg.Engine != nil {
		return cfg.Engine, false, nil
	}
	e, err = fileio.New(cfg.UseURing)
	return e, err == nil, err
}

// lastCopies maps each key of an offload batch to the index of its last
// copy. A batch may name one key twice; only the last copy is written
// (the backends write in parallel, and two writes of one key would race)
// and shareLast gives the earlier copies its result.
func lastCopies(keys []string) map[string]int {
	last := make(map[string]int, len(keys))
	for i, k := range keys {
		last[k] = i
	}
	return last
}

// shareLast sets each earlier copy's error to its key's last copy's.
func shareLast(errs []error, keys []string, last map[string]int) {
	for i, k := range keys {
		errs[i] = errs[last[k]]
	}
}

// kvErrs returns a slice of n copies of err.
func kvErrs(n int, err error) []error {
	errs := make([]error, n)
	for i := range errs {
		errs[i] = err
	}
	return errs
}

// writeFileAtomic makes path hold the concatenated parts, durably, or
// leaves it as it was: they go to tmp (a name in the same directory)
// through a seqWriter on an O_DIRECT descriptor, which is datasynced and
// renamed over path, and the directory is synced so the rename survives a
// crash. With exact the zeros padding the file to a whole block are cut
// off again; without, they stay.
func writeFileAtomic(eng fileio.Engine, path, tmp string, exact bool, parts ...[]byte) error {
	f, _, err := fileio.OpenDirect(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	w := newSeqWriter(eng, f)
	for _, p := range parts {
		w.Write(p)
	}
	size := w.Offset()
	err = w.Close()
	if err == nil && exact && !isAligned(size) {
		err = f.Truncate(int64(size))
	}
	if err == nil {
		err = eng.Datasync(f)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return syncDir(filepath.Dir(path))
}

// syncDir makes a directory's entries (creations, renames, removals) durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
