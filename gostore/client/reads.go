// reads.go defines the background batcher that tells the master reads ended.
package client

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/gostore/gostore/gostore/rpc"
	"github.com/gostore/gostore/gostore/wire"
)

// readDoneBatch caps one ReadDone RPC.
const readDoneBatch = 4096

// readsDone collects keys whose reads ended and sends them to the master in
// batches, off the get's critical path: a get costs one RPC, and the reader
// count it holds on the object drops a moment later. While a batch is in
// flight new keys accumulate, so the batch size follows the load.
type readsDone struct {
	mu      sync.Mutex
	pending wire.KeysReq // Keys and Epochs of ended reads
	wake    chan struct{}
	sending sync.Mutex // held while a batch is on the wire
}

func (r *readsDone) init() { r.wake = make(chan struct{}, 1) }

func (r *readsDone) add(key string, epoch uint64) {
	r.mu.Lock()
	r.pending.Keys = append(r.pending.Keys, key)
	r.pending.Epochs = append(r.pending.Epochs, epoch)
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// take removes up to readDoneBatch reads from the queue.
func (r *readsDone) take(clientID string) wire.KeysReq {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := min(len(r.pending.Keys), readDoneBatch)
	req := wire.KeysReq{ClientID: clientID, Keys: r.pending.Keys[:n:n], Epochs: r.pending.Epochs[:n:n]}
	r.pending.Keys, r.pending.Epochs = r.pending.Keys[n:], r.pending.Epochs[n:]
	if len(r.pending.Keys) == 0 {
		r.pending = wire.KeysReq{}
	}
	return req
}

// flush sends everything pending and returns once the master has it,
// including a batch another goroutine had already started sending.
func (r *readsDone) flush(master *rpc.Client, clientID string, log *slog.Logger) {
	r.sending.Lock()
	defer r.sending.Unlock()
	for req := r.take(clientID); len(req.Keys) > 0; req = r.take(clientID) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := master.Call(ctx, wire.OpReadDone, &req, nil); err != nil {
			// The master frees the reader count when the lease ends.
			log.Debug("ReadDone not delivered; the lease will end the reads", "keys", len(req.Keys), "err", err)
		}
		cancel()
	}
}

// run sends batches until stop closes, then flushes what is left.
func (r *readsDone) run(master *rpc.Client, clientID string, log *slog.Logger, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			r.flush(master, clientID, log)
			return
		case <-r.wake:
			r.flush(master, clientID, log)
		}
	}
}
