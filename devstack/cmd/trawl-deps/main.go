// Command trawl-deps installs the system programs named on its command line (redis-server,
// chromium, dockerd, docker-compose, …) when they are missing, so `make test`, `make run` and
// `make compose-test` work on a fresh machine.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/trawl/trawl/devstack/sysdeps"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var progs []sysdeps.Program
	for _, name := range os.Args[1:] {
		p, err := sysdeps.Lookup(name)
		if err != nil {
			fmt.Fprintln(os.Stderr, "trawl-deps:", err)
			os.Exit(2)
		}
		progs = append(progs, p)
	}
	if err := sysdeps.Ensure(ctx, os.Stderr, progs...); err != nil {
		fmt.Fprintln(os.Stderr, "trawl-deps:", err)
		os.Exit(1)
	}
}
