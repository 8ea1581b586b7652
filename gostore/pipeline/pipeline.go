// pipeline.go defines the public surface: the item, the four stage seams,
// the configuration, the Pipeline with Enqueue/Close/Stats, and the
// per-container cancellation token behind each Handle.

package pipeline

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Errors reported to done (and by Handle.Err) or returned by Enqueue.
var (
	// ErrRejected: the Policy did not admit the item. Nothing was pinned.
	ErrRejected = errors.New("pipeline: rejected by policy")
	// ErrClosed: the pipeline is closed (Enqueue), or was closed before
	// the item reached the Batcher (done). It wraps
	// context.Canceled, so errors.Is(err, context.Canceled) holds for it.
	ErrClosed = fmt.Errorf("pipeline: closed: %w", context.Canceled)
	// ErrTransferPanic: the Executor panicked while transferring the
	// item's batch. The source pins were still released.
	ErrTransferPanic = errors.New("pipeline: executor panicked")
	// ErrBadResult: the Executor returned a result slice whose length is
	// neither 0 nor the batch length.
	ErrBadResult = errors.New("pipeline: executor returned wrong number of results")
)

// Item is what a caller offloads: a key and its size in bytes. The
// pipeline never interprets Key; Size is reported to the stages only.
type Item[K comparable] struct {
	Key  K
	Size uint64
}

// Policy is the PolicyEvaluator seam: it filters items (size limits,
// already offloaded, ...). It should be fast; ctx is the item's
// cancellation token.
type Policy[K comparable] interface {
	Admit(ctx context.Context, it Item[K]) bool
}

// Precondition is the PreconditionAwaiter seam: Wait returns nil once the
// item may be offloaded (e.g. its memory replica is complete), an error if
// it never can be, or ctx's error once ctx (the item's token) is done. It
// may block; it must return promptly after ctx is done.
type Precondition[K comparable] interface {
	Wait(ctx context.Context, it Item[K]) error
}

// Upgrader pins the source replicas of a batch: the point of no return.
// On success it returns release, which the pipeline calls exactly once
// after the transfer (even if the transfer fails or panics); release may
// be nil. On error the Upgrader must have pinned nothing; release is
// ignored and every item of the batch is finished with that error. The
// slice belongs to the pipeline and must not be retained.
type Upgrader[K comparable] interface {
	Upgrade(ctx context.Context, items []Item[K]) (release func(), err error)
}

// Executor is the TransferExecutor seam: it writes a pinned batch (to
// SSD). It returns nil (all succeeded) or one error per item, in order.
// ctx is never cancelled by an item's token: the batch is committed. The
// slice belongs to the pipeline and must not be retained.
type Executor[K comparable] interface {
	Transfer(ctx context.Context, items []Item[K]) []error
}

// Config sizes the pipeline. Zero fields take the defaults below.
type Config struct {
	// MaxBatch is the most items in one batch (default 64).
	MaxBatch int
	// MaxBatchBytes, when not 0, also flushes a batch once its items'
	// sizes add up to this many bytes (the last item may cross it; a
	// larger item travels alone): it bounds how much one upgrade pins.
	MaxBatchBytes uint64
	// MinBatch is the fewest ready items a timed flush sends (default 1,
	// clamped to MaxBatch). Close flushes any number.
	MinBatch int
	// FlushInterval is the batcher's timer period (default 10ms).
	FlushInterval time.Duration
	// QueueDepth bounds each inter-stage queue (default 128). Enqueue
	// blocks while the first queue is full.
	QueueDepth int
	// Workers is the number of goroutines in each of the policy,
	// precondition and executor stages (default 4).
	Workers int
}

func (c Config) withDefaults() Config {
	if c.MaxBatch <= 0 {
		c.MaxBatch = 64
	}
	if c.MinBatch <= 0 {
		c.MinBatch = 1
	}
	if c.MinBatch > c.MaxBatch {
		c.MinBatch = c.MaxBatch
	}
	if c.FlushInterval <= 0 {
		c.FlushInterval = 10 * time.Millisecond
	}
	if c.QueueDepth <= 0 {
		c.QueueDepth = 128
	}
	if c.Workers <= 0 {
		c.Workers = 4
	}
	return c
}

// Stage names where a container can be cancelled, indexing
// Stats.Cancelled.
const (
	StagePolicy       = iota // waiting for or in the PolicyEvaluator
	StagePrecondition        // waiting for or in the PreconditionAwaiter
	StageBatcher             // in the Batcher or its output queue
	StageUpgrade             // the executor's final sweep before Upgrade
	numStages
)

