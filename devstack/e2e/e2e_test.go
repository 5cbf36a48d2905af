// Package e2e crawls the synthetic web with the four real service binaries, an embedded
// NATS JetStream server and a real redis-server, and checks the design's invariants from
// the web server's own request log.
package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/trawl/trawl/devstack/stack"
	"github.com/trawl/trawl/devstack/synthweb"
)

var binDir string

func TestMain(m *testing.M) {
	os.Exit(func() int {
		root, err := stack.RepoRoot()
		if err != nil {
			fmt.Fprintln(os.Stderr, "e2e:", err)
			return 1
		}
		dir, err := os.MkdirTemp("", "trawl-e2e-bin-")
		if err != nil {
			fmt.Fprintln(os.Stderr, "e2e:", err)
			return 1
		}
		defer os.RemoveAll(dir)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if err := stack.Build(ctx, root, dir); err != nil {
			fmt.Fprintln(os.Stderr, "e2e:", err)
			return 1
		}
		// The operator CLI and the example indexer, for the tests of the tools around a crawl.
		build := exec.CommandContext(ctx, "go", "build", "-o", dir+string(os.PathSeparator), "./trawlctl", "./examples/indexer")
		build.Dir = root
		if out, err := build.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: build trawlctl and the indexer: %v\n%s", err, out)
			return 1
		}
		binDir = dir
		return m.Run()
	}())
}

// crawlEnv is the politeness and retry setup of the tests: small delays so a crawl takes
// seconds, but every rule of a real crawl in force.
type crawlEnv struct {
	MinDelay    time.Duration
	DelayFactor float64
	MaxDepth    int
	MaxRetries  int
}

func (c crawlEnv) vars() map[string]string {
	return map[string]string{
		"TRAWL_ALLOW_CIDRS":      "127.0.0.0/8",
		"TRAWL_MIN_DELAY":        c.MinDelay.String(),
		"TRAWL_DELAY_FACTOR":     strconv.FormatFloat(c.DelayFactor, 'f', -1, 64),
		"TRAWL_MAX_DEPTH":        strconv.Itoa(c.MaxDepth),
		"TRAWL_MAX_RETRIES":      strconv.Itoa(c.MaxRetries),
		"TRAWL_RETRY_BACKOFF":    "200ms",
		"TRAWL_MAX_BACKOFF":      "2s",
		"TRAWL_LEASE_TTL":        "20s",
		"TRAWL_ACK_WAIT":         "5s",
		"TRAWL_FETCH_TIMEOUT":    "5s",
		"TRAWL_ROBOTS_AGENT":     synthweb.ProductToken,
		"TRAWL_ROBOTS_ERROR_TTL": "1s",
		"TRAWL_LOG_LEVEL":        "info",
	}
}

type crawlResult struct {
	stack    *stack.Stack // still running until the test ends
	web      *synthweb.Web
	progress stack.Progress
	took     time.Duration
	reqs     []synthweb.Request
}

func crawl(t *testing.T, wcfg synthweb.Config, env crawlEnv, opts stack.Options, during func(*stack.Stack)) crawlResult {
	t.Helper()
	var d func(*stack.Stack, *synthweb.Web)
	if during != nil {
		d = func(st *stack.Stack, _ *synthweb.Web) { during(st) }
	}
	return crawlWeb(t, wcfg, env, opts, d)
}

// crawlWeb is crawl whose during also gets the web.
func crawlWeb(t *testing.T, wcfg synthweb.Config, env crawlEnv, opts stack.Options, during func(*stack.Stack, *synthweb.Web)) crawlResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	web, err := synthweb.Start(ctx, wcfg)
	if err != nil {
		t.Fatalf("synthetic web: %v", err)
	}
	t.Cleanup(func() { web.Close() })
	opts.Dir = t.TempDir()
	if opts.Env == nil {
		opts.Env = map[string]string{}
	}
	for k, v := range env.vars() {
		if _, set := opts.Env[k]; !set {
			opts.Env[k] = v
		}
	}
	st := startStack(t, ctx, opts)
	start := time.Now()
	if err := st.Seed(ctx, web.Seeds()); err != nil {
		t.Fatal(err)
	}
	if during != nil {
		during(st, web)
	}
	p, err := st.WaitIdle(ctx, 250*time.Millisecond, nil)
	if err != nil {
		t.Fatalf("crawl did not finish: %v", err)
	}
	for _, proc := range st.Procs() {
		if exited, perr := proc.Exited(); exited && !proc.Stopped() {
			t.Errorf("%s exited during the crawl: %v", proc.ID(), perr)
		}
	}
	return crawlResult{stack: st, web: web, progress: p, took: time.Since(start), reqs: web.Requests()}
}

