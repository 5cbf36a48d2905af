// Command parser reads raw pages from crawl.pages, extracts links and text, and publishes
// documents to crawl.docs and followable outlinks to crawl.discovered.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/trawl/trawl/services/parser/internal/config"
	"github.com/trawl/trawl/services/parser/internal/service"
	"github.com/trawl/trawl/shared/envconfig"
	"github.com/trawl/trawl/shared/obs"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "parser:", err)
		os.Exit(1)
	}
}

func run() error {
	cfg, err := config.Load(&envconfig.Reader{})
	// Report unreadable and invalid values together, so one failed start lists them all.
	if err := errors.Join(err, cfg.Validate()); err != nil {
		return err
	}
	log := obs.NewLogger("parser", cfg.Common.LogLevel, cfg.Common.LogFormat)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return service.Run(ctx, cfg, log)
}
