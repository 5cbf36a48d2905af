// Command indexer is an example of feeding a search index from a Trawl crawl: it reads
// crawl.docs through its own durable consumer and keeps a SQLite FTS5 index.
//
//	indexer [-nats URL] [-db FILE] [-durable NAME]   index documents until interrupted
//	indexer search [-db FILE] [-n 10] QUERY...        print the best matches, url and title
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/trawl/trawl/examples/indexer/internal/cmd"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := cmd.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
