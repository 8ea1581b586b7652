package storage

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gostore/gostore/gostore/storage/fileio"
	"github.com/gostore/gostore/gostore/wire"
)

// FileStorage is a client's SSD tier on one directory: the backend that
// holds the objects, the staging ClientBuffer the load path reads into, the
// GC of forgotten staging leases, and the directory's identity and lock.
// The protocol around it (heartbeats, the offload pipeline, the load RPCs)
// belongs to the client.
type FileStorage struct {
	cfg     FileStorageConfig
	log     *slog.Logger
	id      string
	lock    *os.File
	eng     fileio.Engine
	backend Backend
	buf     *ClientBuffer

	stop chan struct{}
	wg   sync.WaitGroup
	once sync.Once
}

// Backend descriptors (MOONCAKE_OFFLOAD_STORAGE_BACKEND_DESCRIPTOR).
const (
	DescriptorBucket  = bucketName
	DescriptorPerKey  = "file_per_key_storage_backend"
	DescriptorOffset  = "offset_allocator_storage_backend"
	defaultDescriptor = DescriptorBucket
)

// Files FileStorage keeps in the directory besides the backend's.
const (
	idFile   = ".gostore-storage-id"
	lockFile = ".gostore.lock"
)

// FileStorageConfig configures a FileStorage; zero fields take the defaults
// in brackets (the MOONCAKE_OFFLOAD_* names set them, see FileStorageConfigFromEnv).
// Config.UseURing picks the engine of the directory.
type FileStorageConfig struct {
	Config                   // the backend's; Path is the directory
	Descriptor        string // [bucket_storage_backend] which backend
	BufferSize        uint64 // [1.25 GiB] the staging buffer
	GCTTL             time.Duration
	HeartbeatInterval time.Duration // [10 s] the client's offload heartbeat
}

// Defaults of FileStorageConfig.
const (
	DefaultBufferSize        = 1342177280 // 1.25 GiB
	DefaultGCTTL             = 5 * time.Second
	DefaultHeartbeatInterval = 10 * time.Second
)

// Environment names of the SSD tier: those BucketConfigFromEnv reads for
// every backend's Config, then the FileStorage's own.
const (
	EnvUseURing       = "MOONCAKE_OFFLOAD_USE_URING"
	EnvUseURingLegacy = "MOONCAKE_USE_URING"

	EnvDescriptor = "MOONCAKE_OFFLOAD_STORAGE_BACKEND_DESCRIPTOR"
	EnvBufferSize = "MOONCAKE_OFFLOAD_LOCAL_BUFFER_SIZE_BYTES"
	EnvGCTTL      = "MOONCAKE_OFFLOAD_CLIENT_BUFFER_GC_TTL_MS"
	EnvHeartbeat  = "MOONCAKE_OFFLOAD_HEARTBEAT_INTERVAL_SECONDS"
)

// FileStorageConfigFromEnv reads every MOONCAKE_OFFLOAD_* setting through
// lookup, the caller's view of the environment (nil: nothing is set; this
// package reads no environment itself, and a library loaded into Python
// passes one that sees variables set after it loaded). path, when not
// empty, overrides MOONCAKE_OFFLOAD_FILE_STORAGE_PATH. Unparsable values
// are logged and leave the default.
func FileStorageConfigFromEnv(path string, lookup func(string) (string, bool)) FileStorageConfig {
	env := newEnvReader(lookup)
	cfg := FileStorageConfig{Config: bucketConfig(path, env)}
	cfg.Descriptor = strings.ToLower(strings.TrimSpace(env.get(EnvDescriptor, "")))
	cfg.BufferSize = env.uint(EnvBufferSize, "")
	if ms := env.uint(EnvGCTTL, ""); ms > 0 {
		cfg.GCTTL = time.Duration(ms) * time.Millisecond
	}
	if v := strings.TrimSpace(env.get(EnvHeartbeat, "")); v != "" {
		if s, err := strconv.ParseFloat(v, 64); err == nil && s > 0 && s < 1e6 {
			cfg.HeartbeatInterval = time.Duration(s * float64(time.Second))
		} else {
			slog.Warn("storage: ignoring invalid environment value", "name", EnvHeartbeat, "value", v)
		}
	}
	return cfg
}

// StagingBytes is the staging buffer a tier set up with lookup's settings
// takes (MOONCAKE_OFFLOAD_LOCAL_BUFFER_SIZE_BYTES, else the default), for
// a caller weighing memory before the tier opens. It logs nothing: an
// invalid value counts as unset, as FileStorageConfigFromEnv (which warns)
// takes it.
func StagingBytes(lookup func(string) (string, bool)) uint64 {
	if lookup != nil {
		if v, ok := lookup(EnvBufferSize); ok {
			if n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64); err == nil && n > 0 {
				return n
			}
		}
	}
	return DefaultBufferSize
}

