// lib.go opens libucp once per process and says what it found.

package ucx

/*
#cgo CFLAGS: -I${SRCDIR}/../../third_party/ucx/include
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "gs_ucx.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"unsafe"

	"github.com/gostore/gostore/gostore/internal/loadonce"
)

// DefaultLibrary is the UCP library opened when Options.Library is empty
// (the system's search path).
const DefaultLibrary = "libucp.so.0"

// EnvLibrary names the environment variable the edge (the bindings) reads
// into Options.Library; this package reads no environment.
const EnvLibrary = "GOSTORE_LIBUCX"

// Options say how the process reaches libucp.
type Options struct {
	// Library is the libucp to open ("": DefaultLibrary).
	Library string
	// LogFile is where UCX writes its own log lines when the process has
	// not said (UCX_LOG_FILE unset): "" means "stderr". UCX's default is
	// stdout, which belongs to the application (gostore-client's ready
	// line, an engine's output, a pipe a parent parses); one UCX error
	// line there corrupts it.
	LogFile string
}

// ErrOpened: Configure came after the library was opened.
var ErrOpened = errors.New("ucx: libucp is already open")

// Info is what Probe (or a Context) found.
type Info struct {
	Available  bool     `json:"available"`
	Reason     string   `json:"reason,omitempty"` // why not available
	Library    string   `json:"library"`          // file libucp was loaded from
	Version    string   `json:"version"`          // ucp_get_version, "1.13.1"
	Components []string `json:"components"`       // UCT components compiled in
	Resources  []string `json:"resources"`        // transport/device opened: "tcp/lo"
	Verbs      bool     `json:"verbs"`            // a verbs transport has a device
	CUDA       bool     `json:"cuda"`             // a cuda_* component is present
	// Limits names the known UCX defects that this library and these
	// transports expose the process to (LimitReaderDeath), for
	// transport_info() and setup's log line; empty when none.
	Limits []string `json:"limits"`
}

// LimitReaderDeath is the Limits entry of a context with tcp: UCX's
// software RMA has the owner's worker send each get's bytes back from its
// handler, and UCX aborts the owner's process (ucp_request.inl,
// ucp_request_try_send's ucs_fatal) when that send meets the reset
// connection of a reader that died with the get in flight. Every UCX read
// for it, 1.13.1 to 1.22.0, has the same code; this package's own Worker
// never closes a connection under its requests (closeEP), so only a
// reader that dies (or one that cancels past CloseDrainBound, then closes)
// can. Verbs moves RMA in the NIC and shared memory never fails the send.
const LimitReaderDeath = "tcp: UCX (1.13.1 to at least 1.22.0) aborts this process when a reader dies " +
	"while this process sends it a get's bytes (UCX's software RMA over tcp: ucp_request.inl " +
	"'unexpected error: Endpoint timeout'); verbs and shared-memory readers cannot cause it; docs/ucx.md, Known limits"

// loaded is what opening the library found: the library's identity, or
// why it is unusable. Probe adds the resources of a throwaway context.
type loaded struct {
	ok      bool
	reason  string
	library string
	version string
	info    Info
}

var lib loadonce.Once[Options, *loaded]

// Configure sets how libucp is opened; it must come before the first Probe
// or NewContext. The library is process-wide (its entry points are C
// globals), so a later Configure changes nothing and returns ErrOpened.
func Configure(opt Options) error {
	if !lib.Configure(opt) {
		return ErrOpened
	}
	return nil
}

func open() *loaded {
	return lib.Get(func(opt Options) *loaded {
		l := load(opt)
		l.info = probeInfo(l)
		return l
	})
}

// Probe opens libucp once, as Configure said, and lists the resources a
// context with UCX's default configuration (the process's UCX_* env)
// opens. It never fails: Info.Available false with a Reason says why.
func Probe() Info { return open().info.clone() }

func load(opt Options) *loaded {
	path := opt.Library
	if path == "" {
		path = DefaultLibrary
	}
	logFile := opt.LogFile
	if logFile == "" {
		logFile = "stderr"
	}
	// libucs reads UCX_LOG_FILE once, when dlopen runs its constructors:
	// set (without overriding the process's own) before that.
	clog := C.CString(logFile)
	defer C.free(unsafe.Pointer(clog))
	C.gs_ucx_default_log_file(clog)
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var msg [512]C.char
	if C.gs_ucx_load(cpath, &msg[0], C.int(len(msg))) != 0 {
		return &loaded{reason: fmt.Sprintf("cannot load UCX library %s: %s", path, C.GoString(&msg[0]))}
	}
	var file [4096]C.char
	C.gs_ucx_library(&file[0], C.int(len(file)))
	l := &loaded{ok: true, library: C.GoString(&file[0])}
	if l.library == "" {
		l.library = path
	} else if real, err := filepath.EvalSymlinks(l.library); err == nil {
		l.library = real
	}
	var major, minor, release C.uint
	C.gs_ucx_version(&major, &minor, &release)
	l.version = fmt.Sprintf("%d.%d.%d", major, minor, release)
	return l
}

func probeInfo(l *loaded) Info {
	if !l.ok {
		return Info{Reason: l.reason, Components: []string{}, Resources: []string{}}
	}
	h, err := createContext(ContextOptions{})
	if err != nil {
		return Info{Reason: err.Error(), Library: l.library, Version: l.version,
			Components: []string{}, Resources: []string{}}
	}
	defer C.gs_ucx_context_destroy(h)
	return contextInfo(l, h)
}

// contextInfo reads what ucp_context_print_info prints for h.
func contextInfo(l *loaded, h C.ucp_context_h) Info {
	var n C.size_t
	text := C.gs_ucx_context_info(h, &n)
	info := Info{Library: l.library, Version: l.version}
	if text != nil {
		info.Components, info.Resources = parseContextInfo(C.GoStringN(text, C.int(n)))
		C.free(unsafe.Pointer(text))
	}
	info.fill()
	return info
}

// fill derives Available, Verbs and CUDA from the lists.
func (in *Info) fill() {
	if in.Components == nil {
		in.Components = []string{}
	}
	if in.Resources == nil {
		in.Resources = []string{}
	}
	in.Limits = []string{}
	tcp := false
	for _, r := range in.Resources {
		tl, _, _ := strings.Cut(r, "/")
		in.Verbs = in.Verbs || verbsTL(tl)
		tcp = tcp || tl == "tcp"
	}
	if tcp {
		in.Limits = append(in.Limits, LimitReaderDeath)
	}
	for _, c := range in.Components {
		if strings.HasPrefix(c, "cuda") {
			in.CUDA = true
		}
	}
	in.Available = len(in.Resources) > 0
	if !in.Available && in.Reason == "" {
		in.Reason = "the UCX context opened no transport resource"
	}
}

// parseContextInfo reads the "component N : name" and "resource N : md M
// dev D flags -- tl/dev" lines of ucp_context_print_info. Unknown lines are
// skipped: the format is UCX's, not a contract.
func parseContextInfo(text string) (components, resources []string) {
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(strings.TrimLeft(line, "#"))
		kind, rest, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		_, val, ok := strings.Cut(rest, ":")
		if !ok {
			continue
		}
		val = strings.TrimSpace(val)
		switch kind {
		case "component":
			if f := strings.Fields(val); len(f) > 0 {
				components = append(components, f[0])
			}
		case "resource":
			if _, tail, ok := strings.Cut(val, "--"); ok {
				if f := strings.Fields(tail); len(f) > 0 {
					resources = append(resources, f[0])
				}
			}
		}
	}
	return components, resources
}

func (in Info) clone() Info {
	in.Components = append([]string{}, in.Components...)
	in.Resources = append([]string{}, in.Resources...)
	in.Limits = append([]string{}, in.Limits...)
	return in
}

// statusString is UCX's text for a status.
func statusString(st C.ucs_status_t) string {
	return C.GoString(C.gs_ucx_status_string(st))
}

// verbsTL reports whether a UCX transport name (rc_mlx5, ud_verbs, dc_mlx5,
// ...) is one of the verbs (RDMA) transports.
func verbsTL(tl string) bool {
	return strings.HasPrefix(tl, "rc_") || strings.HasPrefix(tl, "ud_") || strings.HasPrefix(tl, "dc_")
}

// tcpOrVerbs reports whether a UCX transport detects a dead peer
// (peerFailureAM) and, the same set, serves RMA only through the target's
// worker or NIC, so a closed exposure stops it (bypasses).
func tcpOrVerbs(tl string) bool { return tl == "tcp" || verbsTL(tl) }
