// read.go defines Reader, the reader's side of the SSD tier: a get whose
// object only has a disk copy (or whose memory copies failed) asks the
// holder to stage it and pulls the bytes from the holder's staging buffer.

package ssdtier

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/gostore/gostore/gostore/rpc"
	"github.com/gostore/gostore/gostore/transfer"
	"github.com/gostore/gostore/gostore/wire"
)

// Reader reads objects from the disk copies of any client's tier. Every
// client has one, with or without a tier of its own. Its methods are safe
// for concurrent use.
type Reader struct {
	host Host
	log  *slog.Logger
	own  *Tier // this client's tier, read without staging; nil: none
	rpc  rpc.ClientOptions

	mu      sync.Mutex
	holders map[string]*rpc.Client // RPC clients of other tiers, by endpoint
}

// NewReader makes the reader of a client: host pulls the staged bytes,
// log is the client's, own is the client's tier (nil without one), and
// opt tunes the connections to other tiers as the client's to its master.
func NewReader(host Host, log *slog.Logger, own *Tier, opt rpc.ClientOptions) *Reader {
	return &Reader{host: host, log: log, own: own, rpc: opt}
}

// holder returns the RPC client for a disk holder's endpoint.
func (r *Reader) holder(endpoint string) *rpc.Client {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.holders == nil {
		r.holders = map[string]*rpc.Client{}
	}
	p, ok := r.holders[endpoint]
	if !ok {
		p = rpc.NewClientWith(endpoint, r.rpc)
		r.holders[endpoint] = p
	}
	return p
}

// Close closes the connections to other tiers.
func (r *Reader) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.holders {
		p.Close()
	}
	r.holders = nil
}

// stageChunk bounds the bytes one staging request asks a holder for, so a
// large batch does not need the holder's whole buffer at once.
const stageChunk = 16 << 20

// Want is an object to read from a holder's disk: keys[Item] of a Read,
// Size bytes, into Bufs (host memory the caller owns, exactly Size bytes).
type Want struct {
	Item int
	Size uint64
	Bufs [][]byte
}

// Read reads objects whose only copy is (or whose memory copies failed and
// which have a copy) on the SSD tier at endpoint: from this client's own
// tier directly, from another's through its staging buffer. out[w.Item]
// becomes the bytes read or a negative code for each w in wants.
func (r *Reader) Read(ctx context.Context, keys []string, endpoint string, wants []Want, out []int64) {
	if r.own != nil && endpoint == r.own.endpoint {
		ks := make([]string, len(wants))
		sizes := make([]uint64, len(wants))
		dests := make([][][]byte, len(wants))
		for j, w := range wants {
			ks[j], sizes[j], dests[j] = keys[w.Item], w.Size, w.Bufs
		}
		for j, code := range r.own.loadLocal(ks, sizes, dests) {
			out[wants[j].Item] = codeOrSize(code, wants[j].Size)
		}
		return
	}
	peer := r.holder(endpoint)
	chunks := splitStage(wants)
	// A few chunks at once: the holder reads one from disk while another
	// is pulled. Objects that found its staging buffer full go again, one
	// chunk at a time, once the others have released their room.
	var wg sync.WaitGroup
	next := make(chan []Want)
	for range min(len(chunks), stageParallel) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ch := range next {
				r.stageAndPull(ctx, peer, keys, ch, out)
			}
		}()
	}
	for _, ch := range chunks {
		next <- ch
	}
	close(next)
	wg.Wait()
	for try := 0; try < 3; try++ {
		var again []Want
		for _, ch := range chunks {
			for _, w := range ch {
				if out[w.Item] == int64(wire.ErrFileInvalidBuffer) {
					again = append(again, w)
				}
			}
		}
		if len(again) == 0 {
			return
		}
		time.Sleep(time.Duration(try) * 10 * time.Millisecond)
		for _, ch := range splitStage(again) {
			r.stageAndPull(ctx, peer, keys, ch, out)
		}
	}
}

// splitStage cuts wants into staging requests of at most maxStageKeys
// objects and stageChunk bytes (a larger object goes alone).
func splitStage(wants []Want) [][]Want {
	var chunks [][]Want
	for len(wants) > 0 {
		n, bytes := 0, uint64(0)
		for n < len(wants) && n < maxStageKeys && (n == 0 || bytes+wants[n].Size <= stageChunk) {
			bytes += wants[n].Size
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
func (r *Reader) stageAndPull(ctx context.Context, peer *rpc.Client, keys []string, wants []Want, out []int64) {
	req := wire.StageReq{Keys: make([]string, len(wants)), Sizes: make([]uint64, len(wants))}
	for j, w := range wants {
		req.Keys[j], req.Sizes[j] = keys[w.Item], w.Size
	}
	sent := time.Now()
	var resp wire.StageResp
	err := peer.Call(ctx, wire.OpStageOffloaded, &req, &resp)
	if err == nil && (len(resp.Codes) != len(wants) || len(resp.Offsets) != len(wants)) {
		err = wire.Errorf(wire.ErrRPCFail, "stage answered %d of %d keys", len(resp.Codes), len(wants))
	}
	if err != nil {
		r.log.Warn("get: SSD holder unreachable", "endpoint", peer.Addr(), "err", err)
		for _, w := range wants {
			out[w.Item] = int64(wire.CodeOf(err))
		}
		return
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := peer.Call(rctx, wire.OpReleaseStaged, &wire.ReleaseStagedReq{BatchID: resp.BatchID}, &wire.CodesResp{}); err != nil {
			r.log.Debug("releasing a staging lease failed; the holder reclaims it after its TTL", "err", err)
		}
	}()
	buf := transfer.PeerFromDesc(resp.Buffer)
	var ops []transfer.Op
	var opWant []Want
	for j, w := range wants {
		if resp.Codes[j] != wire.OK {
			out[w.Item] = int64(resp.Codes[j])
			continue
		}
		var g []byte
		if j < len(resp.Grants) {
			g = resp.Grants[j] // the holder's invitation to read that object
		}
		ops = append(ops, transfer.Op{Peer: buf, Offset: resp.Offsets[j], Bufs: w.Bufs, Grant: g})
		opWant = append(opWant, w)
	}
	if len(ops) == 0 {
		return
	}
	errs := r.host.Pull(ctx, ops)
	late := time.Since(sent) >= time.Duration(resp.GCTTLMS)*time.Millisecond
	for j, err := range errs {
		w := opWant[j]
		switch {
		case err != nil:
			out[w.Item] = int64(wire.CodeOf(err))
			r.log.Warn("get: pulling from an SSD holder's staging buffer failed", "key", keys[w.Item], "err", err)
		case late:
			out[w.Item] = int64(wire.ErrLeaseExpired)
			r.log.Warn("get: SSD read outlived the staging lease; result discarded", "key", keys[w.Item], "ttl_ms", resp.GCTTLMS)
		default:
			out[w.Item] = int64(w.Size)
		}
	}
}

func codeOrSize(code wire.Code, size uint64) int64 {
	if code != wire.OK {
		return int64(code)
	}
	return int64(size)
}
