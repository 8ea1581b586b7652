// master.go exports the embedded master and the benchmark probes.

package main

/*
#include <stdint.h>
*/
import "C"

import (
	"log/slog"
	"strings"
	"sync/atomic"

	"github.com/gostore/gostore/bench/limits"
	"github.com/gostore/gostore/gostore/master/server"
	"github.com/gostore/gostore/gostore/wire"
)

// masterHere is set once this process runs a master: clients set up from
// then on call it through the netpoller (rpc.ClientOptions.Netpoll says
// why). It is never cleared: a stopped master may be started again.
var masterHere atomic.Bool

//export gs_master_start
func gs_master_start(args *C.char, n C.int) (ret C.int64_t) {
	defer recoverTo("gs_master_start", &ret)
	refreshEnv()
	var flags []string
	for _, a := range strings.Split(goString(args, n), "\n") {
		if a != "" {
			flags = append(flags, a)
		}
	}
	opts, err := server.ParseFlags(flags, nil)
	if err != nil {
		logger.Error("embedded master: bad flags", "err", err)
		return C.int64_t(wire.ErrInvalidParams)
	}
	// The process's logger and level (GOSTORE_LOG_LEVEL, a setup's
	// log_level), not one of the master's own; a level given here (flag
	// or config file) sets that level, as a setup's log_level does.
	opts.Log = logger.With("component", "master")
	if opts.LogLevelGiven {
		var lvl slog.Level
		lvl.UnmarshalText([]byte(opts.LogLevel)) // ParseFlags checked it
		logLevel.Set(lvl)
		levelFromSetup.Store(true)
	}
	srv, err := server.Start(opts)
	if err != nil {
		logger.Error("embedded master: cannot start", "err", err)
		return C.int64_t(wire.ErrInternal)
	}
	masterHere.Store(true)
	return C.int64_t(newHandle(srv))
}

//export gs_master_addr
func gs_master_addr(m C.int64_t, out *C.char, capacity C.int) (ret C.int) {
	defer recoverTo("gs_master_addr", &ret)
	srv, ok := lookup[*server.Server](m)
	if !ok {
		return C.int(wire.ErrInvalidParams)
	}
	return putString(srv.Addr(), out, capacity)
}

//export gs_master_http_addr
func gs_master_http_addr(m C.int64_t, out *C.char, capacity C.int) (ret C.int) {
	defer recoverTo("gs_master_http_addr", &ret)
	srv, ok := lookup[*server.Server](m)
	if !ok {
		return C.int(wire.ErrInvalidParams)
	}
	return putString(srv.HTTPAddr(), out, capacity)
}

//export gs_master_stop
func gs_master_stop(m C.int64_t) (ret C.int) {
	defer recoverTo("gs_master_stop", &ret)
	srv, ok := lookup[*server.Server](m)
	if !ok {
		return C.int(wire.ErrInvalidParams)
	}
	handles.Delete(int64(m))
	srv.Close()
	return 0
}

//export gs_bench_memcpy
func gs_bench_memcpy(size C.uint64_t, iters C.int) (ret C.double) {
	defer recoverTo("gs_bench_memcpy", &ret)
	return C.double(limits.MemcpyGBps(uint64(size), int(iters)))
}

//export gs_bench_tcp_stream
func gs_bench_tcp_stream(size C.uint64_t, iters C.int) (ret C.double) {
	defer recoverTo("gs_bench_tcp_stream", &ret)
	return C.double(limits.LoopbackStreamGBps(uint64(size), int(iters)))
}
