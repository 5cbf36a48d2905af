// Package cmd is the indexer's command line: "indexer" consumes crawl.docs into the index,
// "indexer search" queries it.
package cmd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/trawl/trawl/examples/indexer/internal/consume"
	"github.com/trawl/trawl/examples/indexer/internal/index"
	"github.com/trawl/trawl/shared/envconfig"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/redact"
)

// Run runs the indexer command line and returns the exit status.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	log := slog.New(slog.NewTextHandler(stderr, nil))
	var err error
	if len(args) > 0 && args[0] == "search" {
		err = search(ctx, args[1:], stdout)
	} else {
		err = runIndex(ctx, args, log)
	}
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintln(stderr, "indexer:", err)
		return 2
	}
	fmt.Fprintln(stderr, "indexer:", err)
	return 1
}

var errUsage = errors.New("usage")

func runIndex(ctx context.Context, args []string, log *slog.Logger) error {
	r := &envconfig.Reader{}
	fs := flag.NewFlagSet("indexer", flag.ContinueOnError)
	natsURL := envconfig.LoadConn(r).NATSURL
	fs.Var(redact.Flag(&natsURL), "nats", "NATS server `URL` (TRAWL_NATS_URL)")
	db := fs.String("db", "indexer.db", "SQLite index file")
	durable := fs.String("durable", "indexer", "registered durable consumer name on CRAWL_DOCS: one per index (the crawl waits for it; delete it with the index)")
	batch := fs.Int("batch", 256, "documents written per transaction")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() > 0 || *batch < 1 || *durable == "" {
		return fmt.Errorf("%w: indexer [-nats URL] [-db FILE] [-durable NAME] [-batch N] | indexer search QUERY", errUsage)
	}
	store, err := index.Open(ctx, *db)
	if err != nil {
		return err
	}
	defer store.Close()
	nc, js, err := natsx.Connect(ctx, natsURL, "trawl-indexer", log)
	if err != nil {
		return err
	}
	defer nc.Drain()
	log.Info("indexing crawl.docs", "db", *db, "durable", *durable)
	st, err := consume.Run(ctx, js, store, consume.Options{Durable: *durable, Batch: *batch, Log: log})
	log.Info("stopped", "documents", st.Messages, "upserted", st.Upserted, "removed", st.Removed, "malformed", st.Malformed, "missed", st.Missed)
	return err
}

func search(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("indexer search", flag.ContinueOnError)
	db := fs.String("db", "indexer.db", "SQLite index file")
	n := fs.Int("n", 10, "most results")
	raw := fs.Bool("raw", false, "the query is FTS5 syntax (AND, OR, NEAR, prefix*, column:) instead of words")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() == 0 || *n < 1 {
		return fmt.Errorf("%w: indexer search [-db FILE] [-n N] [-raw] QUERY...", errUsage)
	}
	if _, err := os.Stat(*db); err != nil {
		return fmt.Errorf("index %s: %w (run the indexer first)", *db, err)
	}
	store, err := index.Open(ctx, *db)
	if err != nil {
		return err
	}
	defer store.Close()
	q := index.Query(strings.Join(fs.Args(), " "))
	if *raw {
		q = strings.Join(fs.Args(), " ")
	}
	hits, err := store.Search(ctx, q, *n)
	if err != nil {
		return err
	}
	for _, h := range hits {
		fmt.Fprintf(stdout, "%s\t%s\n", h.URL, h.Title)
	}
	return nil
}
