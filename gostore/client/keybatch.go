// keybatch.go defines keyBatch, the background batcher that tells the master
// what happened to keys off the caller's path: reads that ended
// (ReadDone) and plans committed (PutEnd).

package client

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/gostore/gostore/gostore/rpc"
	"github.com/gostore/gostore/gostore/wire"
)

// keyBatchMax caps one batch's RPC.
const keyBatchMax = 4096

// keyBatch collects (key, epoch) pairs and sends them to the master in
// batches of one op: a get costs one RPC, and the reader count it holds
// drops a moment later; a plan's commit flips its header at once and the
// master learns a moment later. While a batch is in flight new keys
// accumulate, so the batch size follows the load.
type keyBatch struct {
	op wire.Op
	// done, if set, is told each batch's outcome (codes per key, or the
	// call's error).
	done func(req *wire.KeysReq, codes []wire.Code, err error)
	// delay, when not 0, makes the sender poll every delay while keys
	// keep coming (and for idleSpell after) instead of being woken
	// by each add: waking a goroutine costs the adding call ~20 µs on
	// these machines (measured on a plan commit: 20 µs woken, 3 µs
	// polled), so only the first add after a quiet spell pays it.
	delay time.Duration

	mu       sync.Mutex
	pending  wire.KeysReq // Keys and Epochs waiting
	sleeping bool         // the sender waits for a wake (polling sender only)
	wake     chan struct{}
	sending  sync.Mutex // held while a batch is on the wire
}

// idleSpell is how long a polling sender goes on polling after the last
// key came, before it goes back to sleep.
const idleSpell = 100 * time.Millisecond

func (r *keyBatch) init(op wire.Op, delay time.Duration, done func(*wire.KeysReq, []wire.Code, error)) {
	r.op, r.delay, r.done = op, delay, done
	r.wake = make(chan struct{}, 1)
	r.sleeping = true
}

func (r *keyBatch) add(key string, epoch uint64) {
	r.mu.Lock()
	r.pending.Keys = append(r.pending.Keys, key)
	r.pending.Epochs = append(r.pending.Epochs, epoch)
	wake := r.delay == 0 || r.sleeping
	r.sleeping = false
	r.mu.Unlock()
	if wake {
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
}

// take removes up to keyBatchMax keys from the queue.
func (r *keyBatch) take(clientID string) wire.KeysReq {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := min(len(r.pending.Keys), keyBatchMax)
	req := wire.KeysReq{ClientID: clientID, Keys: r.pending.Keys[:n:n], Epochs: r.pending.Epochs[:n:n]}
	r.pending.Keys, r.pending.Epochs = r.pending.Keys[n:], r.pending.Epochs[n:]
	if len(r.pending.Keys) == 0 {
		r.pending = wire.KeysReq{}
	}
	return req
}

// flush sends everything pending (each batch within 5 s and ctx) and
// returns once the master has it,
// including a batch another goroutine had already started sending. It
// reports whether it sent anything.
func (r *keyBatch) flush(ctx context.Context, master *rpc.Client, clientID string, log *slog.Logger) bool {
	r.sending.Lock()
	defer r.sending.Unlock()
	sent := false
	for req := r.take(clientID); len(req.Keys) > 0; req = r.take(clientID) {
		sent = true
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		var resp wire.CodesResp
		var err error
		if r.done != nil {
			err = master.Call(ctx, r.op, &req, &resp)
			r.done(&req, resp.Codes, err)
		} else if err = master.Call(ctx, r.op, &req, nil); err != nil {
			log.Debug("batch not delivered", "op", r.op.String(), "keys", len(req.Keys), "err", err)
		}
		cancel()
	}
	return sent
}

// run sends batches until stop closes, then flushes what is left.
func (r *keyBatch) run(ctx context.Context, master *rpc.Client, clientID string, log *slog.Logger, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			r.flush(ctx, master, clientID, log)
			return
		case <-r.wake:
		}
		if r.delay == 0 {
			r.flush(ctx, master, clientID, log)
			continue
		}
		if !r.poll(ctx, master, clientID, log, stop) {
			return
		}
	}
}

// poll flushes every delay until idleSpell passed with nothing, then
// marks the sender asleep (unless keys slipped in); false once stop closed.
func (r *keyBatch) poll(ctx context.Context, master *rpc.Client, clientID string, log *slog.Logger, stop <-chan struct{}) bool {
	t := time.NewTicker(r.delay)
	defer t.Stop()
	for quiet := 0; ; {
		select {
		case <-stop:
			r.flush(ctx, master, clientID, log)
			return false
		case <-t.C:
		}
		if r.flush(ctx, master, clientID, log) {
			quiet = 0
			continue
		}
		if quiet++; time.Duration(quiet)*r.delay < idleSpell {
			continue
		}
		r.mu.Lock()
		if len(r.pending.Keys) == 0 {
			r.sleeping = true
			r.mu.Unlock()
			return true
		}
		r.mu.Unlock()
		quiet = 0
	}
}
