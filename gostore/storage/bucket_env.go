package storage

import (
	"log/slog"
	"os"
	"strconv"
	"strings"
)

// Environment names read by BucketConfigFromEnv (defaults in Config).
const (
	bucketEnvPath           = "MOONCAKE_OFFLOAD_FILE_STORAGE_PATH"
	bucketEnvTotalSize      = "MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES"
	bucketEnvTotalKeys      = "MOONCAKE_OFFLOAD_TOTAL_KEYS_LIMIT"
	bucketEnvSizeLimit      = "MOONCAKE_OFFLOAD_BUCKET_SIZE_LIMIT_BYTES"
	bucketEnvKeysLimit      = "MOONCAKE_OFFLOAD_BUCKET_KEYS_LIMIT"
	bucketEnvMaxTotal       = "MOONCAKE_OFFLOAD_BUCKET_MAX_TOTAL_SIZE"
	bucketEnvMaxTotalLegacy = "MOONCAKE_BUCKET_MAX_TOTAL_SIZE"
	bucketEnvPolicy         = "MOONCAKE_OFFLOAD_BUCKET_EVICTION_POLICY"
	bucketEnvPolicyLegacy   = "MOONCAKE_BUCKET_EVICTION_POLICY"
)

// BucketConfigFromEnv builds a bucket backend Config from the
// MOONCAKE_OFFLOAD_* variables (and the legacy MOONCAKE_BUCKET_MAX_TOTAL_SIZE
// and MOONCAKE_BUCKET_EVICTION_POLICY, used when the new name is unset).
// path, when not empty, overrides MOONCAKE_OFFLOAD_FILE_STORAGE_PATH. Unset
// or unparsable numbers (logged) leave the field zero, i.e. the default.
// Engine is left nil (NewBucket then uses fileio.FromEnv).
func BucketConfigFromEnv(path string) Config {
	if path == "" {
		path = os.Getenv(bucketEnvPath)
	}
	return Config{
		Path:               path,
		TotalSizeLimit:     bucketEnvUint(bucketEnvTotalSize, ""),
		TotalKeysLimit:     bucketEnvUint(bucketEnvTotalKeys, ""),
		BucketSizeLimit:    bucketEnvUint(bucketEnvSizeLimit, ""),
		BucketKeysLimit:    bucketEnvUint(bucketEnvKeysLimit, ""),
		BucketMaxTotalSize: bucketEnvUint(bucketEnvMaxTotal, bucketEnvMaxTotalLegacy),
		EvictionPolicy:     strings.ToLower(strings.TrimSpace(bucketEnvLookup(bucketEnvPolicy, bucketEnvPolicyLegacy))),
	}
}

func bucketEnvLookup(name, legacy string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	if legacy != "" {
		return os.Getenv(legacy)
	}
	return ""
}

func bucketEnvUint(name, legacy string) uint64 {
	v := strings.TrimSpace(bucketEnvLookup(name, legacy))
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
