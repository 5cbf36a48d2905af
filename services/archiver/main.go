// Command archiver reads raw pages from crawl.pages and writes them as WARC/1.1 files,
// with a CDXJ index beside each, for replay tools and datasets.
//
// `archiver healthcheck` asks a running instance's /readyz and exits 0 or 1 (for containers).
package main

import (
	"context"
	"log/slog"

	"github.com/trawl/trawl/services/archiver/internal/config"
	"github.com/trawl/trawl/services/archiver/internal/service"
	"github.com/trawl/trawl/shared/envconfig"
	"github.com/trawl/trawl/shared/runner"
)

func main() {
	cfg, err := envconfig.Valid(config.Load(&envconfig.Reader{}))
	runner.Main("archiver", cfg.Common, err, func(ctx context.Context, log *slog.Logger) (*service.Service, error) {
		return service.New(ctx, cfg, log)
	})
}
