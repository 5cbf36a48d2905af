// Command trawl-dev runs a whole crawl on one machine without Docker: an embedded NATS
// JetStream server, a local redis-server, the four services, and — when no seeds are
// given — the built-in demo web. It prints progress while it runs and a summary when the
// frontier is empty and nothing is in flight, then exits 0. `make run` calls it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/trawl/trawl/devstack/redisproc"
	"github.com/trawl/trawl/devstack/stack"
	"github.com/trawl/trawl/devstack/synthweb"
	"github.com/trawl/trawl/devstack/sysdeps"
	"github.com/trawl/trawl/shared/envconfig"
)

type options struct {
	bin          string
	seeds        []string
	fetchers     int
	renderers    int
	logs         bool
	every        time.Duration
	timeout      time.Duration
	installRedis bool
	dir          string
	demoHosts    int
	parkAfter    time.Duration
	// natsMaxStore, if set, is JetStream's file storage limit instead of three quarters of
	// the free disk: tests set a logical one, so that the machine's free disk does not
	// decide whether the services can set their stream caps aside.
	natsMaxStore int64
}

func main() {
	var o options
	var seeds string
	flag.StringVar(&o.bin, "bin", "bin", "directory holding the service binaries (built into it when missing)")
	flag.StringVar(&seeds, "seeds", os.Getenv("SEEDS"), "seed URLs, space- or comma-separated (default: $SEEDS; none = the demo web)")
	flag.IntVar(&o.fetchers, "fetchers", 1, "fetcher processes")
	flag.IntVar(&o.renderers, "renderers", -1, "renderer processes, which render pages in headless Chromium; more than 0 turns rendering on (TRAWL_RENDER=auto unless set) (default: one when TRAWL_RENDER is auto or always, else none)")
	flag.BoolVar(&o.logs, "logs", false, "copy every service's log lines to stderr")
	flag.DurationVar(&o.every, "every", 2*time.Second, "progress report interval")
	flag.DurationVar(&o.timeout, "timeout", 0, "give up after this long (0 = never)")
	flag.BoolVar(&o.installRedis, "install-redis", false, "only make sure redis-server is installed, then exit")
	flag.StringVar(&o.dir, "dir", "", "keep NATS, Redis and logs in this directory, and resume the crawl kept there (default: a temporary one)")
	flag.IntVar(&o.demoHosts, "demo-hosts", 20, "ordinary hosts of the demo web")
	flag.DurationVar(&o.parkAfter, "park-after", 0, "finish once only hosts due more than this far ahead remain (backing off, Crawl-delay); list them and leave them queued for a later run with the same -dir (0 = wait for every host)")
	flag.Parse()
	o.seeds = envconfig.SplitList(seeds)
	// The services get this whole environment: a misspelt setting would be their default
	// in silence, and their own warnings go to log files.
	if w := envconfig.UnknownWarning(os.Environ()); w != "" {
		fmt.Fprintln(os.Stderr, "trawl-dev: warning:", w)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "trawl-dev:", err)
		if errors.Is(err, context.Canceled) {
			os.Exit(130)
		}
		os.Exit(1)
	}
}

