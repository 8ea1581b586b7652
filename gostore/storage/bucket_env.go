package storage

import (
	"os"
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

// BucketConfigFromEnv builds a backend Config from the MOONCAKE_OFFLOAD_*
// variables (and the legacy MOONCAKE_BUCKET_MAX_TOTAL_SIZE and
// MOONCAKE_BUCKET_EVICTION_POLICY, used when the new name is unset).
// path, when not empty, overrides MOONCAKE_OFFLOAD_FILE_STORAGE_PATH. Unset
// or unparsable numbers (logged) leave the field zero, i.e. the default.
// Engine is left nil (the backend then uses fileio.FromEnv).
func BucketConfigFromEnv(path string) Config {
	return bucketConfig(path, envReader{os.LookupEnv})
}

func bucketConfig(path string, env envReader) Config {
	if path == "" {
		path = env.get(bucketEnvPath, "")
	}
	return Config{
		Path:               path,
		TotalSizeLimit:     env.uint(bucketEnvTotalSize, ""),
		TotalKeysLimit:     env.uint(bucketEnvTotalKeys, ""),
		BucketSizeLimit:    env.uint(bucketEnvSizeLimit, ""),
		BucketKeysLimit:    env.uint(bucketEnvKeysLimit, ""),
		BucketMaxTotalSize: env.uint(bucketEnvMaxTotal, bucketEnvMaxTotalLegacy),
		EvictionPolicy:     strings.ToLower(strings.TrimSpace(env.get(bucketEnvPolicy, bucketEnvPolicyLegacy))),
	}
}
