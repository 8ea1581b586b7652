// Package pipeline is the offload pipeline: it moves items (objects of the
// memory tier) through
//
//	Enqueue → PolicyEvaluator → PreconditionAwaiter → Batcher → TransferExecutor
//
// with a cancellation token per item, up to a point of no return. It is
// generic over the key type and imports neither the client nor storage:
// the four stages are small interfaces the caller supplies (Policy,
// Precondition, Upgrader, Executor).
//
// # What it owns
//
// The goroutines and bounded queues between the stages, the per-item
// tokens, the batching, the sweeps and the exactly-once outcome report.
// It owns no data: the Upgrader pins and releases the source replicas,
// the Executor writes them.
//
// # Stages
//
//  1. Enqueue wraps the item in a container whose token is a context
//     derived from the caller's parent context, and returns a Handle.
//  2. PolicyEvaluator (Workers goroutines) asks Policy.Admit; a refusal
//     finishes the item with ErrRejected.
//  3. PreconditionAwaiter (Workers goroutines) calls Precondition.Wait
//     with the token; it may block until the source is ready.
//  4. Batcher (one goroutine) groups ready items: it flushes at MaxBatch
//     items or MaxBatchBytes bytes, and on each FlushInterval tick if at
//     least MinBatch are pending; never more than MaxBatch per batch.
//  5. TransferExecutor (Workers goroutines) takes a batch, sweeps it one
//     last time, calls Upgrader.Upgrade (pinning the sources), then
//     Executor.Transfer, then release.
//
// # Cancellation and the point of no return
//
// A token fires when the Handle is cancelled, when the parent context is
// done, or (for items not yet in the Batcher) when the pipeline closes.
// Cancelled containers are swept, reported once with the token's cause
// (errors.Is(err, context.Canceled) for Cancel and Close) and never
// upgraded: when a stage takes or hands on a container, while Policy and
// Precondition run (they get the token as ctx), while the Batcher holds
// it (a fired token wakes the Batcher), while a batch waits for an idle
// executor (the hand-off is unbuffered, so no batch sits unswept), and
// immediately before the upgrade. A batch may lose some containers to a
// sweep and carry on with the rest.
//
// A successful Upgrade is the point of no return: from there the token is
// ignored, Transfer runs with a context that no token cancels, and
// release is called exactly once, even if Transfer fails or panics (a
// panic is reported as ErrTransferPanic to the batch's items). A Cancel
// after that point changes nothing; the Handle reports the transfer's
// outcome.
//
// # The caller's duties
//
//  1. Give Precondition.Wait a way out: return promptly once ctx is done.
//     Policy.Admit should be fast and also honour ctx.
//  2. Upgrader.Upgrade must pin nothing when it returns an error; on
//     success the pipeline owns release.
//  3. Executor.Transfer returns nil or one error per item, in order; it
//     must not keep the slice. It enforces its own timeouts: Close waits
//     for committed transfers.
//  4. done (and Handle.Done) fire exactly once for every item Enqueue
//     accepted, from a pipeline goroutine: keep done short.
//  5. Call Close once the pipeline is no longer needed: it stops intake,
//     cancels items that have not reached the Batcher (ErrClosed), flushes
//     and transfers what the Batcher holds regardless of MinBatch, and
//     waits for every goroutine. Enqueue then returns ErrClosed.
//
// Stats counts every accepted item into exactly one outcome: rejected,
// cancelled at a stage, precondition failed, upgrade failed, transferred
// or failed.
package pipeline