func run(ctx context.Context, o options, out io.Writer) error {
	if _, err := redisproc.EnsureInstalled(ctx, os.Stderr); err != nil {
		return err
	}
	if o.installRedis {
		return nil
	}
	if err := ensureBinaries(ctx, o.bin); err != nil {
		return err
	}
	env := map[string]string{}
	replicas := map[string]int{"fetcher": o.fetchers}
	if o.renderers >= 0 {
		replicas[stack.Renderer] = o.renderers
		if o.renderers > 0 {
			setDefault(env, "TRAWL_RENDER", "auto")
		}
	}
	rendering := stack.Renderers(env, replicas) > 0
	if rendering {
		if err := sysdeps.Ensure(ctx, os.Stderr, sysdeps.Known["chromium"]); err != nil {
			return err
		}
	}
	seeds := o.seeds
	if len(seeds) == 0 {
		cfg := demoConfig(o.demoHosts)
		// With renderers, the demo web has its single-page app, whose pages only a
		// rendering crawl finds.
		cfg.SPA, cfg.Render = rendering, rendering
		portFile := ""
		if o.dir != "" {
			// A crawl resumed from -dir holds the demo web's URLs, port included: serve it
			// on the same port again.
			portFile = filepath.Join(o.dir, "demo-web.port")
			if b, err := os.ReadFile(portFile); err == nil {
				if cfg.Port, err = strconv.Atoi(strings.TrimSpace(string(b))); err != nil {
					return fmt.Errorf("demo web: %s: %w", portFile, err)
				}
			}
		}
		web, err := synthweb.Start(ctx, cfg)
		if err != nil {
			return fmt.Errorf("demo web: %w", err)
		}
		defer web.Close()
		if portFile != "" {
			if err := os.MkdirAll(o.dir, 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(portFile, []byte(strconv.Itoa(web.Port())+"\n"), 0o644); err != nil {
				return fmt.Errorf("demo web: %w", err)
			}
		}
		seeds = web.Seeds()
		// The demo web lives on loopback, which the fetcher refuses by default; and it is
		// ours, so it can take a brisker pace than a real site.
		setDefault(env, "TRAWL_ALLOW_CIDRS", "127.0.0.0/8")
		setDefault(env, "TRAWL_MIN_DELAY", "200ms")
		setDefault(env, "TRAWL_MAX_DEPTH", "8")
		setDefault(env, "TRAWL_RETRY_BACKOFF", "500ms")
		setDefault(env, "TRAWL_MAX_BACKOFF", "5s")
		setDefault(env, "TRAWL_MAX_RETRIES", "2")
		setDefault(env, "TRAWL_ROBOTS_ERROR_TTL", "1s")
		fmt.Fprintf(out, "demo web: %d hosts on %s … (robots rules, crawl-delay, redirects, errors, a slow host, a calendar trap)\n", len(web.Hosts()), web.Hosts()[0].Origin)
	}
	var logs io.Writer
	if o.logs {
		logs = os.Stderr
	}
	fmt.Fprintf(out, "starting NATS JetStream, redis-server and the services (%d fetcher(s), %d renderer(s))…\n", o.fetchers, stack.Renderers(env, replicas))
	if dir := stack.ArchiveDir(env); dir != "" {
		fmt.Fprintf(out, "archiving: WARC files and their CDXJ indexes go to %s (the file being written ends in .open until the stop)\n", dir)
	}
	st, err := stack.Start(ctx, stack.Options{
		BinDir: o.bin,
		// NATS runs as a process of its own, as in compose, rather than inside trawl-dev.
		NATSBin:      filepath.Join(o.bin, stack.NATSServer),
		NATSMaxStore: o.natsMaxStore,
		Dir:          o.dir,
		Env:          env,
		Replicas:     replicas,
		// TRAWL_FSYNC as the environment (or the demo's defaults) gives it; an invalid one
		// stops the start with what to set.
		Durability: envconfig.LoadDurability(envconfig.Overlay(env)),
		Logs:       logs,
		Log:        slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return err
	}
	defer func() {
		fmt.Fprintln(out, "stopping…")
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := st.Close(cctx); err != nil {
			fmt.Fprintln(os.Stderr, "trawl-dev: stop:", err)
		}
	}()
	fmt.Fprintf(out, "nats %s · redis %s · logs in %s\n", st.NATSURL(), st.Redis().URL(), filepath.Join(st.Dir(), "logs"))
	if o.dir != "" {
		fmt.Fprintf(out, "crawl state in %s: after a crash, the same command resumes it\n", o.dir)
	}
	for _, p := range st.Procs() {
		fmt.Fprintf(out, "  %-12s http://%s/metrics\n", p.ID(), p.HTTPAddr)
	}
	start := time.Now()
	if err := st.Seed(ctx, seeds); err != nil {
		return err
	}
	fmt.Fprintf(out, "seeded %d URL(s)\n", len(seeds))

	wctx := ctx
	if o.timeout > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, o.timeout)
		defer cancel()
	}
	if recrawling(env) {
		return runContinuous(wctx, st, o.every, out, start)
	}
	var last stack.Progress
	final, parked, err := stack.WaitIdleOrParked(wctx, o.every, o.parkAfter, readSaying(st, out, start), func(p stack.Progress) {
		elapsed := time.Since(start)
		rate := float64(p.Fetched-last.Fetched) / p.At.Sub(orStart(last.At, start)).Seconds()
		fmt.Fprintf(out, "[%5.1fs] %s | %.1f pages/s\n", elapsed.Seconds(), p, rate)
		last = p
		for _, proc := range st.Procs() {
			if exited, perr := proc.Exited(); exited {
				fmt.Fprintf(out, "warning: %s exited (%v)\n%s\n", proc.ID(), perr, st.LogTail(proc, 10))
			}
		}
	})
	if err != nil {
		return err
	}
	printSummary(out, final, time.Since(start), parked)
	if parked {
		hosts, err := st.Parked(ctx, maxParkedHosts, maxParkedURLs)
		if err != nil {
			return err
		}
		printParked(out, final, hosts, o)
	}
	return nil
}