// Stats are cumulative counters. Every accepted item ends in exactly one
// of Rejected, Cancelled[*], PreconditionFailed, UpgradeFailed,
// Transferred or Failed.
type Stats struct {
	Enqueued           uint64            // accepted by Enqueue
	Rejected           uint64            // refused by the Policy
	Cancelled          [numStages]uint64 // cancelled before upgrade, per stage
	PreconditionFailed uint64            // Precondition returned an error
	UpgradeFailed      uint64            // items whose batch failed to upgrade
	Upgraded           uint64            // items past the point of no return
	Batches            uint64            // batches upgraded
	Transferred        uint64            // items transferred successfully
	Failed             uint64            // items whose transfer failed
}

type stats struct {
	enqueued, rejected, precondFailed, upgradeFailed atomic.Uint64
	upgraded, batches, transferred, failed           atomic.Uint64
	cancelled                                        [numStages]atomic.Uint64
}

// Handle lets the caller follow and cancel one offload it requested.
type Handle interface {
	// Cancel requests cancellation. Before the upgrade it stops the
	// offload (done gets a cancellation error); after it, it has no effect.
	Cancel()
	// Done is closed once done has been called for the item.
	Done() <-chan struct{}
	// Err is the item's final error, valid after Done is closed: nil,
	// ErrRejected, a cancellation cause, or a stage's error.
	Err() error
}

// container is the unit that flows through the stages; it is owned by
// exactly one goroutine (or queue) at a time, and only its owner finishes
// it. Its ctx is the cancellation token shared with the Handle.
type container[K comparable] struct {
	item     Item[K]
	ctx      context.Context
	cancel   context.CancelCauseFunc
	stops    [2]func() bool // AfterFunc: [0] Close cancels it, [1] kicks the batcher
	finished atomic.Bool
	done     chan struct{}
	err      error // written once before done is closed
}

func (c *container[K]) Cancel()               { c.cancel(context.Canceled) }
func (c *container[K]) Done() <-chan struct{} { return c.done }
func (c *container[K]) Err() error {
	select {
	case <-c.done:
		return c.err
	default:
		return nil
	}
}

// cancelled reports whether the token fired, and its cause.
func (c *container[K]) cancelled() (error, bool) {
	if c.ctx.Err() == nil {
		return nil, false
	}
	return context.Cause(c.ctx), true
}

// Pipeline runs Enqueue → PolicyEvaluator → PreconditionAwaiter → Batcher
// → TransferExecutor. See the package documentation.
type Pipeline[K comparable] struct {
	cfg  Config
	pol  Policy[K]
	pre  Precondition[K]
	up   Upgrader[K]
	ex   Executor[K]
	done func(Item[K], error)

	base     context.Context // cancelled (cause ErrClosed) by Close
	stopBase context.CancelCauseFunc

	mu struct {
		sync.RWMutex
		closed bool // guarded: Enqueue sends on in only under RLock with !closed
	}
	in    chan *container[K]   // Enqueue → policy
	ready chan *container[K]   // policy → precondition
	batch chan *container[K]   // precondition → batcher
	exec  chan []*container[K] // batcher → executors, a hand-off
	kick  chan struct{}        // a token fired: the batcher should sweep
	hooks hooks

	wg    sync.WaitGroup
	once  sync.Once
	stats stats
}

// New builds and starts a pipeline. pol, pre and up may be nil (admit
// all, no precondition, nothing to pin); ex must not be. done, if not nil,
// is called exactly once for every item Enqueue accepted, from a pipeline
// goroutine; it must not block for long.
func New[K comparable](cfg Config, pol Policy[K], pre Precondition[K], up Upgrader[K], ex Executor[K], done func(Item[K], error)) *Pipeline[K] {
	cfg = cfg.withDefaults()
	t := time.NewTicker(cfg.FlushInterval)
	return start(cfg, pol, pre, up, ex, done, hooks{tick: t.C, stopTick: t.Stop})
}

// hooks let tests drive the batcher's clock by hand and observe it.
type hooks struct {
	tick        <-chan time.Time // the flush timer
	stopTick    func()           // called once by Close
	onPending   func(n int)      // the batcher now holds n containers
	beforeSweep func(n int)      // an executor took a batch of n
}

