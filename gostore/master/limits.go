// limits.go defines the core's limits on one request: the longest key, the
// most keys in one batch and the largest object.

package master

import (
	"strconv"

	"github.com/gostore/gostore/gostore/wire"
)

// DefaultMaxKeyBytes is Config.MaxKeyBytes' default: keys of KV caches are
// hashes with a prefix (tens to a few hundred bytes), and a key is held in
// the master's memory and journal with every object; 4 KiB is PATH_MAX, far
// above any of them.
const DefaultMaxKeyBytes = 16 << 10

// MaxKeyBytesLimit is the most MaxKeyBytes may be: the SSD tier's backends
// store keys of at most 1 MiB.
const MaxKeyBytesLimit = 1 << 20

// DefaultMaxBatchKeys is Config.MaxBatchKeys' default: 2^18 keys, a
// 128k-token context at one token per page with separate K and V keys.
// Every answer to a batch then fits the 64 MiB a client reads (wire.MaxBody)
// with 256 bytes a key: a get's result with ten replicas.
const DefaultMaxBatchKeys = 1 << 18

// MinMaxBatchKeys is the least MaxBatchKeys may be: a client's own
// background batches (read ends, the SSD tier's recovery) send up to 4096
// keys.
const MinMaxBatchKeys = 4096

// DefaultMaxObjectBytes is Config.MaxObjectBytes' default: 64 GiB, above
// the largest file the Hugging Face Hub takes (50 GB) and any KV cache
// chunk by far. Below it, a size computed wrong (a negative number turned
// unsigned) is refused as such rather than as "no space".
const DefaultMaxObjectBytes = 64 << 30

// CheckRequest refuses a request that names more keys than MaxBatchKeys, a
// key longer than MaxKeyBytes (INVALID_KEY) or, with sizes (the objects
// a write would store; nil for other requests), an object larger than
// MaxObjectBytes. Its message names the limit by the master's flag and the
// first item over it. The writes (PutStart, UpsertStart) and CreateTask
// check themselves; the server calls it for every other request that
// names keys (wire.Keyed) before the core sees it.
func (c *Core) CheckRequest(keys []string, sizes []uint64) error {
	if n := max(len(keys), len(sizes)); n > c.cfg.MaxBatchKeys {
		return wire.Errorf(wire.ErrInvalidParams, "%d keys in one request exceed --max_batch_keys=%d",
			n, c.cfg.MaxBatchKeys)
	}
	for i, key := range keys {
		if err := c.checkKey(i, key); err != nil {
			return err
		}
	}
	for i, size := range sizes {
		if size > c.cfg.MaxObjectBytes {
			return wire.Errorf(wire.ErrInvalidParams, "object %s (item %d) of %d bytes exceeds --max_object_bytes=%d",
				quoteKey(c.userKey(keyOf(keys, i))), i, size, c.cfg.MaxObjectBytes)
		}
	}
	return nil
}

// checkKey refuses key, item i of a request, when it is over MaxKeyBytes.
// Under MultiTenants the user's key is measured (and named), not the
// stored one: the server checks requests before it scopes their keys, and
// a tenant's keys must not be shorter than the default tenant's.
func (c *Core) checkKey(i int, key string) error {
	if len(key) <= c.cfg.MaxKeyBytes {
		return nil
	}
	key = c.userKey(key)
	if len(key) <= c.cfg.MaxKeyBytes {
		return nil
	}
	return wire.Errorf(wire.ErrInvalidKey, "key %s (item %d) of %d bytes exceeds --max_key_bytes=%d",
		quoteKey(key), i, len(key), c.cfg.MaxKeyBytes)
}

// quoteKey quotes key for a message, cut to its first 32 bytes: the key
// may be the very thing that is too long.
func quoteKey(key string) string {
	if len(key) > 32 {
		return strconv.Quote(key[:32]) + "..."
	}
	return strconv.Quote(key)
}

func keyOf(keys []string, i int) string {
	if i < len(keys) {
		return keys[i]
	}
	return ""
}

// userKey is key as its writer named it: unscoped under MultiTenants, for
// limits and messages.
func (c *Core) userKey(key string) string {
	if c.ledger == nil {
		return key
	}
	_, k := wire.SplitScoped(key)
	return k
}
