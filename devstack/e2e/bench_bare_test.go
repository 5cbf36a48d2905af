package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/trawl/trawl/devstack/synthweb"
)

// The reference crawlers are BenchmarkPipeline's yardsticks only if they do the same work
// as Trawl: every page a correct crawl fetches, each once, robots.txt read once per host
// and obeyed, one request per host at a time, nothing else.
func TestReferenceCrawlersCrawlExactlyTheExpectedPages(t *testing.T) {
	t.Parallel()
	for _, rc := range referenceCrawlers {
		t.Run(rc.name, func(t *testing.T) {
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
			if err := rc.crawl(ctx, web.Seeds(), benchMaxDepth); err != nil {
				t.Fatal(err)
			}
			reqs := web.Requests()
			got := map[string]int{}
			robots := map[string]int{}
			for _, r := range reqs {
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
			if v := synthweb.Overlaps(reqs); len(v) > 0 {
				t.Errorf("%d requests overlapped another to the same host, first: %v", len(v), v[0])
			}
		})
	}
}
