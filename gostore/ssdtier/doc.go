// Package ssdtier is a store client's SSD tier: it keeps copies of objects
// on a local directory so that the pool may evict their memory replicas,
// and it serves those copies back to every reader in the cluster.
//
// # What it owns
//
// A Tier owns the directory (through storage.FileStorage: backend, lock,
// identity), the staging buffer peers read disk copies from, and two
// listeners on the client's host: the staging buffer's transfer server and
// the RPC endpoint (StageOffloaded, ReleaseStaged) that names the tier's
// copies at the master. It runs the offload heartbeat, which takes the
// master's work (objects to persist, copies to drop) and feeds the offload
// pipeline: policy (the object fits the staging buffer), precondition (a
// caller's offload waits for the object's write), upgrade (pin the memory
// replica in the host's segment) and transfer (write the disk, tell the
// master). The same heartbeat hands it promotions (promote.go): copies
// reads want back in memory, which it loads, checksum verified, straight
// into the range of the host's own segment the master names. At start,
// and whenever the master forgot the client, it re-registers what the
// directory holds.
//
// A Reader is the other side, which every client has, tier or not: a get
// whose object lives only on some client's disk asks that holder to stage
// it and pulls the bytes from the holder's staging buffer (or, when the
// holder is this client's own Tier, loads them straight from disk).
//
// # Invariants
//
//   - A disk copy is published (NotifyOffloaded) only with the epoch of
//     the memory replica it was written from; the master refuses one whose
//     object was rewritten or removed meanwhile, and the tier deletes it.
//   - A copy failing its checksum is never served: it is deleted and the
//     master told, and the reader gets ErrChecksumMismatch.
//   - Staged bytes are held under a lease; a reader whose pull outlived it
//     discards the result (ErrLeaseExpired) rather than trust the bytes.
//   - The staging buffer's transfer server serves a reader on another host
//     only what it staged for it: the tier signs a read grant per staged
//     object with the server's key (StageResp.Grants), for the lease plus
//     slack. A reader on the same host maps the buffer instead.
//   - The package never reaches the client itself: all it needs from its
//     host is the Host interface.
//
// # The caller's duties
//
// The host implements Host, opens the tier with Open before it mounts its
// segment (the segment is announced with the tier), calls Start once the
// segment is mounted, Kick when the master says it has offload work,
// RecoverSoon when the master forgot the client, and Close before the
// segment the offloads read from goes away. A Reader is closed when the
// host closes; its Read may run concurrently with anything else.
package ssdtier
