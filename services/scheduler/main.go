// Command scheduler is Trawl's URL frontier service: it queues the URLs of its shards in
// Redis and dispatches at most one fetch task per host at a time, politely spaced.
//
// `scheduler healthcheck` asks a running instance's /readyz and exits 0 or 1 (for containers).
package main

import (
	"context"
	"log/slog"

	"github.com/trawl/trawl/services/scheduler/internal/config"
	"github.com/trawl/trawl/services/scheduler/internal/service"
	"github.com/trawl/trawl/shared/envconfig"
	"github.com/trawl/trawl/shared/runner"
)

func main() {
	cfg, err := envconfig.Valid(config.Load(&envconfig.Reader{}))
	runner.Main("scheduler", cfg.Common, err, func(ctx context.Context, log *slog.Logger) (*service.Service, error) {
		return service.New(ctx, cfg, log)
	})
}
