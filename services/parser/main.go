// Command parser reads raw pages from crawl.pages, extracts links and text, and publishes
// documents to crawl.docs and followable outlinks to crawl.discovered.
//
// `parser healthcheck` asks a running instance's /readyz and exits 0 or 1 (for containers).
package main

import (
	"context"
	"log/slog"

	"github.com/trawl/trawl/services/parser/internal/config"
	"github.com/trawl/trawl/services/parser/internal/service"
	"github.com/trawl/trawl/shared/envconfig"
	"github.com/trawl/trawl/shared/runner"
)

func main() {
	cfg, err := envconfig.Valid(config.Load(&envconfig.Reader{}))
	runner.Main("parser", cfg.Common, err, func(ctx context.Context, log *slog.Logger) (*service.Service, error) {
		return service.New(ctx, cfg, log)
	})
}
