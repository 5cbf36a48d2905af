package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/trawl/trawl/devstack/stack"
	"github.com/trawl/trawl/shared/crawlid"
	"github.com/trawl/trawl/shared/envconfig"
)

// recrawling says the services run with TRAWL_RECRAWL=adaptive (given to trawl-dev's
// environment or set for the stack).
func recrawling(env map[string]string) bool {
	return envconfig.Overlay(env).String("RECRAWL", envconfig.RecrawlOff) == envconfig.RecrawlAdaptive
}

// runContinuous reports progress until ctx ends (Ctrl-C, or -timeout): a recrawling crawl
// is never done, as every fetched URL comes back when it is due, so an empty frontier is
// no end.
func runContinuous(ctx context.Context, st *stack.Stack, every time.Duration, out io.Writer, start time.Time) error {
	fmt.Fprintln(out, "TRAWL_RECRAWL=adaptive: every fetched URL is fetched again when due; the crawl runs until interrupted (Ctrl-C) or -timeout")
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				fmt.Fprintf(out, "\nstopped after %s (-timeout)\n", time.Since(start).Round(100*time.Millisecond))
			}
			return nil
		case <-t.C:
		}
		p, err := readSaying(st, out, start)(ctx)
		if errors.Is(err, crawlid.ErrLost) {
			return err
		}
		if err != nil {
			continue // said; Redis or NATS may come back
		}
		fmt.Fprintf(out, "[%5.1fs] %s\n", time.Since(start).Seconds(), p)
	}
}
