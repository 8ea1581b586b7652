// tier.go connects the client to its SSD tier (gostore/ssdtier): the
// reads of disk copies from the get path, and the tier's API.

package client

import (
	"context"

	"github.com/gostore/gostore/gostore/pipeline"
	"github.com/gostore/gostore/gostore/ssdtier"
	"github.com/gostore/gostore/gostore/wire"
)

// diskWant is an object to read from a holder's disk (see readInto).
type diskWant struct {
	item int
	size uint64
	bufs [][]byte
}

// readFromDisk reads objects whose only copy is (or whose memory copies
// failed and which have a copy) on the SSD tier at endpoint: this
// client's own tier directly, another's through its staging buffer.
func (c *Client) readFromDisk(ctx context.Context, keys []string, endpoint string, wants []diskWant, out []int64) {
	ws := make([]ssdtier.Want, len(wants))
	for i, w := range wants {
		ws[i] = ssdtier.Want{Item: w.item, Size: w.size, Bufs: w.bufs}
	}
	c.disk.Read(ctx, keys, endpoint, ws, out)
}

// SSDStats is a snapshot of the SSD tier's counters.
type SSDStats = ssdtier.Stats

// SSDStats reports the SSD tier's counters; ok is false without a tier.
func (c *Client) SSDStats() (s SSDStats, ok bool) {
	if c.ssd == nil {
		return SSDStats{}, false
	}
	return c.ssd.Stats(), true
}

// SSD is the client's SSD tier, nil without one (setup
// enable_ssd_offload).
func (c *Client) SSD() *ssdtier.Tier { return c.ssd }

// Offload asks the SSD tier to persist keys now (see ssdtier.Tier.Offload).
func (c *Client) Offload(keys []string, sizes []uint64) ([]pipeline.Handle, error) {
	if c.ssd == nil {
		return nil, wire.Errorf(wire.ErrInvalidParams, "this client has no SSD tier (setup enable_ssd_offload)")
	}
	return c.ssd.Offload(keys, sizes)
}
