// Command trawlctl operates a Trawl crawl: seed it, watch it, pause and resume it, tap its
// streams, and explain what it knows about a URL. "trawlctl help" lists the commands.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/trawl/trawl/trawlctl/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:], cli.IO{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr})
	stop()
	os.Exit(code)
}
