// Package client is the store client that lives inside every Python process:
// it mounts this process's segment into the pool, talks to the master, and
// moves object bytes with the transfer engine.
//
// A put is PutStart (the master picks replica ranges), one transfer per
// replica straight from the caller's buffers, then PutEnd — or PutRevoke if
// a transfer failed. A get is GetReplicas, then one transfer from the
// nearest replica (own segment, then shared memory, then TCP) straight into
// the caller's buffers, trying the next replica on failure. Batches do the
// same with one RPC per phase for the whole batch.
//
// Two subsystems live in packages of their own and reach the client only
// through the interfaces they declare, which host.go implements: the SSD
// tier (gostore/ssdtier; the client holds its Tier, and a Reader that
// serves the get path's disk fallback) and the plan API
// (gostore/planclient, reached through Plans).
//
// Buffers: callers own every []byte they pass and must keep it valid until
// the call returns. Memory handed back by GetBuffers is the client's, lent
// until FreeBuffer.
package client
