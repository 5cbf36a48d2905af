// Command fetcher is Trawl's fetcher: it takes fetch tasks from NATS, honours robots.txt
// (cached in Redis for every fetcher), makes one bounded, address-checked request per task
// and publishes the page, redirect targets and the outcome. It is stateless, so any number
// of copies can run side by side.
//
// `fetcher healthcheck` asks a running instance's /readyz and exits 0 or 1 (for containers).
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/trawl/trawl/services/fetcher/internal/config"
	"github.com/trawl/trawl/services/fetcher/internal/service"
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
		fmt.Fprintln(os.Stderr, "fetcher: configuration:", err)
		os.Exit(2)
	}
	log := obs.NewLogger("fetcher", cfg.Common.LogLevel, cfg.Common.LogFormat)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err = run(ctx, cfg, log)
	stop()
	if err != nil {
		log.Error("fetcher failed", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	return service.Run(ctx, cfg, log)
}
