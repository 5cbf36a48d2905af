// Command parser reads raw pages from crawl.pages, extracts links and text, and publishes
// documents to crawl.docs and followable outlinks to crawl.discovered.
//
// `parser healthcheck` asks a running instance's /readyz and exits 0 or 1 (for containers).
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/trawl/trawl/services/parser/internal/config"
	"github.com/trawl/trawl/services/parser/internal/service"
	"github.com/trawl/trawl/shared/envconfig"
	"github.com/trawl/trawl/shared/obs"
)

func main() {
	cfg, err := config.Load(&envconfig.Reader{})
	if obs.HealthcheckArg() {
		os.Exit(obs.Probe(context.Background(), cfg.Common.HTTPAddr, os.Stderr))
	}
	if err == nil {
		err = cfg.Validate()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "parser: configuration:", err)
		os.Exit(2)
	}
	log := obs.NewLogger("parser", cfg.Common.LogLevel, cfg.Common.LogFormat)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err = run(ctx, cfg, log)
	stop()
	if err != nil {
		log.Error("parser failed", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	return service.Run(ctx, cfg, log)
}
