// Command dedup is Trawl's URL-seen test: it reads discovered URLs from crawl.discovered,
// normalises them (session ids stripped by default), drops those already seen (an
// in-process cache of recent URLs in front of a Bloom filter in Redis) and sends the new
// ones to the scheduler shard of their host on crawl.frontier.<shard>.
//
// `dedup healthcheck` asks a running instance's /readyz and exits 0 or 1 (for containers).
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/trawl/trawl/services/dedup/internal/config"
	"github.com/trawl/trawl/services/dedup/internal/service"
	"github.com/trawl/trawl/shared/envconfig"
	"github.com/trawl/trawl/shared/obs"
)

func main() {
	cfg, err := config.Load(&envconfig.Reader{})
	if obs.HealthcheckArg() {
		os.Exit(obs.Probe(context.Background(), cfg.HTTPAddr, os.Stderr))
	}
	if err == nil {
		err = cfg.Validate()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "dedup: configuration:", err)
		os.Exit(2)
	}
	log := obs.NewLogger("dedup", cfg.LogLevel, cfg.LogFormat)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err = run(ctx, cfg, log)
	stop()
	if err != nil {
		log.Error("dedup failed", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	return service.Run(ctx, cfg, log)
}
