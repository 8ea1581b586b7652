// context.go: a UCP context, the parent of exposures and workers.

package ucx

/*
#include <stdlib.h>
#include "gs_ucx.h"
*/
import "C"

import (
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"github.com/gostore/gostore/gostore/wire"
)

// ContextOptions choose what a context opens. Empty fields leave UCX's own
// configuration, which honours the process's UCX_* environment.
type ContextOptions struct {
	Devices    []string // UCX NET_DEVICES ("mlx5_0:1"); empty = all
	Transports string   // UCX TLS ("tcp", "posix,self"); "" = UCX's default
	Rails      int      // MAX_RNDV_RAILS; 0 = UCX's default
	// TCPSegSize is UCX's TCP_TX_SEG_SIZE and TCP_RX_SEG_SIZE: 0 =
	// DefaultTCPSegSize, < 0 = UCX's own (8 KiB tx). The process's
	// UCX_TCP_TX_SEG_SIZE / UCX_TCP_RX_SEG_SIZE, when set, win either way.
	TCPSegSize int
}

// DefaultTCPSegSize is the tcp transport's segment size gostore asks for.
// UCX moves RMA over tcp as active messages of one segment each (software
// RMA), one send per segment: at UCX's 8 KiB a 16 MiB put costs ~4 sends
// per 16 KiB and ran at 0.4-0.5 GB/s on loopback; at 64 KiB it ran at
// 1.5-1.9 GB/s (BenchmarkPutGet, bench/ucx.py). Each endpoint's buffers
// grow by the same factor (a few segments per endpoint).
const DefaultTCPSegSize = 64 << 10

// Context is a UCP context with the RMA and WAKEUP features.
type Context struct {
	h    C.ucp_context_h
	info Info

	mu       sync.Mutex // guards children and closed
	children int        // live exposures and workers
	closed   bool
}

// NewContext opens a context (loading libucp first if no Probe did).
func NewContext(opt ContextOptions) (*Context, error) {
	l := open()
	if !l.ok {
		return nil, wire.Errorf(wire.ErrTransferFail, "ucx unavailable: %s", l.reason)
	}
	h, err := createContext(opt)
	if err != nil {
		return nil, err
	}
	return &Context{h: h, info: contextInfo(l, h)}, nil
}

func createContext(opt ContextOptions) (C.ucp_context_h, error) {
	cstr := func(s string) *C.char {
		if s == "" {
			return nil
		}
		return C.CString(s)
	}
	rails := ""
	if opt.Rails > 0 {
		rails = strconv.Itoa(opt.Rails)
	}
	seg := ""
	switch {
	case opt.TCPSegSize == 0:
		seg = strconv.Itoa(DefaultTCPSegSize)
	case opt.TCPSegSize > 0:
		seg = strconv.Itoa(opt.TCPSegSize)
	}
	devs, tls, rl, sg := cstr(strings.Join(opt.Devices, ",")), cstr(opt.Transports), cstr(rails), cstr(seg)
	defer C.free(unsafe.Pointer(sg))
	defer C.free(unsafe.Pointer(devs))
	defer C.free(unsafe.Pointer(tls))
	defer C.free(unsafe.Pointer(rl))
	var h C.ucp_context_h
	var msg [256]C.char
	if st := C.gs_ucx_context_create(devs, tls, rl, sg, &h, &msg[0], C.int(len(msg))); st != C.UCS_OK {
		return nil, wire.Errorf(wire.ErrTransferFail, "ucx context (transports %q, devices %q, rails %d): %s: %s",
			opt.Transports, strings.Join(opt.Devices, ","), opt.Rails, C.GoString(&msg[0]), statusString(st))
	}
	return h, nil
}

// Info is the library's identity and the resources this context opened.
func (c *Context) Info() Info { return c.info.clone() }

// acquire counts a child; false once the context is closed.
func (c *Context) acquire() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.children++
	return true
}

func (c *Context) release() {
	c.mu.Lock()
	c.children--
	c.mu.Unlock()
}

// Close releases the context. With exposures or workers still open it
// refuses (they use it) and logs why: closing children first is the
// caller's duty.
func (c *Context) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	if c.children > 0 {
		slog.Error("ucx: Context.Close refused: exposures or workers still open (close them first)", "open", c.children)
		return
	}
	c.closed = true
	C.gs_ucx_context_destroy(c.h)
}
