// export_test.go lets the external tests (package ssdtier_test, which run
// the tier inside real clients) look at the tier's insides.

package ssdtier

import (
	"github.com/gostore/gostore/gostore/storage"
	"github.com/gostore/gostore/gostore/wire"
)

// MaxStageKeys is the most keys a peer may stage in one request.
const MaxStageKeys = maxStageKeys

// Storage is the tier's directory.
func (t *Tier) Storage() *storage.FileStorage { return t.fs }

// Pinned is how many objects are pinned for a transfer now.
func (t *Tier) Pinned() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.pins)
}

// Peek locates keys through the tier's host, without using the objects.
func (t *Tier) Peek(keys []string) ([]wire.GetResult, error) { return t.host.Peek(keys) }

// Promote runs promotion tasks as the offload heartbeat does.
func (t *Tier) Promote(tasks []wire.PromotionTask) { t.promote(tasks) }
