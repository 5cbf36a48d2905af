// Command renderer is Trawl's renderer: it takes render tasks (fetched pages the parser
// found to need JavaScript), loads each in headless Chromium with every request the page
// makes answered by Trawl — robots.txt, scope and the host's shared gap kept, the page
// itself never fetched again — and publishes the rendered DOM with the browser's exchanges
// on crawl.pages. It is stateless, so any number of copies can run side by side.
package main

import (
	"context"
	"log/slog"

	"github.com/trawl/trawl/services/renderer/internal/config"
	"github.com/trawl/trawl/services/renderer/internal/service"
	"github.com/trawl/trawl/shared/envconfig"
	"github.com/trawl/trawl/shared/runner"
)

func main() {
	cfg, err := envconfig.Valid(config.Load(&envconfig.Reader{}))
	runner.Main("renderer", cfg.Common, err, func(ctx context.Context, log *slog.Logger) (*service.Service, error) {
		return service.New(ctx, cfg, log)
	})
}