func (c *FileStorageConfig) fill() {
	if c.Descriptor == "" {
		c.Descriptor = defaultDescriptor
	}
	if c.BufferSize == 0 {
		c.BufferSize = DefaultBufferSize
	}
	if c.GCTTL <= 0 {
		c.GCTTL = DefaultGCTTL
	}
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = DefaultHeartbeatInterval
	}
}

// Filled returns c with the defaults applied.
func (c FileStorageConfig) Filled() FileStorageConfig {
	c.fill()
	return c
}

// OpenFileStorage checks and locks cfg.Path, opens the backend there
// (recovering what an earlier process left) and stages loads in staging
// (page-aligned memory the caller keeps mapped until Close returns;
// typically shared memory peers can map). Errors carry the contract's
// codes: -1100 for a missing directory, -600 for a path that is not a
// directory, an unknown backend or a directory another process holds,
// -1103 for one this process cannot write.
func OpenFileStorage(cfg FileStorageConfig, staging []byte, log *slog.Logger) (_ *FileStorage, err error) {
	cfg.fill()
	if log == nil {
		log = slog.Default()
	}
	fs := &FileStorage{cfg: cfg, log: log.With("component", "ssd", "path", cfg.Path), stop: make(chan struct{})}
	defer func() {
		if err != nil {
			fs.closeParts()
		}
	}()
	if err := checkDir(cfg.Path); err != nil {
		return nil, err
	}
	if fs.lock, err = lockDir(cfg.Path); err != nil {
		return nil, err
	}
	if fs.eng, err = fileio.New(cfg.UseURing); err != nil {
		return nil, wire.Errorf(wire.ErrInternal, "SSD tier: file I/O engine: %v", err)
	}
	if fs.id, err = storageID(fs.eng, cfg.Path); err != nil {
		return nil, wire.Errorf(wire.ErrFileWriteFail, "SSD tier %s: storage id: %v", cfg.Path, err)
	}
	if len(staging) > 0 {
		if err := fs.eng.RegisterFixed(staging); err != nil {
			fs.log.Warn("staging buffer not registered with io_uring; loads use plain reads", "err", err)
		}
	}
	bcfg := cfg.Config
	bcfg.Engine = fs.eng
	switch cfg.Descriptor {
	case DescriptorBucket:
		fs.backend, err = NewBucket(bcfg)
	case DescriptorPerKey:
		fs.backend, err = NewFilePerKey(bcfg)
	case DescriptorOffset:
		fs.backend, err = NewOffsetAllocator(bcfg)
	default:
		return nil, wire.Errorf(wire.ErrInvalidParams, "unknown SSD backend %q (want %s, %s or %s)",
			cfg.Descriptor, DescriptorBucket, DescriptorPerKey, DescriptorOffset)
	}
	if err != nil {
		return nil, wire.Errorf(wire.ErrFileOpenFail, "SSD tier %s: %v", cfg.Path, err)
	}
	fs.buf = NewClientBuffer(staging, cfg.GCTTL, nil)
	fs.wg.Add(1)
	go fs.collect()
	bytes, keys := fs.backend.Usage()
	fs.log.Info("SSD tier open", "backend", fs.backend.Name(), "io", fs.eng.Name(), "objects", keys, "bytes", bytes, "id", fs.id)
	return fs, nil
}

// checkDir makes sure path is an existing directory this process can
// create files in.
func checkDir(path string) error {
	if path == "" {
		return wire.Errorf(wire.ErrInvalidParams, "SSD tier: no path (ssd_offload_path or MOONCAKE_OFFLOAD_FILE_STORAGE_PATH)")
	}
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return wire.Errorf(wire.ErrFileNotFound, "SSD tier: path %s does not exist", path)
	case err != nil:
		return wire.Errorf(wire.ErrFileOpenFail, "SSD tier: path %s: %v", path, err)
	case !st.IsDir():
		return wire.Errorf(wire.ErrInvalidParams, "SSD tier: path %s is not a directory", path)
	}
	probe, err := os.CreateTemp(path, ".gostore-probe-*")
	if err != nil {
		return wire.Errorf(wire.ErrFileWriteFail, "SSD tier: path %s is not writable: %v", path, err)
	}
	probe.Close()
	os.Remove(probe.Name())
	return nil
}

// lockDir takes an exclusive lock on the directory, so two processes never
// run one tier (each would delete what it thinks are the other's stale
// files). The kernel drops it when the process dies.
func lockDir(path string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(path, lockFile), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, wire.Errorf(wire.ErrFileWriteFail, "SSD tier: lock file in %s: %v", path, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, wire.Errorf(wire.ErrInvalidParams, "SSD tier: %s is in use by another process (%v)", path, err)
	}
	return f, nil
}

