// bypass.go: which endpoints move RMA without the target's worker, and so
// have the canary read before each Do's ops (see verify).

package ucx

/*
#include <stdlib.h>
#include "gs_ucx.h"
*/
import "C"

import (
	"strings"
	"unsafe"
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
// stop an endpoint connected before: then only the canary, read before
// each Do, revokes a desc. Such are the lanes UCX uses for RMA ("rma",
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
			rma = rma || u == "rma" || strings.HasPrefix(u, "rma_bw")
		}
		if rma && !servedRMA(tl) {
			return true
		}
	}
	return lanes == 0
}

// servedRMA: transports whose RMA a closed exposure stops (see bypasses).
func servedRMA(tl string) bool {
	return tl == "tcp" || strings.HasPrefix(tl, "rc_") || strings.HasPrefix(tl, "dc_") || strings.HasPrefix(tl, "ud_")
}
