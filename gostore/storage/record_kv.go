package storage

import (
	"hash/crc32"

	"github.com/gostore/gostore/gostore/storage/fileio"
)

// Helpers shared by the file-per-key and offset-allocator backends.

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

// kvEngine returns cfg.Engine, or one from the environment that the caller
// owns (own is true) and must close.
func kvEngine(cfg Config) (e fileio.Engine, own bool, err error) {
	if cfg.Engine != nil {
		return cfg.Engine, false, nil
	}
	e, err = fileio.FromEnv()
	return e, err == nil, err
}

// kvErrs returns a slice of n copies of err.
func kvErrs(n int, err error) []error {
	errs := make([]error, n)
	for i := range errs {
		errs[i] = err
	}
	return errs
}
