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

// packageVersion is the gostore Python package's version, given by its
// build (setup.py: -ldflags "-X main.packageVersion=<version>"); empty for
// a plain go build.
var packageVersion string

// version is the package version the binary was built for and the Go
// release. A plain go build has none: it says so, with the commit when the
// build recorded one.
func version() string {
	v := packageVersion
	if v == "" {
		v = "devel (built without a package version: pip install . gives one)"
		if bi, ok := debug.ReadBuildInfo(); ok {
			for _, s := range bi.Settings {
				if s.Key == "vcs.revision" {
					v = "devel+" + s.Value[:min(12, len(s.Value))] + " (built without a package version: pip install . gives one)"
				}
			}
		}
	}
	return v + " " + runtime.Version()
}
