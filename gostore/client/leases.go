// leases.go reads again what was read past its lease: readAgain for the
// whole-object reads (Reads, through finish), readRangesAgain for the
// ranged ones (Sessions: GetRanges and get sessions).

package client

import (
	"fmt"
	"math"
	"time"

	"github.com/gostore/gostore/gostore/wire"
)

// leaseTries bounds how often an object whose read outlived its lease is
// looked up and read again within one call.
const leaseTries = 3

// readAgain reads again the objects late of p whose read outlived its
// lease (out[i] -707): each is looked up again (a new lease, and the
// object as it is now) and read again into the same destination, in
// groups small enough for the read to end well inside the lease at the
// speed the reads so far went, up to leaseTries times or the call's
// bound. Every read API reaches it through finish.
//
// What then gives -707, logged once per object: an object the caller
// copies itself (Places: there is no destination here to read into; the
// caller looks it up again), an object whose size changed meanwhile (its
// destination was sized for the old one; a read of a changed object must
// not pass for the one asked), and an object whose every read outlived
// its lease. An object gone meanwhile gets the lookup's code (-704).
func (c *Reads) readAgain(p *Pending, late []int, dests [][][]byte, dev [][]DevicePart, out []int64, began time.Time) {
	ctx, cancel := c.ctx()
	defer cancel()
	// The speed so far: every byte read, over the time the reads took
	// (from began, after the lookup: a lookup the master answered late,
	// through a pause, says nothing of how fast the bytes move).
	var done uint64
	for i, r := range p.res {
		if out[i] > 0 || out[i] == int64(wire.ErrLeaseExpired) {
			done += r.Size
		}
	}
	rate := float64(done) / max(time.Since(began).Seconds(), 1e-6) // bytes per second
	failed := func(i int, why string) {
		c.log.Warn("get: "+why+"; result discarded", "key", p.keys[i], "lease_ms", p.res[i].LeaseMS)
	}
	var todo []int
	for _, i := range late {
		if p.leftToCaller(i, dests, dev) {
			failed(i, "the caller's copy outlived the lease")
			continue
		}
		todo = append(todo, i)
	}
	for try := 1; len(todo) > 0; try++ {
		if try > leaseTries || ctx.Err() != nil {
			for _, i := range todo {
				failed(i, fmt.Sprintf("the read outlived the lease %d times", try-1))
			}
			return
		}
		var next []int
		for _, group := range leaseGroups(p, todo, rate) {
			again, err := c.locate(pick(p.keys, group), true, false)
			if err != nil {
				for _, i := range group {
					failed(i, "the lookup again failed: "+err.Error())
				}
				continue
			}
			gd := make([][][]byte, len(group))
			var gv [][]DevicePart
			if dev != nil {
				gv = make([][]DevicePart, len(group))
			}
			for j, i := range group {
				r := &again.res[j]
				switch {
				case r.Code != wire.OK:
					out[i] = int64(r.Code) // gone meanwhile: what the lookup says now
				case r.Size != p.res[i].Size:
					failed(i, "the object changed size during the read")
					r.Code = wire.ErrLeaseExpired // not read
				default:
					if i < len(dests) {
						gd[j] = dests[i]
					}
					if i < len(dev) {
						gv[j] = dev[i]
					}
				}
			}
			start := time.Now()
			got := c.readInto(again, gd, gv)
			var bytes uint64
			for j, i := range group {
				if again.res[j].Code != wire.OK {
					continue
				}
				bytes += again.res[j].Size
				out[i] = got[j]
				if got[j] > 0 && expired(again.res[j], again.sent) {
					out[i] = int64(wire.ErrLeaseExpired)
					next = append(next, i)
				}
			}
			c.ends.endReads(again)
			rate = float64(bytes) / max(time.Since(start).Seconds(), 1e-6)
		}
		todo = next
	}
}

// readRangesAgain is readAgain for ranged reads (GetRanges, get
// sessions): the objects late, whose ranges were read past their lease,
// are looked up again and their ranges read again, up to leaseTries
// times; an object that changed size meanwhile, or whose every read
// outlived its lease, keeps -707 (logged), one gone meanwhile gets the
// lookup's code. keep, when not nil, is handed each lookup again (its
// objects are late's, in order) once its reads are done and takes its
// reads over (a get session keeps them until it ends); nil ends them.
func (c *Sessions) readRangesAgain(keys []string, res []wire.GetResult, parts [][]RangePart, late []int, out [][]int64,
	keep func(late []int, again *Pending)) {
	for try := 1; len(late) > 0; try++ {
		if try > leaseTries {
			for _, i := range late {
				c.log.Warn("get: every ranged read outlived the lease; result discarded", "key", keys[i], "tries", try, "lease_ms", res[i].LeaseMS)
			}
			return
		}
		again, err := c.reads.locate(pick(keys, late), true, false)
		if err != nil {
			for _, i := range late {
				c.log.Warn("get: the lookup again of a ranged read failed; result discarded", "key", keys[i], "err", err)
			}
			return
		}
		gk, gp := pick(keys, late), make([][]RangePart, len(late))
		skip := make([]int64, len(late))
		for j, i := range late {
			gp[j] = parts[i]
			switch r := again.res[j]; {
			case r.Code != wire.OK:
				skip[j] = int64(r.Code)
				wire.Fill(out[i], int64(r.Code))
			case r.Size != res[i].Size:
				skip[j] = int64(wire.ErrLeaseExpired)
				c.log.Warn("get: the object changed size during the ranged read; result discarded", "key", keys[i])
			}
		}
		per := c.readRanges(gk, again.res, gp, skip)
		var next []int
		for j, i := range late {
			if skip[j] != 0 {
				continue
			}
			copy(out[i], per[j])
			if expireRanges(out[i], again.res[j], again.sent) {
				next = append(next, i)
			}
		}
		if keep != nil {
			keep(late, again)
		} else {
			c.ends.endReads(again)
		}
		late = next
	}
}

// expireRanges marks -707 each range of got (bytes read of the object r
// describes, looked up at sent) read past r's lease, and reports whether
// any was: those bytes may be a newer object's.
func expireRanges(got []int64, r wire.GetResult, sent time.Time) bool {
	if !expired(r, sent) {
		return false
	}
	late := false
	for k, n := range got {
		if n > 0 {
			got[k], late = int64(wire.ErrLeaseExpired), true
		}
	}
	return late
}

// leaseGroups splits objects todo of p into groups to look up and read
// together: as many as rate (bytes per second) reads in a quarter of the
// shortest lease among them, at least one each. A lease that is not
// bounded (0) puts them all in one.
func leaseGroups(p *Pending, todo []int, rate float64) [][]int {
	var groups [][]int
	var cur []int
	var bytes float64
	budget := math.Inf(1)
	for _, i := range todo {
		lease := p.res[i].LeaseMS
		if lease > 0 {
			budget = min(budget, rate*float64(lease)/1000/4)
		}
		size := float64(p.res[i].Size)
		if len(cur) > 0 && bytes+size > budget {
			groups = append(groups, cur)
			cur, bytes = nil, 0
		}
		cur = append(cur, i)
		bytes += size
	}
	return append(groups, cur)
}

// pick returns keys[i] for each i of idx.
func pick(keys []string, idx []int) []string {
	out := make([]string, len(idx))
	for j, i := range idx {
		out[j] = keys[i]
	}
	return out
}
