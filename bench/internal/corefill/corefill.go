// Package corefill fills a master core in process with many small objects,
// the way bench/scale and bench/prefix both need: keys shaped like KV cache
// pages, put in batches of PutStart and PutEnd, as a client would.
//
// Callers mount the segments first (the objects go where the core's
// allocator puts them) and pick a size small enough that the pool never
// evicts: a fill that evicted would measure eviction, not scale.
package corefill

import (
	"fmt"

	"github.com/gostore/gostore/gostore/master"
	"github.com/gostore/gostore/gostore/wire"
)

// KeyOf is object i's key: a model layer and a block number, as KV cache
// page keys look (about 27 bytes).
func KeyOf(i int) string { return fmt.Sprintf("model/layer%02d/block%08d", i%61, i) }

// Fill puts objects [0, n) of size bytes each into c, 1024 a batch, for
// client "w"; the first refused object's code is the error.
func Fill(c *master.Core, n int, size uint64) error {
	const batch = 1024
	ks := make([]string, batch)
	sizes := make([]uint64, batch)
	for i := range sizes {
		sizes[i] = size
	}
	for done := 0; done < n; done += batch {
		m := min(batch, n-done)
		for j := range m {
			ks[j] = KeyOf(done + j)
		}
		res, err := c.PutStart("w", "", ks[:m], sizes[:m], wire.ReplicaConfig{})
		if err != nil {
			return err
		}
		for j := range res {
			if res[j].Code != wire.OK {
				return fmt.Errorf("PutStart %s: %d", ks[j], res[j].Code)
			}
		}
		c.PutEnd("w", ks[:m], nil)
	}
	return nil
}
