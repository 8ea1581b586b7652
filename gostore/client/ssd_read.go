// ssd_read.go defines the reader's side of the SSD tier: a get whose object
// only has a disk copy (or whose memory copies failed) asks the holder to
// stage it and pulls the bytes from the holder's staging buffer.

package client

import (
	"context"
	"sync"
	"time"

	"github.com/gostore/gostore/gostore/rpc"
	"github.com/gostore/gostore/gostore/transfer"
	"github.com/gostore/gostore/gostore/wire"
)

// diskPeer returns the RPC client for a disk holder's endpoint.
func (c *Client) diskPeer(endpoint string) *rpc.Client {
	c.diskPeers.Lock()
	defer c.diskPeers.Unlock()
	if c.diskPeers.m == nil {
		c.diskPeers.m = map[string]*rpc.Client{}
	}
	p, ok := c.diskPeers.m[endpoint]
	if !ok {
		p = rpc.NewClientWith(endpoint, c.cfg.RPC)
		c.diskPeers.m[endpoint] = p
	}
	return p
}

// stageChunk bounds the bytes one staging request asks a holder for, so a
// large batch does not need the holder's whole buffer at once.
const stageChunk = 16 << 20

// diskWant is an object to read from a holder's disk.
type diskWant struct {
	item int
	size uint64
	bufs [][]byte
}

// readFromDisk reads objects whose only copy is (or whose memory copies
// failed and which have a copy) on a client's SSD tier: from this client's
// own tier directly, from another's through its staging buffer.
func (c *Client) readFromDisk(ctx context.Context, keys []string, endpoint string, wants []diskWant, out []int64) {
	if c.ssd != nil && endpoint == c.ssd.endpoint {
		ks := make([]string, len(wants))
		sizes := make([]uint64, len(wants))
		dests := make([][][]byte, len(wants))
		for j, w := range wants {
			ks[j], sizes[j], dests[j] = keys[w.item], w.size, w.bufs
		}
		for j, code := range c.ssd.loadLocal(ks, sizes, dests) {
			out[wants[j].item] = codeOrSize(code, wants[j].size)
		}
		return
	}
	peer := c.diskPeer(endpoint)
	chunks := splitStage(wants)
	// A few chunks at once: the holder reads one from disk while another
	// is pulled. Objects that found its staging buffer full go again, one
	// chunk at a time, once the others have released their room.
	var wg sync.WaitGroup
	next := make(chan []diskWant)
	for range min(len(chunks), stageParallel) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ch := range next {
				c.stageAndPull(ctx, peer, keys, ch, out)
			}
		}()
	}
	for _, ch := range chunks {
		next <- ch
	}
	close(next)
	wg.Wait()
	for try := 0; try < 3; try++ {
		var again []diskWant
		for _, ch := range chunks {
			for _, w := range ch {
				if out[w.item] == int64(wire.ErrFileInvalidBuffer) {
					again = append(again, w)
				}
			}
		}
		if len(again) == 0 {
			return
		}
		time.Sleep(time.Duration(try) * 10 * time.Millisecond)
		for _, ch := range splitStage(again) {
			c.stageAndPull(ctx, peer, keys, ch, out)
		}
	}
}

// splitStage cuts wants into staging requests of at most maxStageKeys
// objects and stageChunk bytes (a larger object goes alone).
func splitStage(wants []diskWant) [][]diskWant {
	var chunks [][]diskWant
	for len(wants) > 0 {
		n, bytes := 0, uint64(0)
		for n < len(wants) && n < maxStageKeys && (n == 0 || bytes+wants[n].size <= stageChunk) {
			bytes += wants[n].size
			n++
		}
		chunks = append(chunks, wants[:n])
		wants = wants[n:]
	}
	return chunks
}

// stageParallel is how many staging chunks a reader has in flight with
// one holder.
const stageParallel = 4

// stageAndPull asks the holder to stage a chunk, pulls the bytes with the
// transfer engine and releases the lease.
func (c *Client) stageAndPull(ctx context.Context, peer *rpc.Client, keys []string, wants []diskWant, out []int64) {
	req := wire.StageReq{Keys: make([]string, len(wants)), Sizes: make([]uint64, len(wants))}
	for j, w := range wants {
		req.Keys[j], req.Sizes[j] = keys[w.item], w.size
	}
	sent := time.Now()
	var resp wire.StageResp
	err := peer.Call(ctx, wire.OpStageOffloaded, &req, &resp)
	if err == nil && (len(resp.Codes) != len(wants) || len(resp.Offsets) != len(wants)) {
		err = wire.Errorf(wire.ErrRPCFail, "stage answered %d of %d keys", len(resp.Codes), len(wants))
	}
	if err != nil {
		c.log.Warn("get: SSD holder unreachable", "endpoint", peer.Addr(), "err", err)
		for _, w := range wants {
			out[w.item] = int64(wire.CodeOf(err))
		}
		return
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := peer.Call(rctx, wire.OpReleaseStaged, &wire.ReleaseStagedReq{BatchID: resp.BatchID}, &wire.CodesResp{}); err != nil {
			c.log.Debug("releasing a staging lease failed; the holder reclaims it after its TTL", "err", err)
		}
	}()
	buf := transfer.PeerFromDesc(resp.Buffer)
	var ops []transfer.Op
	var opWant []diskWant
	for j, w := range wants {
		if resp.Codes[j] != wire.OK {
			out[w.item] = int64(resp.Codes[j])
			continue
		}
		ops = append(ops, transfer.Op{Peer: buf, Offset: resp.Offsets[j], Bufs: w.bufs})
		opWant = append(opWant, w)
	}
	if len(ops) == 0 {
		return
	}
	errs := c.engine.Do(ctx, ops)
	late := time.Since(sent) >= time.Duration(resp.GCTTLMS)*time.Millisecond
	for j, err := range errs {
		w := opWant[j]
		switch {
		case err != nil:
			out[w.item] = int64(wire.CodeOf(err))
			c.log.Warn("get: pulling from an SSD holder's staging buffer failed", "key", keys[w.item], "err", err)
		case late:
			out[w.item] = int64(wire.ErrLeaseExpired)
			c.log.Warn("get: SSD read outlived the staging lease; result discarded", "key", keys[w.item], "ttl_ms", resp.GCTTLMS)
		default:
			out[w.item] = int64(w.size)
		}
	}
}

func codeOrSize(code wire.Code, size uint64) int64 {
	if code != wire.OK {
		return int64(code)
	}
	return int64(size)
}