// checkInvariants asserts the design's invariants 1–4 from the server's request log.
func checkInvariants(t *testing.T, r crawlResult, env crawlEnv, maxDuplicates int) {
	t.Helper()
	exp := r.web.Expected(env.MaxDepth)
	problems := exp.Check(r.reqs, r.web.Origin, env.MaxRetries)
	dups := 0
	for _, p := range problems {
		if maxDuplicates > 0 && len(p) > 8 && p[:8] == "fetched " {
			dups++
			continue
		}
		t.Errorf("request log: %s", p)
	}
	if dups > maxDuplicates {
		t.Errorf("%d URLs fetched more than once, design allows %d", dups, maxDuplicates)
	}
	for _, v := range synthweb.Overlaps(r.reqs) {
		t.Errorf("politeness: overlapping requests: %s", v)
	}
	delay := map[string]time.Duration{}
	for _, h := range r.web.Hosts() {
		delay[h.Addr] = max(env.MinDelay, h.CrawlDelay)
	}
	for _, v := range synthweb.Gaps(r.reqs, func(host string) time.Duration { return delay[host] }) {
		t.Errorf("politeness: requests too close: %s", v)
	}
	// Adaptive politeness: after a slow response the host waits k times as long.
	last := map[string]synthweb.Request{}
	for _, q := range r.reqs {
		if prev, ok := last[q.Host]; ok {
			want := time.Duration(env.DelayFactor * float64(prev.End.Sub(prev.Start)))
			if gap := q.Start.Sub(prev.End); gap < want {
				t.Errorf("politeness: %s %s came %s after a %s response, want ≥ %s", q.Host, q.Path, gap, prev.End.Sub(prev.Start), want)
			}
		}
		last[q.Host] = q
	}
	// robots.txt is fetched once per host and shared by every fetcher, except where it
	// answers 5xx and is retried.
	robots := map[string]int{}
	for _, q := range r.reqs {
		if q.Path == "/robots.txt" {
			robots[q.Host]++
		}
	}
	for _, h := range r.web.Hosts() {
		n := robots[h.Addr]
		if exp.ForbiddenHosts[h.Addr] {
			if n == 0 {
				t.Errorf("robots.txt of %s (5xx) never requested", h.Addr)
			}
			continue
		}
		if n > 1+maxDuplicates {
			t.Errorf("robots.txt of %s requested %d times", h.Addr, n)
		}
	}
	p := r.progress
	if p.Accepted != p.Terminal() {
		t.Errorf("accounting: %d URLs accepted but %d reached a terminal state (%+v)", p.Accepted, p.Terminal(), p)
	}
	if want := int64(len(exp.Fetch) - len(exp.Browser)); p.Fetched < want {
		t.Errorf("frontier counted %d fetched, the web expects at least %d", p.Fetched, want)
	}
}

func testWeb() synthweb.Config {
	c := synthweb.DefaultConfig()
	c.Hosts = 16
	c.PagesPerHost = 16
	c.CrawlDelay = 300 * time.Millisecond
	c.SlowDelay = 80 * time.Millisecond
	return c
}

func testEnv() crawlEnv {
	return crawlEnv{MinDelay: 100 * time.Millisecond, DelayFactor: 2, MaxDepth: 5, MaxRetries: 2}
}

func TestCrawlSyntheticWeb(t *testing.T) {
	t.Parallel()
	env := testEnv()
	r := crawl(t, testWeb(), env, stack.Options{}, nil)
	checkInvariants(t, r, env, 0)
	hosts := map[string]bool{}
	for _, q := range r.reqs {
		hosts[q.Host] = true
	}
	t.Logf("crawled %d requests (%d fetched pages) over %d hosts in %s", len(r.reqs), r.progress.Fetched, len(hosts), r.took.Round(time.Millisecond))
	if r.progress.Docs == 0 {
		t.Error("no documents published to crawl.docs")
	}
}
