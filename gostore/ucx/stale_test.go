package ucx

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/gostore/gostore/gostore/wire"
)

// An endpoint that served a desc before its exposure closed gets an error
// after, never bytes, and its puts change nothing: the memory may belong
// to something else by then (a remount). Over cma in UCX >= 1.16 a get or
// put is the initiator's process_vm_readv/writev, which no target worker
// serves: the closed worker, the unregistered memory stop nothing there,
// only the canary read on each Do does (before a put, after a get). The
// other transports are the control: there the target's worker serves each
// op, and it is gone.
func TestStaleEndpointAfterClose(t *testing.T) {
	for _, tc := range []struct {
		tls   string
		bound time.Duration // how long a failing op may take
	}{
		// No transport here detects the closed peer in UCX 1.13 (shared
		// memory): there the op's deadline ends it.
		{"cma,posix,self", 2 * time.Second},
		{"cma,posix", 2 * time.Second},
		{"cma,tcp", 10 * time.Second},
		{"tcp", 10 * time.Second},
	} {
		for _, write := range []bool{false, true} {
			name := "get"
			if write {
				name = "put"
			}
			t.Run(tc.tls+"/"+name, func(t *testing.T) {
				staleOp(t, tc.tls, write, tc.bound)
			})
		}
	}
}

// staleOp connects, gets once, closes the exposure, gives its memory new
// bytes, then gets (or puts) with the old desc on the endpoint it had.
func staleOp(t *testing.T, tls string, write bool, bound time.Duration) {
	r := newRig(t, tls, 1<<20)
	old := r.x.Desc()
	fill(r.mem, 1)
	got := make([]byte, 4096)
	if err := one(r.w, Op{Desc: old, Parts: []Part{{Host: got}}}); err != nil || !bytes.Equal(got, r.mem[:4096]) {
		t.Fatalf("get before close: %v", err)
	}
	r.w.mu.Lock()
	for _, ep := range r.w.eps {
		t.Logf("endpoint (rechecks the canary each Do: %v):\n%s", ep.recheck, epInfo(ep))
	}
	r.w.mu.Unlock()
	r.x.Close()
	// The memory goes to something else (a remount, another object): what
	// it holds now is not the old desc's.
	fill(r.mem, 2)
	reused := append([]byte(nil), r.mem...)

	buf := make([]byte, 4096)
	if write {
		fill(buf, 3)
	}
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	err := r.w.Do(ctx, []Op{{Desc: old, Offset: 8192, Parts: []Part{{Host: buf}}, Write: write}})[0]
	t.Logf("%swith the old desc: %v", opName(&Op{Write: write})[:4], err)
	if codeOf(err) != wire.ErrTransferFail {
		t.Errorf("err %v, want ErrTransferFail", err)
	}
	if !write {
		// The get's error is what keeps the bytes from the caller: over
		// cma the canary is read after the get (see verify), so the
		// buffer may hold them, the op failed.
		t.Logf("the failed get's buffer holds the reused memory's bytes: %v", bytes.Equal(buf, reused[8192:8192+4096]))
	}
	if !bytes.Equal(r.mem, reused) {
		t.Errorf("the old desc changed the reused memory")
	}
}

// bypasses reads ucp_ep_print_info's lanes (texts from UCX 1.22 and 1.13).
func TestBypasses(t *testing.T) {
	for _, tc := range []struct {
		name, info string
		want       bool
	}{
		{"1.22 cma rma_bw", `#
# UCP endpoint
#
#               peer: <no debug data>
#                 lane[0]:  1:posix/memory.0 md[1]          -> md[1]/posix/sysdev[255] seg 4294967295 am
#                 lane[1]:  2:cma/memory.0 md[2]            -> md[2]/cma/sysdev[255] seg 4294967295 rma_bw#0
#`, true},
		{"1.22 tcp, software RMA", `#                 lane[0]:  1:tcp/lo.0 md[0]                -> md[0]/tcp/sysdev[255] seg 4294967295 am keepalive wireup`, false},
		{"1.13 posix, software RMA", `#                 lane[0]:  1:posix/memory.0 md[1]          -> md[1]/posix/sysdev[255] am am_bw#0
#                  put[0]: 0..<short>..4294967296..<bcopy>..(inf)
#                  get[0]: 0..<bcopy>..(inf)
#                  rma_bw: mds #`, false},
		{"verbs rma", `#                 lane[0]:  3:rc_mlx5/mlx5_0:1.0 md[2] -> md[2]/ib/sysdev[255] rma_bw#0 am wireup`, false},
		{"xpmem rma", `#                 lane[1]:  4:xpmem/memory.0 md[3] -> md[3]/xpmem/sysdev[255] rma rma_bw#0`, true},
		{"unreadable", "", true},
	} {
		if got := bypasses(tc.info); got != tc.want {
			t.Errorf("%s: bypasses %v, want %v", tc.name, got, tc.want)
		}
	}
}
