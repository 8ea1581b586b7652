// Package storage is the client's SSD tier: backends that keep objects in
// files under one directory (bucket, file-per-key, offset-allocator), with
// checksummed records and recovery on restart. File I/O goes through
// storage/fileio (io_uring or pread/pwrite).
//
// A Backend is safe for concurrent use. Values passed in are the caller's
// and are not kept after a call returns.
//
// Configuration comes in Config and FileStorageConfig. The MOONCAKE_OFFLOAD_*
// names are parsed here (BucketConfigFromEnv, FileStorageConfigFromEnv), but
// read through a lookup the caller passes: this package reads no
// environment itself, and a nil lookup sees nothing set.
package storage
