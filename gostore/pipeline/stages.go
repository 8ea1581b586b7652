// stages.go defines the stage goroutines: PolicyEvaluator and
// PreconditionAwaiter workers, the Batcher, and the TransferExecutor with
// its final sweep, the upgrade boundary and the transfer.

package pipeline

import (
	"context"
	"fmt"
	"slices"
	"sync"
)

// runStage starts n workers that take containers from in, run step, and
// push the ones step keeps to out; out is closed once in is closed and
// every worker has exited. A container whose token fires while the push
// blocks is swept, counted at outStage (the stage it was waiting for).
func (p *Pipeline[K]) runStage(n int, in <-chan *container[K], out chan<- *container[K], outStage int, step func(*container[K]) bool) {
	var stage sync.WaitGroup
	for range n {
		stage.Add(1)
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer stage.Done()
			for c := range in {
				if !step(c) {
					continue
				}
				select {
				case out <- c:
				case <-c.ctx.Done():
					p.sweep(c, outStage)
				}
			}
		}()
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		stage.Wait()
		close(out)
	}()
}

// policyStep is the PolicyEvaluator: sweep, Admit, sweep. It reports
// whether c goes on.
func (p *Pipeline[K]) policyStep(c *container[K]) bool {
	if p.sweep(c, StagePolicy) {
		return false
	}
	if p.pol != nil && !p.pol.Admit(c.ctx, c.item) {
		if p.sweep(c, StagePolicy) {
			return false
		}
		p.stats.rejected.Add(1)
		p.finish(c, ErrRejected)
		return false
	}
	return !p.sweep(c, StagePolicy)
}

// preconditionStep is the PreconditionAwaiter: sweep, Wait (which returns
// when the token fires), sweep. It reports whether c goes on.
func (p *Pipeline[K]) preconditionStep(c *container[K]) bool {
	if p.sweep(c, StagePrecondition) {
		return false
	}
	if p.pre == nil {
		return true
	}
	err := p.pre.Wait(c.ctx, c.item)
	if p.sweep(c, StagePrecondition) {
		return false
	}
	if err != nil {
		p.stats.precondFailed.Add(1)
		p.finish(c, err)
		return false
	}
	return true
}

// batcher groups ready containers: it flushes MaxBatch (or MaxBatchBytes)
// at once, and on a
// tick whatever is pending if at least MinBatch; when its input closes it
// flushes everything (in MaxBatch pieces) and closes the executor queue.
// A fired token kicks it to sweep what it holds, so a cancelled container
// is reported promptly, even while a flush waits for an idle executor:
// the executor queue is an unbuffered hand-off, so no batch sits where it
// cannot be swept.
func (p *Pipeline[K]) batcher() {
	defer p.wg.Done()
	defer close(p.exec)
	var pending []*container[K]
	for {
		select {
		case c, ok := <-p.batch:
			if !ok {
				for len(pending) > 0 {
					n := p.batchLen(pending)
					p.pushBatch(slices.Clone(pending[:n]))
					pending = pending[n:]
				}
				return
			}
			if p.sweep(c, StageBatcher) {
				continue
			}
			// Close drains what is ready: from here on only the
			// item's own token cancels it.
			c.stops[0]()
			pending = append(pending, c)
			if p.hooks.onPending != nil {
				p.hooks.onPending(len(pending))
			}
			if p.full(pending) {
				p.pushBatch(pending)
				pending = nil
			}
		case <-p.hooks.tick:
			pending = p.sweepAll(pending, StageBatcher)
			if len(pending) > 0 && len(pending) >= p.cfg.MinBatch {
				p.pushBatch(pending)
				pending = nil
			}
		case <-p.kick:
			pending = p.sweepAll(pending, StageBatcher)
		}
	}
}

