// Command dedup is Trawl's URL-seen test: it reads discovered URLs from crawl.discovered,
// normalises them (session ids stripped by default), drops those already seen (an
// in-process cache of recent URLs in front of a Bloom filter in Redis) and sends the new
// ones to the scheduler shard of their host on crawl.frontier.<shard>.
//
// `dedup healthcheck` asks a running instance's /readyz and exits 0 or 1 (for containers).
package main

import (
	"context"
	"log/slog"

	"github.com/trawl/trawl/services/dedup/internal/config"
	"github.com/trawl/trawl/services/dedup/internal/service"
	"github.com/trawl/trawl/shared/envconfig"
	"github.com/trawl/trawl/shared/runner"
)

func main() {
	cfg, err := envconfig.Valid(config.Load(&envconfig.Reader{}))
	runner.Main("dedup", cfg.Common, err, func(ctx context.Context, log *slog.Logger) (*service.Service, error) {
		return service.New(ctx, cfg, log)
	})
}
