package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/shared/redact"
	"github.com/trawl/trawl/shared/seed"
	"github.com/trawl/trawl/shared/topology"
	"github.com/trawl/trawl/trawlctl/internal/conn"
)

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

var seedCmd = &command{
	name:    "seed",
	args:    "[URL...]",
	summary: "publish seed URLs to crawl.discovered (normalised, batched)",
	detail: `
URLs come from the arguments and from -file (one URL a line; blank lines and lines starting
with # are skipped; "-" reads standard input). Every URL is checked before anything is
published, so a typo publishes nothing. Seeds pass the seen test like any URL: a seed
already crawled is dropped.

Priority: the frontier puts a URL in front queue min(depth, F-1) (breadth-first; queue 0
first), so -depth is the lever: depth 0 seeds go first. A deeper seed also has fewer hops
left before TRAWL_MAX_DEPTH.`,
}

func init() { seedCmd.run = runSeed }

func runSeed(ctx context.Context, e *env, args []string) error {
	fs := e.flags(seedCmd)
	depth := fs.Int("depth", 0, "depth the seeds start at (0 = highest priority)")
	var files listFlag
	fs.Var(&files, "file", "read URLs from `FILE` (repeatable; - = stdin)")
	priority := fs.String("priority", "", "not supported: priority follows -depth (see above)")
	e.connFlags(fs, true, false)
	if err := e.parse(seedCmd, fs, args); err != nil {
		return err
	}
	if *priority != "" {
		return usagef("-priority: the frontier derives priority from depth (front queue min(depth, F-1)); use -depth")
	}
	if *depth < 0 {
		return usagef("-depth %d: want at least 0", *depth)
	}
	urls := append([]string(nil), fs.Args()...)
	for _, f := range files {
		got, err := readURLFile(f, e.Stdin)
		if err != nil {
			return err
		}
		urls = append(urls, got...)
	}
	if len(urls) == 0 {
		return usagef("no URLs: give them as arguments or with -file")
	}
	batches, err := seed.Batches(urls, *depth)
	if err != nil {
		return err
	}
	if *depth > e.cfg.MaxDepth {
		e.infof("note: depth %d is beyond TRAWL_MAX_DEPTH=%d: the frontier will count these seeds out of scope", *depth, e.cfg.MaxDepth)
	}
	nc, js, err := conn.NATS(ctx, e.cfg.Conn)
	if err != nil {
		return err
	}
	defer nc.Close()
	n, err := seed.Publish(ctx, js, urls, *depth)
	if errors.Is(err, jetstream.ErrNoStreamResponse) {
		return fmt.Errorf("no stream takes %s on %s: start a Trawl service first (services create the streams)", topology.SubjectDiscovered, redact.URL(e.cfg.NATSURL))
	}
	if err != nil {
		return fmt.Errorf("published %d of %d URLs: %w", n, len(urls), err)
	}
	fmt.Fprintf(e.Stdout, "published %d URLs to %s at depth %d in %d messages\n", n, topology.SubjectDiscovered, *depth, len(batches))
	return nil
}

// readURLFile reads one URL a line, skipping blank lines and # comments.
func readURLFile(name string, stdin io.Reader) ([]string, error) {
	var r io.Reader
	if name == "-" {
		r = stdin
	} else {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	var out []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		out = append(out, line)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	return out, nil
}