func start[K comparable](cfg Config, pol Policy[K], pre Precondition[K], up Upgrader[K], ex Executor[K], done func(Item[K], error), h hooks) *Pipeline[K] {
	if ex == nil {
		panic("pipeline: nil Executor")
	}
	cfg = cfg.withDefaults()
	p := &Pipeline[K]{
		cfg: cfg, pol: pol, pre: pre, up: up, ex: ex, done: done,
		in:    make(chan *container[K], cfg.QueueDepth),
		ready: make(chan *container[K], cfg.QueueDepth),
		batch: make(chan *container[K], cfg.QueueDepth),
		exec:  make(chan []*container[K]), // unbuffered: see batcher
		kick:  make(chan struct{}, 1),
		hooks: h,
	}
	p.base, p.stopBase = context.WithCancelCause(context.Background())
	p.runStage(cfg.Workers, p.in, p.ready, StagePrecondition, p.policyStep)
	p.runStage(cfg.Workers, p.ready, p.batch, StageBatcher, p.preconditionStep)
	p.wg.Add(1)
	go p.batcher()
	for range cfg.Workers {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			for b := range p.exec {
				p.execute(b)
			}
		}()
	}
	return p
}

// Enqueue hands it to the pipeline. The item's cancellation token is a
// context derived from parent: cancelling parent or calling Handle.Cancel
// cancels it until the upgrade; Close cancels it until it reaches the
// Batcher. Enqueue blocks while
// the first queue is full. It returns an error (ErrClosed, or parent's
// cause) when the item was not accepted; done is then never called for it.
func (p *Pipeline[K]) Enqueue(parent context.Context, it Item[K]) (Handle, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.mu.closed || p.base.Err() != nil {
		return nil, ErrClosed
	}
	if parent.Err() != nil {
		return nil, context.Cause(parent)
	}
	c := &container[K]{item: it, done: make(chan struct{})}
	c.ctx, c.cancel = context.WithCancelCause(parent)
	c.stops[0] = context.AfterFunc(p.base, func() { c.cancel(ErrClosed) })
	c.stops[1] = context.AfterFunc(c.ctx, p.kickBatcher)
	select {
	case p.in <- c:
		p.stats.enqueued.Add(1)
		return c, nil
	case <-c.ctx.Done():
		err := context.Cause(c.ctx)
		c.release()
		return nil, err
	}
}

// Close stops intake and drains what is ready: items that have not yet
// reached the Batcher are cancelled (done gets ErrClosed, or the item's
// own earlier cause); items in the Batcher are flushed regardless of
// MinBatch and transferred, unless their own token fires first; committed
// batches finish. Close then waits for every pipeline goroutine to exit.
// It is idempotent and safe to call concurrently; Enqueue after Close
// returns ErrClosed.
func (p *Pipeline[K]) Close() {
	p.once.Do(func() {
		p.stopBase(ErrClosed) // wakes Enqueues blocked on a full queue
		p.mu.Lock()
		p.mu.closed = true
		close(p.in)
		p.mu.Unlock()
		if p.hooks.stopTick != nil {
			p.hooks.stopTick()
		}
	})
	p.wg.Wait()
}

// Stats returns a snapshot of the counters.
func (p *Pipeline[K]) Stats() Stats {
	s := &p.stats
	out := Stats{
		Enqueued:           s.enqueued.Load(),
		Rejected:           s.rejected.Load(),
		PreconditionFailed: s.precondFailed.Load(),
		UpgradeFailed:      s.upgradeFailed.Load(),
		Upgraded:           s.upgraded.Load(),
		Batches:            s.batches.Load(),
		Transferred:        s.transferred.Load(),
		Failed:             s.failed.Load(),
	}
	for i := range out.Cancelled {
		out.Cancelled[i] = s.cancelled[i].Load()
	}
	return out
}

// release drops the container's context registrations.
func (c *container[K]) release() {
	c.stops[0]()
	c.stops[1]()
	c.cancel(context.Canceled)
}

// finish reports the item's outcome exactly once. Only the container's
// current owner calls it; a second call is a broken invariant.
func (p *Pipeline[K]) finish(c *container[K], err error) {
	if !c.finished.CompareAndSwap(false, true) {
		panic("pipeline: container finished twice")
	}
	c.release()
	c.err = err
	if p.done != nil {
		p.done(c.item, err)
	}
	close(c.done)
}

// sweep finishes c as cancelled at stage if its token fired, and reports
// whether it did.
func (p *Pipeline[K]) sweep(c *container[K], stage int) bool {
	cause, ok := c.cancelled()
	if !ok {
		return false
	}
	p.stats.cancelled[stage].Add(1)
	p.finish(c, cause)
	return true
}

func (p *Pipeline[K]) kickBatcher() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}
