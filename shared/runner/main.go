package runner

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"syscall"

	"github.com/trawl/trawl/shared/envconfig"
	"github.com/trawl/trawl/shared/obs"
	"github.com/trawl/trawl/shared/redact"
)

// Exit codes of a service binary.
const (
	ExitOK     = 0 // stopped by a signal, before or after start-up, or ended cleanly
	ExitFailed = 1 // start-up failed on its own, or a loop failed
	ExitConfig = 2 // the configuration is invalid
)

// DefaultGOGC is the garbage collector's target of a Trawl process when GOGC is not set.
// Under BenchmarkPipeline, collection took 5–10% of every service's CPU at Go's default of
// 100 (and allocation assists more); at 400 the pipeline spent about 7% less CPU per page,
// for a heap that may grow to five times the live data instead of twice. The services'
// live heaps are tens of megabytes; GOGC and GOMEMLIMIT in the environment win.
const DefaultGOGC = 400

// SetGCDefault applies DefaultGOGC unless GOGC is set.
func SetGCDefault() {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(DefaultGOGC)
	}
}

// Main is a service binary's main after its configuration is loaded and validated
// (cfgErr). `<binary> healthcheck` asks the running instance's /readyz and exits 0 or 1
// (container images carry no curl). Otherwise it logs as c says, warns once of the TRAWL_*
// variables no Trawl program reads (envconfig.UnknownWarning) and, under a context that
// SIGINT and SIGTERM end, builds the service with newService (the service package's New)
// and runs it (NewThenRun, which holds the exit rule for a signal during start-up).
func Main[S Service](name string, c envconfig.Common, cfgErr error, newService func(ctx context.Context, log *slog.Logger) (S, error)) {
	if obs.HealthcheckArg() {
		os.Exit(obs.Probe(context.Background(), c.HTTPAddr, os.Stderr))
	}
	if len(os.Args) > 1 && slices.Contains([]string{"-h", "-help", "--help", "help"}, os.Args[1]) {
		// A service takes no flags: -h must not start it.
		fmt.Fprintf(os.Stdout, "usage: %s [healthcheck]\n\nThe Trawl %s service, configured by TRAWL_* environment variables (README.md, Configuration).\n"+
			"`%s healthcheck` asks the running instance's /readyz (TRAWL_HTTP_ADDR) and exits 0 or 1.\n", name, name, name)
		os.Exit(ExitOK)
	}
	log := obs.NewLogger(name, c.LogLevel, c.LogFormat)
	// A misspelt setting is otherwise its default in silence; warned of before a bad
	// configuration stops the service, as the misspelling may be why it is bad.
	if w := envconfig.UnknownWarning(os.Environ()); w != "" {
		log.Warn(w)
	}
	// Errors pass through redact as a last guard: a library's error may quote a URL.
	if cfgErr != nil {
		fmt.Fprintf(os.Stderr, "%s: configuration: %v\n", name, redact.Error(cfgErr))
		os.Exit(ExitConfig)
	}
	SetGCDefault()
	soft := SetMemoryLimit(c.MemoryLimit)
	if soft > 0 {
		log.Info("go soft memory limit", "bytes", soft)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := NewThenRun(ctx, log, func(ctx context.Context) (S, error) { return newService(ctx, log) })
	stop()
	if err != nil {
		log.Error(name+" failed", "err", redact.Error(err))
		os.Exit(ExitFailed)
	}
	os.Exit(ExitOK)
}
