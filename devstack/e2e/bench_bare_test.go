package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/trawl/trawl/devstack/synthweb"
)

// The bare loop is BenchmarkPipeline's yardstick only if it does the same work as the
// crawler: every page a correct crawl fetches, each once, robots.txt obeyed, nothing else.
func TestBareLoopCrawlsExactlyTheExpectedPages(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := synthweb.DefaultConfig()
	cfg.Special = false
	cfg.Hosts = 20
	cfg.PagesPerHost = 80
	web, err := synthweb.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer web.Close()
	exp := web.Expected(benchMaxDepth)
	if err := bareCrawl(ctx, web.Seeds(), benchMaxDepth); err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	robots := map[string]int{}
	for _, r := range web.Requests() {
		if r.Path == "/robots.txt" {
			robots[r.Host]++
			continue
		}
		got[web.Origin(r.Host)+r.Path]++
	}
	for u, n := range got {
		if !exp.Fetch[u] || n != 1 {
			t.Errorf("%s requested %d times; expected: %v, forbidden: %v", u, n, exp.Fetch[u], exp.Forbidden[u])
		}
	}
	for u := range exp.Fetch {
		if got[u] == 0 {
			t.Errorf("%s never requested", u)
		}
	}
	for _, h := range web.Hosts() {
		if robots[h.Addr] != 1 {
			t.Errorf("robots.txt of %s requested %d times, want once", h.Addr, robots[h.Addr])
		}
	}
}
