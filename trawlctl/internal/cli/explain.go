package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/shared/policy"
	"github.com/trawl/trawl/shared/recrawl"
	"github.com/trawl/trawl/shared/topology"
	"github.com/trawl/trawl/shared/urlnorm"
	"github.com/trawl/trawl/trawlctl/internal/conn"
	"github.com/trawl/trawl/trawlctl/internal/inspect"
)

var explainCmd = &command{
	name:    "explain",
	args:    "URL",
	summary: "what the crawl knows about a URL: seen, scope, robots, frontier, host",
	detail: `
Read-only. Seen: the dedup Bloom filter's bits for the URL. Scope: the URL-only rules
(length, trap, TRAWL_INCLUDE/EXCLUDE); depth and host/domain scope depend on how the URL was
reached. Robots: the fetchers' cached robots.txt entry for the origin. Frontier: the host's
back queue, heap entry and lease, and the front queues (each searched up to -scan
entries). Politeness: the host:<host> hash. Policy: each limit a live site policy can set
(delays, Crawl-delay handling, connections, budgets, depth, include/exclude, recrawl
bounds, User-Agent, headers, cookies and credentials by secret name, render, block), its
value for the URL and what decided it: the rule's scope and origin (its rules file line,
or the change that set it), or the process-wide setting; whether the host is blocked and
how many of its URLs are parked. Recrawl (TRAWL_RECRAWL=adaptive): the URL's
schedule message in CRAWL_RECRAWL (last fetch, validators, interval, next due). Render: whether
the page was rendered in a browser and why (the parser's last decision kept for the URL —
rendered, or read by the shell detector, or refused by a rule — else what TRAWL_RENDER,
TRAWL_RENDER_HOSTS and TRAWL_RENDER_URLS decide). The last fetch outcome cannot be looked up by
URL in JetStream; the report says how to search for it.`,
}

func init() { explainCmd.run = runExplain }

func runExplain(ctx context.Context, e *env, args []string) error {
	fs := e.flags(explainCmd)
	asJSON := fs.Bool("json", false, "print the report as JSON")
	scanLimit := fs.Int("scan", 10000, "most entries of each queue searched for the URL")
	fs.IntVar(&e.cfg.FrontQueues, "queues", e.cfg.FrontQueues, "front queues F (TRAWL_FRONT_QUEUES; 0 = probe all 64)")
	e.connFlags(fs, true, true)
	if err := e.parse(explainCmd, fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usagef("want one URL, got %d arguments", fs.NArg())
	}
	if *scanLimit <= 0 {
		return usagef("-scan %d: want at least 1", *scanLimit)
	}
	if _, err := urlnorm.Normalize(fs.Arg(0)); err != nil {
		return fmt.Errorf("invalid URL %q: %w", fs.Arg(0), err)
	}
	o := inspect.Options{
		Prefix: e.cfg.RedisPrefix, Shards: e.cfg.Shards, BloomParts: e.cfg.BloomParts, FrontQueues: e.cfg.FrontQueues,
		Agent:     e.cfg.RobotsAgent,
		ScanLimit: *scanLimit,
		Limits: inspect.Limits{
			Politeness: e.cfg.Politeness, MaxPagesPerHost: e.cfg.MaxPagesPerHost, Include: e.cfg.Include, Exclude: e.cfg.Exclude,
			Recrawl: e.cfg.Recrawl, UserAgent: e.cfg.UserAgent,
		},
	}
	rule, err := e.cfg.Settings.Rule(e.cfg.MaxDepth)
	if err != nil {
		return err
	}
	o.Rule = rule
	rdb, err := conn.Redis(ctx, e.cfg.Conn)
	if err != nil {
		return err
	}
	defer rdb.Close()
	now := time.Now()
	o.Now = func() time.Time { return now }
	// A report without the rules still says the rest; it says why they are missing.
	if o.Rules, err = policy.NewStore(rdb, e.cfg.RedisPrefix).Load(ctx); err != nil {
		o.Rules, o.RulesNote = nil, err.Error()
	}
	r, err := inspect.Explain(ctx, rdb, o, fs.Arg(0))
	if err != nil {
		return err
	}
	explainRecrawl(ctx, e, r)
	explainRender(ctx, e, rdb, r)
	if *asJSON {
		enc := json.NewEncoder(e.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	return inspect.WriteText(e.Stdout, r, now)
}

// explainRecrawl adds the URL's recrawl history, read from CRAWL_RECRAWL by the URL's
// subject. NATS is asked only for this part: a report without it still says the rest.
func explainRecrawl(ctx context.Context, e *env, r *inspect.Report) {
	nc, js, err := conn.NATS(ctx, e.cfg.Conn)
	if err != nil {
		r.RecrawlNote = "unknown: " + err.Error()
		return
	}
	defer nc.Close()
	h, err := recrawl.Lookup(ctx, js, r.Shard, r.URL)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		r.RecrawlNote = "off (no " + topology.StreamRecrawl + " stream: TRAWL_RECRAWL=off)"
	case err != nil:
		r.RecrawlNote = "unknown: " + err.Error()
	case h.Where == "":
		r.RecrawlNote = "no schedule: queued or being fetched (the state travels with the URL), never fetched, or forgotten after 404/410 twice"
	default:
		r.Recrawl = &h
	}
}
