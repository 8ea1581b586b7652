// bypass.go: which endpoints move RMA without the target's worker, and so
// have the canary read on each Do (before its puts, after a Do's gets; see
// verify), and that read.

package ucx

/*
#include <stdlib.h>
#include "gs_ucx.h"
*/
import "C"

import (
	"bytes"
	"strings"
	"time"
	"unsafe"

	"github.com/gostore/gostore/gostore/wire"
)

// epInfo is ucp_ep_print_info's text for ep ("" when it could not be
// captured).
func epInfo(ep *endpoint) string {
	var n C.size_t
	text := C.gs_ucx_ep_info(ep.gs.ep, &n)
	if text == nil {
		return ""
	}
	defer C.free(unsafe.Pointer(text))
	return C.GoStringN(text, C.int(n))
}

// bypasses reports whether an endpoint whose ucp_ep_print_info text is
// info may move a put or get without the target's worker, so that closing
// the exposure (its worker destroyed, its memory unregistered) does not
// stop an endpoint connected before: then only the canary, read on each
// Do, revokes a desc. Such are the lanes UCX uses for RMA ("rma",
// "rma_bw#N") on a transport that copies with the initiator's CPU or
// device (cma in UCX >= 1.16: process_vm_readv/writev; knem, xpmem,
// cuda_ipc, self alike). Not: tcp (its RMA, software or zero-copy, is done
// by the target's worker, gone with the exposure), verbs (mem_unmap
// invalidates the rkey in the NIC), and an endpoint with no RMA lane
// (UCX's software RMA over active messages: the target's worker serves
// each op). Conservative: text it cannot read (no lane line) bypasses.
func bypasses(info string) bool {
	lanes := 0
	for _, line := range strings.Split(info, "\n") {
		f := strings.Fields(strings.TrimLeft(line, "# "))
		if len(f) < 2 || !strings.HasPrefix(f[0], "lane[") {
			continue
		}
		lanes++
		_, res, _ := strings.Cut(f[1], ":") // "2:cma/memory.0"
		tl, _, _ := strings.Cut(res, "/")
		rma := false
		for _, u := range f[2:] {
			rma = rma || strings.HasPrefix(u, "rma")
		}
		if rma && !tcpOrVerbs(tl) {
			return true
		}
	}
	return lanes == 0
}

// canaryCheck is one read of a desc's canary on an endpoint and the ops
// (indices into the Do's) that it vouches for.
type canaryCheck struct {
	rk  *remoteKey
	ep  *endpoint
	d   *desc
	got []byte
	ops []int
}

func (c *canaryCheck) getsOnly(ops []Op) bool {
	for _, i := range c.ops {
		if ops[i].Write {
			return false
		}
	}
	return true
}

// readCanary posts c's read into c.got; ok says it returned a request to
// wait for (else it ended, its error, if any, set on c's ops). Always
// through C memory: the get is small, and a request to a peer that cannot
// fail may outlive the Do. w.mu held.
func (w *Worker) readCanary(c *canaryCheck, ops []Op, descs []*desc, errs []error) (r request, ok bool) {
	r = request{ep: c.ep, into: c.got, bounce: C.calloc(1, nonceLen), ops: c.ops}
	st := C.gs_ucx_rma(c.ep.gs.ep, 0, C.uintptr_t(uintptr(r.bounce)), nonceLen, C.uint64_t(c.d.canary), c.rk.canary, MemHost.ucs(), &r.req)
	if r.req == nil {
		r.end(st)
		if st != C.UCS_OK {
			for _, i := range c.ops {
				setErr(errs, i, w.opError(&ops[i], descs[i], st))
			}
		}
		return r, false
	}
	r.posted = time.Now()
	return r, true
}

// judge compares what c read (its request ended) with the desc's nonce:
// when they differ the exposure is closed, c's ops fail and the endpoint
// goes. It reports whether c vouched for its ops; not when every one of
// them had already failed (the read's own failure among them). w.mu held.
func (w *Worker) judge(c *canaryCheck, ops []Op, descs []*desc, errs []error) bool {
	live := false
	for _, i := range c.ops {
		live = live || errs[i] == nil
	}
	if !live {
		return false
	}
	if !bytes.Equal(c.got, c.d.nonce[:]) {
		for _, i := range c.ops {
			setErr(errs, i, wire.Errorf(wire.ErrTransferFail, "ucx %s %#x+%d: the exposure is closed (its canary no longer holds the desc's nonce)", opName(&ops[i]), descs[i].base, ops[i].Offset))
		}
		w.fail(c.ep)
		return false
	}
	return true
}
