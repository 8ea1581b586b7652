// tier.go connects the client to its SSD tier (gostore/ssdtier): the
// reads of disk copies from the get path, and the tier's API.

package client

import (
	"github.com/gostore/gostore/gostore/pipeline"
	"github.com/gostore/gostore/gostore/ssdtier"
	"github.com/gostore/gostore/gostore/wire"
)

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