// storageID returns the directory's identity, creating it on first use.
// The master ties disk copies to it, so a restarted client claims back what
// the directory holds.
func storageID(eng fileio.Engine, path string) (string, error) {
	p := filepath.Join(path, idFile)
	if b, err := os.ReadFile(p); err == nil {
		if id := strings.TrimSpace(string(b)); len(id) == 32 {
			return id, nil
		}
		slog.Warn("storage: replacing a malformed storage id", "path", p)
	}
	var raw [16]byte
	rand.Read(raw[:])
	id := hex.EncodeToString(raw[:])
	return id, writeFileAtomic(eng, p, p+".tmp", true, []byte(id+"\n"))
}

// ID is the directory's identity (stable across restarts).
func (fs *FileStorage) ID() string { return fs.id }

// Backend holds the objects.
func (fs *FileStorage) Backend() Backend { return fs.backend }

// Buffer is the staging buffer of the load path.
func (fs *FileStorage) Buffer() *ClientBuffer { return fs.buf }

// Engine is the file I/O engine the backend uses.
func (fs *FileStorage) Engine() fileio.Engine { return fs.eng }

// Config is the configuration in force (defaults applied).
func (fs *FileStorage) Config() FileStorageConfig { return fs.cfg }

// Stage reads objects into the staging buffer under one lease: errs[i] is
// nil with object i at offs[i], or says why it could not be staged
// (ErrNotFound, ErrSize when the stored size is not sizes[i], ErrCorrupt,
// ErrBufferFull). Space of failed objects is freed at once.
func (fs *FileStorage) Stage(keys []string, sizes []uint64) (id uint64, offs []uint64, errs []error) {
	want := make([]uint64, len(keys))
	for i, k := range keys {
		if n, ok := fs.backend.Size(k); !ok {
			errs = append(errs, ErrNotFound)
		} else if n != sizes[i] || n == 0 {
			errs = append(errs, fmt.Errorf("%w: stored %d bytes, asked for %d", ErrSize, n, sizes[i]))
		} else {
			want[i] = n
			errs = append(errs, nil)
		}
	}
	id, offs, leaseErrs := fs.buf.Lease(want)
	var lkeys []string
	var dsts [][]byte
	var idx []int
	for i := range keys {
		if errs[i] == nil {
			errs[i] = leaseErrs[i]
		}
		if errs[i] == nil {
			lkeys = append(lkeys, keys[i])
			dsts = append(dsts, fs.buf.Slice(offs[i], want[i]))
			idx = append(idx, i)
		}
	}
	if len(lkeys) > 0 {
		load := fs.backend.BatchLoad
		if pl, ok := fs.backend.(PaddedLoader); ok {
			load = pl.BatchLoadPadded // staging slots are padded
		}
		for j, err := range load(lkeys, dsts) {
			if err != nil {
				i := idx[j]
				errs[i] = err
				fs.buf.Drop(id, offs[i])
			}
		}
	}
	return id, offs, errs
}

// collect reclaims staging leases their readers forgot, a few times per TTL.
func (fs *FileStorage) collect() {
	defer fs.wg.Done()
	t := time.NewTicker(max(fs.cfg.GCTTL/4, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-fs.stop:
			return
		case <-t.C:
			if n := fs.buf.GC(); n > 0 {
				fs.log.Debug("reclaimed staging leases past their TTL", "batches", n)
			}
		}
	}
}

// Close stops the GC, closes the backend and the engine and unlocks the
// directory. Idempotent.
func (fs *FileStorage) Close() error {
	var err error
	fs.once.Do(func() { err = fs.closeParts() })
	return err
}

func (fs *FileStorage) closeParts() error {
	select {
	case <-fs.stop:
	default:
		close(fs.stop)
	}
	fs.wg.Wait()
	var err error
	if fs.backend != nil {
		err = fs.backend.Close()
	}
	if fs.eng != nil {
		fs.eng.Close()
	}
	if fs.lock != nil {
		fs.lock.Close()
	}
	return err
}

// envReader reads settings through a lookup function, with legacy aliases
// and logged parse errors.
type envReader struct {
	lookup func(string) (string, bool)
}

// newEnvReader reads through lookup; nil sees nothing set.
func newEnvReader(lookup func(string) (string, bool)) envReader {
	if lookup == nil {
		lookup = func(string) (string, bool) { return "", false }
	}
	return envReader{lookup}
}

// get is name's value, or legacy's when name is unset.
func (e envReader) get(name, legacy string) string {
	if v, ok := e.lookup(name); ok {
		return v
	}
	if legacy != "" {
		v, _ := e.lookup(legacy)
		return v
	}
	return ""
}

func (e envReader) uint(name, legacy string) uint64 {
	v := strings.TrimSpace(e.get(name, legacy))
	if v == "" {
		return 0
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		slog.Warn("storage: ignoring invalid environment value", "name", name, "value", v, "err", err)
		return 0
	}
	return n
}
