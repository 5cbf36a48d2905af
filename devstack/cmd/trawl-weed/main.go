// Command trawl-weed builds SeaweedFS's weed binary from its Go module (devstack/weedproc)
// when it is not cached yet, and prints its path: `make s3-test` runs it before the tests,
// so the first build (a few minutes) is not counted in their timeout.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/trawl/trawl/devstack/weedproc"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	bin, err := weedproc.Binary(ctx, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "trawl-weed:", err)
		os.Exit(1)
	}
	fmt.Println(bin)
}
