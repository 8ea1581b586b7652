// places.go defines Places: where a process on this host may copy a found
// object from itself, for gostore-client's applications (standalone mode).

package client

import (
	"github.com/gostore/gostore/gostore/transfer"
	"github.com/gostore/gostore/gostore/wire"
)

// Place is a replica a process on this host can read in place: the
// object's Size bytes lie at Offset in the host segment SegID, SegSize
// bytes in all, whose memory is the memfd at Path (/proc/<owner>/fd/<n>),
// and stay the object's for LeaseMS milliseconds from the lookup (0: no
// bound). A zero Place (Path "") names none.
type Place struct {
	SegID, Offset, Size, SegSize, LeaseMS uint64
	Path                                  string
}

// Places returns, for each object p found, the place of its cheapest
// replica when that one is host memory this client maps itself (its own
// segment or a same-host peer's shared memory). Objects on other routes
// (TCP, GPU, the SSD tier) get no place. LeaveToCaller then hands the
// objects placed to the caller.
//
// Why: an application of gostore-client reads into its own private memory
// (the bytes of get_batch). The server's copy there is process_vm_writev,
// a third the speed of memcpy on the machines measured; the application
// mapping the segment and copying itself is one memcpy. The reader count
// and the lease this client holds keep the range the object's until
// GetFinish or Abort, as for this client's own copies.
func (c *Reads) Places(p *Pending) []Place {
	out := make([]Place, len(p.res))
	leave, err := c.enter()
	if err != nil {
		return out
	}
	defer leave()
	var ids []uint64
	for _, r := range p.res {
		if r.Code == wire.OK {
			for _, rep := range r.Replicas {
				ids = append(ids, rep.SegID)
			}
		}
	}
	if len(ids) == 0 {
		return out
	}
	ctx, cancel := c.ctx()
	known, _ := c.resolve(ctx, ids) // an unresolved replica gets no place
	cancel()
	for i, r := range p.res {
		if r.Code != wire.OK || len(r.Replicas) == 0 {
			continue
		}
		c.orderReplicas(r.Replicas)
		rep := r.Replicas[0] // the one GetFinish would read first
		peer, ok := known[rep.SegID]
		if !ok || !c.mapsHostMemory(peer) || rep.Offset > peer.Size || r.Size > peer.Size-rep.Offset {
			continue
		}
		out[i] = Place{SegID: rep.SegID, Offset: rep.Offset, Size: r.Size, SegSize: peer.Size,
			LeaseMS: uint64(max(r.LeaseMS, 0)), Path: peer.ShmPath}
	}
	return out
}

// LeaveToCaller marks the objects given a place (Places) as the caller's
// to copy from there: given no destination, GetFinish counts each read,
// its lease checked when GetFinish begins (the caller's copy is over by
// then): -707 once it ended, which GetFinish cannot read again, having no
// destination; a caller whose copy outlived the lease gives the
// destination instead. One given a destination is read into it as before
// (and read again past its lease), so a caller that could not open a
// place loses nothing.
func (p *Pending) LeaveToCaller(places []Place) {
	for i, pl := range places {
		if pl.Path == "" || i >= len(p.res) {
			continue
		}
		if p.byCaller == nil {
			p.byCaller = make([]bool, len(p.res))
		}
		p.byCaller[i] = true
	}
}

// mapsHostMemory reports whether this client reaches peer's segment as
// host memory mapped here, known by a path and a size.
func (c *Reads) mapsHostMemory(peer transfer.Peer) bool {
	if peer.Location != "" || peer.ShmPath == "" || peer.Size == 0 {
		return false
	}
	route := c.engine.Route(peer)
	return route == transfer.RouteOwn || route == transfer.RouteShm
}

// copiedByCaller reports whether object i is the caller's to copy (Places).
func (p *Pending) copiedByCaller(i int) bool { return i < len(p.byCaller) && p.byCaller[i] }

// leftToCaller reports whether object i was the caller's to copy and the
// caller gave no destination for it: the caller copied it from its Place.
func (p *Pending) leftToCaller(i int, dests [][][]byte, dev [][]DevicePart) bool {
	return p.copiedByCaller(i) && (i >= len(dests) || len(dests[i]) == 0) && (i >= len(dev) || len(dev[i]) == 0)
}
