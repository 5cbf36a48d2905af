// Command fetcher is Trawl's fetcher: it takes fetch tasks from NATS, honours robots.txt
// (cached in Redis for every fetcher), makes one bounded, address-checked request per task
// and publishes the page, redirect targets and the outcome. It is stateless, so any number
// of copies can run side by side.
//
// `fetcher healthcheck` asks a running instance's /readyz and exits 0 or 1 (for containers).
package main

import (
	"context"
	"log/slog"

	"github.com/trawl/trawl/services/fetcher/internal/config"
	"github.com/trawl/trawl/services/fetcher/internal/service"
	"github.com/trawl/trawl/shared/envconfig"
	"github.com/trawl/trawl/shared/runner"
)

func main() {
	cfg, err := envconfig.Valid(config.Load(&envconfig.Reader{}))
	runner.Main("fetcher", cfg.Common, err, func(ctx context.Context, log *slog.Logger) (*service.Service, error) {
		return service.New(ctx, cfg, log)
	})
}
