// backend.go defines the Backend interface every SSD backend implements,
// its configuration and the MOONCAKE_OFFLOAD_* environment names.

package storage

import (
	"github.com/gostore/gostore/gostore/storage/fileio"
	"github.com/gostore/gostore/gostore/wire"
)

// Errors a backend returns, wrapped with details. Each carries its
// contract code, which wire.CodeOf reads through the wrapping.
var (
	ErrNotFound = codedError("storage: object not found", wire.ErrObjectNotFound)
	ErrCorrupt  = codedError("storage: record failed its checksum", wire.ErrChecksumMismatch)
	ErrFull     = codedError("storage: size or key limit reached", wire.ErrUnableOffload)
	ErrSize     = codedError("storage: destination size differs from the stored object", wire.ErrInvalidParams)
)

// storageError is a sentinel error with its contract code (wire.Coded).
type storageError struct {
	msg  string
	code wire.Code
}

func codedError(msg string, code wire.Code) error { return &storageError{msg, code} }

func (e *storageError) Error() string       { return e.msg }
func (e *storageError) WireCode() wire.Code { return e.code }

// Backend stores objects on local disk.
type Backend interface {
	// Name is the descriptor: "bucket_storage_backend",
	// "file_per_key_storage_backend" or "offset_allocator_storage_backend".
	Name() string
	// BatchOffload persists values[i] under keys[i] (replacing an older
	// copy) and returns one error per object. Data is durable (datasync)
	// when it returns nil for an object.
	BatchOffload(keys []string, values [][]byte) []error
	// BatchLoad reads each object into dsts[i], whose length must equal the
	// stored size (ErrSize otherwise); ErrNotFound for a missing key,
	// ErrCorrupt when the bytes fail their checksum (never wrong bytes).
	BatchLoad(keys []string, dsts [][]byte) []error
	// Size reports a stored object's size.
	Size(key string) (uint64, bool)
	// Remove deletes objects; missing keys are not an error.
	Remove(keys []string) error
	// ScanMeta calls fn for every intact object found on disk, for recovery
	// after a restart; torn or corrupt records and files are skipped and
	// logged, never returned.
	ScanMeta(fn func(key string, size uint64) error) error
	// Usage is the bytes and keys stored.
	Usage() (bytes uint64, keys int)
	Close() error
}

// PaddedLoader is implemented by backends that can read a value straight
// into block-aligned memory when the destination's capacity reaches the
// next multiple of fileio.Alignment past its length; they may overwrite
// those spare bytes.
type PaddedLoader interface {
	BatchLoadPadded(keys []string, dsts [][]byte) []error
}

// Config is shared by the backends; zero values take the defaults below.
type Config struct {
	Path   string        // the directory (MOONCAKE_OFFLOAD_FILE_STORAGE_PATH)
	Engine fileio.Engine // nil: the backend opens its own, fileio.New(UseURing)
	// UseURing picks io_uring (probed; pread where the kernel refuses it)
	// over pread for the engine a backend opens itself and for
	// FileStorage's. The zero value is pread; the readers of the
	// environment (BucketConfigFromEnv, FileStorageConfigFromEnv) default
	// it to true. MOONCAKE_OFFLOAD_USE_URING (legacy MOONCAKE_USE_URING).
	UseURing bool

	// TotalSizeLimit bounds the bytes a backend's files take on disk
	// (records or files with their headers and block padding; file_per_key
	// also bounds its value bytes by it). Whatever it says, a backend keeps
	// within its disk cap, computed at open (diskcap.go): at most 90% of
	// the file system, and what the backend holds plus 95% of the free
	// space. The bucket backend's BucketMaxTotalSize, when set, replaces
	// that rule. Every write also keeps the file system 10% free (the
	// floor of diskcap.go), whatever the cap.
	TotalSizeLimit uint64 // [2 TiB] MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES
	TotalKeysLimit uint64 // [10M] MOONCAKE_OFFLOAD_TOTAL_KEYS_LIMIT

	// Bucket backend.
	BucketSizeLimit uint64 // [256 MiB] MOONCAKE_OFFLOAD_BUCKET_SIZE_LIMIT_BYTES
	BucketKeysLimit uint64 // [500] MOONCAKE_OFFLOAD_BUCKET_KEYS_LIMIT
	// BucketMaxTotalSize, when set, caps the bucket files instead of the
	// disk cap (TotalSizeLimit still applies when smaller).
	BucketMaxTotalSize uint64 // [0 = the disk cap] MOONCAKE_OFFLOAD_BUCKET_MAX_TOTAL_SIZE
	EvictionPolicy     string // [fifo; none, lru] MOONCAKE_OFFLOAD_BUCKET_EVICTION_POLICY

	// OnEvict is told, in one call per eviction, which keys the backend is
	// about to drop (the client forwards them to the master as
	// EvictDiskReplicas) before their files are deleted.
	OnEvict func(keys []string)
}
