// Command gostore-master runs the gostore master: the metadata service every
// client talks to. Flags follow Mooncake 0.3.13's master (docs/master-flags.md).
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"syscall"

	"github.com/gostore/gostore/gostore/master/server"
)

func main() {
	opts, err := server.ParseFlags(os.Args[1:], os.Stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return // --help printed the flags: asking for help is no error
	case errors.Is(err, server.ErrVersion):
		fmt.Println("gostore-master", version())
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gostore-master:", err)
		os.Exit(2)
	}
	srv, err := server.Start(opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gostore-master:", err)
		os.Exit(1)
	}
	// Tests and scripts read this line to learn the ports when 0 was asked for.
	fmt.Printf("gostore-master listening rpc=%s http=%s\n", srv.Addr(), srv.HTTPAddr())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	select {
	case <-sig:
		srv.Close()
	case <-srv.Done():
		// It stepped down (--enable_ha: its leadership lapsed); a
		// supervisor starting it again makes it a standby.
		fmt.Fprintln(os.Stderr, "gostore-master: leadership lost, stepped down")
		os.Exit(3)
	}
}

// version is the module version the binary was built from ("(devel)" for a
// build from a checkout) and the Go release.
func version() string {
	v := "(unknown)"
	if bi, ok := debug.ReadBuildInfo(); ok {
		v = bi.Main.Version
	}
	return v + " " + runtime.Version()
}
