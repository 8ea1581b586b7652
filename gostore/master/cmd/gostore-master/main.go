// Command gostore-master runs the gostore master: the metadata service every
// client talks to. Flags follow Mooncake's master names (see PYTHON_API.md).
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/gostore/gostore/gostore/master/server"
)

func main() {
	opts, err := server.ParseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return // -h / --help printed the flags: asking for help is no error
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
	<-sig
	srv.Close()
}