// full reports whether pending makes a batch by itself: MaxBatch items,
// or MaxBatchBytes bytes.
func (p *Pipeline[K]) full(pending []*container[K]) bool {
	if len(pending) >= p.cfg.MaxBatch {
		return true
	}
	return p.cfg.MaxBatchBytes > 0 && sizeOf(pending) >= p.cfg.MaxBatchBytes
}

// batchLen is how many of pending (from the front) the next batch takes:
// at most MaxBatch items, and no more once MaxBatchBytes is reached.
func (p *Pipeline[K]) batchLen(pending []*container[K]) int {
	var bytes uint64
	for i, c := range pending {
		if i == p.cfg.MaxBatch || (p.cfg.MaxBatchBytes > 0 && bytes >= p.cfg.MaxBatchBytes) {
			return i
		}
		bytes += c.item.Size
	}
	return len(pending)
}

func sizeOf[K comparable](list []*container[K]) (n uint64) {
	for _, c := range list {
		n += c.item.Size
	}
	return n
}

// pushBatch hands b to an executor, sweeping it whenever a token fires
// meanwhile; it gives up once b is empty. It may consume a kick meant for
// pending, so it re-arms the kick when it saw one.
func (p *Pipeline[K]) pushBatch(b []*container[K]) {
	kicked := false
	defer func() {
		if kicked {
			p.kickBatcher()
		}
	}()
	for {
		b = p.sweepAll(b, StageBatcher)
		if len(b) == 0 {
			return
		}
		select {
		case p.exec <- b:
			return
		case <-p.kick:
			kicked = true
		}
	}
}

// sweepAll finishes the cancelled containers of list and returns the rest,
// in order, in list's storage.
func (p *Pipeline[K]) sweepAll(list []*container[K], stage int) []*container[K] {
	kept := list[:0]
	for _, c := range list {
		if !p.sweep(c, stage) {
			kept = append(kept, c)
		}
	}
	clear(list[len(kept):])
	return kept
}

// execute is the TransferExecutor for one batch: final sweep, upgrade (the
// point of no return), transfer, release, report.
func (p *Pipeline[K]) execute(b []*container[K]) {
	if p.hooks.beforeSweep != nil {
		p.hooks.beforeSweep(len(b))
	}
	b = p.sweepAll(b, StageUpgrade)
	if len(b) == 0 {
		return
	}
	items := make([]Item[K], len(b))
	for i, c := range b {
		items[i] = c.item
	}
	var release func()
	if p.up != nil {
		r, err := p.up.Upgrade(context.WithoutCancel(p.base), items)
		if err != nil {
			p.stats.upgradeFailed.Add(uint64(len(b)))
			for _, c := range b {
				p.finish(c, err)
			}
			return
		}
		release = r
	}
	// Committed: tokens are no longer consulted.
	p.stats.upgraded.Add(uint64(len(b)))
	p.stats.batches.Add(1)
	errs := p.transfer(items, release)
	for i, c := range b {
		if errs[i] != nil {
			p.stats.failed.Add(1)
		} else {
			p.stats.transferred.Add(1)
		}
		p.finish(c, errs[i])
	}
}

// transfer runs the Executor with a context no token can cancel and
// returns one error per item; release is called exactly once, even if the
// Executor panics.
func (p *Pipeline[K]) transfer(items []Item[K], release func()) (errs []error) {
	defer func() {
		if r := recover(); r != nil {
			errs = fill(len(items), fmt.Errorf("%w: %v", ErrTransferPanic, r))
		}
		if release != nil {
			release()
		}
	}()
	errs = p.ex.Transfer(context.WithoutCancel(p.base), items)
	switch {
	case errs == nil:
		errs = make([]error, len(items))
	case len(errs) != len(items):
		errs = fill(len(items), fmt.Errorf("%w: %d for %d items", ErrBadResult, len(errs), len(items)))
	}
	return errs
}

func fill(n int, err error) []error {
	errs := make([]error, n)
	for i := range errs {
		errs[i] = err
	}
	return errs
}
