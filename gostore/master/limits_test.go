// limits_test.go checks each of the core's request limits at its edge and
// one past it, and that a refused request changes nothing.

package master

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/gostore/gostore/gostore/wire"
)

// limitedCore is a core with small limits: keys of 8 bytes, batches of 4
// keys, objects of 1000 bytes; one 1 MiB segment.
func limitedCore(t *testing.T) *Core {
	t.Helper()
	clk := &fakeClock{now: time.Unix(1000, 0)}
	c := New(Config{MaxKeyBytes: 8, MaxBatchKeys: 4, MaxObjectBytes: 1000, EnableOffload: true,
		Now: clk.Now, Rand: rand.New(rand.NewPCG(1, 2))})
	mount(t, c, "a", "seg-a", 1<<20)
	return c
}

func keysOf(n, length int) []string {
	keys := make([]string, n)
	for i := range keys {
		k := fmt.Sprintf("%d", i)
		keys[i] = k + strings.Repeat("k", length-len(k))
	}
	return keys
}

func sizesOf(n int, size uint64) []uint64 {
	s := make([]uint64, n)
	for i := range s {
		s[i] = size
	}
	return s
}

// Each limit: exactly at it passes, one over is refused with the code and
// a message naming the flag; a refused write changes nothing, and the core
// goes on serving.
func TestCheckRequest(t *testing.T) {
	for _, tc := range []struct {
		name  string
		keys  []string
		sizes []uint64
		code  wire.Code // OK: admitted
		says  string
	}{
		{"key at the limit", keysOf(1, 8), nil, wire.OK, ""},
		{"key over the limit", keysOf(1, 9), nil, wire.ErrInvalidKey, `key "0kkkkkkkk" (item 0) of 9 bytes exceeds --max_key_bytes=8`},
		{"long key later in a batch", append(keysOf(2, 3), strings.Repeat("x", 40)), nil, wire.ErrInvalidKey,
			`key "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"... (item 2) of 40 bytes exceeds --max_key_bytes=8`},
		{"batch at the limit", keysOf(4, 2), nil, wire.OK, ""},
		{"batch over the limit", keysOf(5, 2), nil, wire.ErrInvalidParams, "5 keys in one request exceed --max_batch_keys=4"},
		{"write at the batch limit", keysOf(4, 2), sizesOf(4, 1), wire.OK, ""},
		{"write over the batch limit", keysOf(5, 2), sizesOf(5, 1), wire.ErrInvalidParams, "5 keys in one request exceed --max_batch_keys=4"},
		{"object at the limit", keysOf(2, 2), sizesOf(2, 1000), wire.OK, ""},
		{"object over the limit", keysOf(2, 2), []uint64{1, 1001}, wire.ErrInvalidParams,
			`object "1k" (item 1) of 1001 bytes exceeds --max_object_bytes=1000`},
		{"an empty request", nil, nil, wire.OK, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := limitedCore(t)
			err := c.CheckRequest(tc.keys, tc.sizes)
			if wire.CodeOf(err) != tc.code || (err != nil && !strings.Contains(err.Error(), tc.says)) {
				t.Fatalf("CheckRequest: %v, want %v naming %q", err, tc.code, tc.says)
			}
			if tc.sizes == nil {
				return
			}
			// The writes apply the same check, and a refusal is whole.
			for _, start := range []func(string, string, []string, []uint64, wire.ReplicaConfig) ([]wire.PutStartResult, error){
				c.PutStart, c.UpsertStart} {
				res, err := start("w", "", tc.keys, tc.sizes, wire.ReplicaConfig{})
				if wire.CodeOf(err) != tc.code {
					t.Fatalf("write start: %v, want %v", err, tc.code)
				}
				if err != nil && (res != nil || c.objectCount() != 0) {
					t.Fatalf("a refused write left results %v or %d objects", res, c.objectCount())
				}
				if err == nil {
					c.PutRevoke("w", tc.keys, nil)
				}
			}
			// Refused or not, the core serves.
			put(t, c, "after", 10, wire.ReplicaConfig{})
			if g := c.GetReplicas([]string{"after"}, false); g[0].Code != wire.OK {
				t.Fatalf("get after: %v", g[0].Code)
			}
		})
	}
}

func TestTaskKeyOverTheLimit(t *testing.T) {
	c := limitedCore(t)
	mount(t, c, "b", "seg-b", 1<<20)
	put(t, c, "k8bytes!", 100, wire.ReplicaConfig{Preferred: []string{"seg-a"}})
	if _, err := c.CreateTask(wire.CreateTaskReq{ClientID: "x", Kind: wire.TaskCopy, Key: "k8bytes!", Targets: []string{"seg-b"}}); err != nil {
		t.Fatalf("a key at the limit: %v", err)
	}
	_, err := c.CreateTask(wire.CreateTaskReq{ClientID: "x", Kind: wire.TaskCopy, Key: "k9bytes!!", Targets: []string{"seg-b"}})
	if wire.CodeOf(err) != wire.ErrInvalidKey || !strings.Contains(err.Error(), "--max_key_bytes=8") {
		t.Fatalf("a key over the limit: %v", err)
	}
}

// An offload heartbeat asks for at most MaxBatchKeys objects, whatever the
// client asks: the answer is a batch too.
func TestOffloadHeartbeatCappedAtTheBatchLimit(t *testing.T) {
	c := limitedCore(t)
	mountTier(t, c, "t", "seg-t", 1<<20)
	for _, k := range keysOf(6, 3) {
		put(t, c, k, 10, wire.ReplicaConfig{Preferred: []string{"seg-t"}})
	}
	keys, _, _ := c.OffloadHeartbeat("t", "dir", 100)
	if len(keys) != 4 {
		t.Fatalf("a heartbeat asking for 100 got %d keys, want the limit's 4", len(keys))
	}
}

func TestLimitDefaults(t *testing.T) {
	c := New(Config{})
	cfg := c.Config()
	if cfg.MaxKeyBytes != DefaultMaxKeyBytes || cfg.MaxBatchKeys != DefaultMaxBatchKeys || cfg.MaxObjectBytes != DefaultMaxObjectBytes {
		t.Fatalf("defaults %d %d %d", cfg.MaxKeyBytes, cfg.MaxBatchKeys, cfg.MaxObjectBytes)
	}
}