// readSaying reads the crawl's progress and prints a line for each reading that fails:
// while the frontier cannot be read (Redis unreachable) the crawl is not over, and the
// user sees why no progress line comes.
func readSaying(st *stack.Stack, out io.Writer, start time.Time) func(context.Context) (stack.Progress, error) {
	return func(ctx context.Context) (stack.Progress, error) {
		p, err := st.Progress(ctx)
		if err != nil && ctx.Err() == nil {
			fmt.Fprintf(out, "[%5.1fs] progress unreadable, so the crawl is not over: %v\n", time.Since(start).Seconds(), err)
		}
		return p, err
	}
}

// Bounds of the parked hosts listed in the summary.
const (
	maxParkedHosts = 50
	maxParkedURLs  = 10
)

func printParked(out io.Writer, p stack.Progress, hosts []stack.ParkedHost, o options) {
	fmt.Fprintf(out, "\nparked: %d URL(s) stay queued on %d host(s) due more than %s from now:\n", p.Queued, p.Waits.Waiting, o.parkAfter)
	for _, h := range hosts {
		fmt.Fprintf(out, "  %s: %d queued, %s until %s", h.Host, h.Queued, h.Reason, h.Next.Format(time.TimeOnly))
		if h.LastError != "" {
			fmt.Fprintf(out, ", last error %s", h.LastError)
		}
		fmt.Fprintln(out)
		for _, e := range h.URLs {
			fmt.Fprintf(out, "    %s\n", e.URL)
		}
		if n := h.Queued - int64(len(h.URLs)); n > 0 {
			fmt.Fprintf(out, "    … and %d more\n", n)
		}
	}
	if n := p.Waits.Waiting - int64(len(hosts)); n > 0 {
		fmt.Fprintf(out, "  … and %d more host(s)\n", n)
	}
	if o.dir != "" {
		fmt.Fprintf(out, "they resume with the same -dir %s\n", o.dir)
	} else {
		fmt.Fprintln(out, "the crawl state is in a temporary directory and goes with it; run with -dir (make run DIR=…) to resume parked hosts later")
	}
}

func orStart(t, start time.Time) time.Time {
	if t.IsZero() {
		return start
	}
	return t
}

func printSummary(out io.Writer, p stack.Progress, took time.Duration, parked bool) {
	verb := "finished in"
	if parked {
		verb = "parked after"
	}
	fmt.Fprintf(out, "\ncrawl %s %s\n", verb, took.Round(100*time.Millisecond))
	rows := []struct {
		k string
		v int64
	}{
		{"accepted into the frontier", p.Accepted},
		{"fetched", p.Fetched},
		{"failed (after retries)", p.Failed},
		{"disallowed by robots.txt", p.Disallowed},
		{"out of scope", p.OutOfScope},
		{"over budget", p.OverBudget},
		{"messages on crawl.pages", int64(p.PageMsgs)},
		{"documents published (crawl.docs)", int64(p.Docs)},
	}
	for _, r := range rows {
		fmt.Fprintf(out, "  %-36s %d\n", r.k, r.v)
	}
	fmt.Fprintf(out, "  %-36s %.1f\n", "pages/s", float64(p.Fetched)/took.Seconds())
}

func demoConfig(hosts int) synthweb.Config {
	c := synthweb.DefaultConfig()
	c.Hosts = hosts
	c.CrawlDelay = 500 * time.Millisecond
	// Home pages embed requisites, which the crawl fetches while an archiver runs
	// (TRAWL_ARCHIVE_DIR), so the demo's WARC files replay with them.
	c.Requisites = true
	return c
}

func setDefault(env map[string]string, k, v string) {
	if os.Getenv(k) == "" {
		env[k] = v
	}
}

// ensureBinaries builds the services when bin lacks any of them, so `trawl-dev` also
// works when run with `go run`.
func ensureBinaries(ctx context.Context, bin string) error {
	var missing []string
	for _, s := range append(stack.Services, stack.Archiver, stack.Renderer, stack.NATSServer) {
		if _, err := os.Stat(filepath.Join(bin, s)); err != nil {
			missing = append(missing, s)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	root, err := stack.RepoRoot()
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "building %s into %s…\n", strings.Join(missing, ", "), bin)
	abs, err := filepath.Abs(bin)
	if err != nil {
		return err
	}
	return stack.Build(ctx, root, abs)
}
