// Command scheduler is Trawl's URL frontier service: it queues the URLs of its shards in
// Redis and dispatches at most one fetch task per host at a time, politely spaced.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/trawl/trawl/services/scheduler/internal/config"
	"github.com/trawl/trawl/services/scheduler/internal/service"
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
		fmt.Fprintln(os.Stderr, "scheduler: configuration:", err)
		os.Exit(2)
	}
	log := obs.NewLogger("scheduler", cfg.LogLevel, cfg.LogFormat)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err = run(ctx, cfg, log)
	stop()
	if err != nil {
		log.Error("scheduler failed", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	return service.Run(ctx, cfg, log)
}
