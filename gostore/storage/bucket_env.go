// bucket_env.go defines BucketConfigFromEnv: the backends' Config from the
// MOONCAKE_OFFLOAD_* settings the caller looked up.

package storage

import (
	"strings"

	"github.com/gostore/gostore/gostore/storage/fileio"
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

// BucketConfigFromEnv builds a backend Config from the MOONCAKE_OFFLOAD_*
// variables (and the legacy MOONCAKE_BUCKET_MAX_TOTAL_SIZE,
// MOONCAKE_BUCKET_EVICTION_POLICY and MOONCAKE_USE_URING, used when the new
// name is unset), read through lookup: the caller's view of the
// environment (nil: nothing is set; this package reads no environment
// itself). path, when not empty, overrides
// MOONCAKE_OFFLOAD_FILE_STORAGE_PATH. Unset or unparsable numbers (logged)
// leave the field zero, i.e. the default. Engine is left nil (the backend
// then opens one as UseURing says).
func BucketConfigFromEnv(path string, lookup func(string) (string, bool)) Config {
	return bucketConfig(path, newEnvReader(lookup))
}

func bucketConfig(path string, env envReader) Config {
	if path == "" {
		path = env.get(bucketEnvPath, "")
	}
	return Config{
		Path:               path,
		UseURing:           fileio.UseURing(env.get(EnvUseURing, EnvUseURingLegacy)),
		TotalSizeLimit:     env.uint(bucketEnvTotalSize, ""),
		TotalKeysLimit:     env.uint(bucketEnvTotalKeys, ""),
		BucketSizeLimit:    env.uint(bucketEnvSizeLimit, ""),
		BucketKeysLimit:    env.uint(bucketEnvKeysLimit, ""),
		BucketMaxTotalSize: env.uint(bucketEnvMaxTotal, bucketEnvMaxTotalLegacy),
		EvictionPolicy:     strings.ToLower(strings.TrimSpace(env.get(bucketEnvPolicy, bucketEnvPolicyLegacy))),
	}
}
