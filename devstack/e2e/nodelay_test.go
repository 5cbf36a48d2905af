package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/trawl/trawl/devstack/stack"
	"github.com/trawl/trawl/devstack/synthweb"
)

// TestCrawlWithoutDelay: with no minimum delay and no delay factor the only gaps left are
// the hosts' own Crawl-delays, and still one request per host is in flight at a time. A
// host's first task fetches robots.txt and then its URL, saving the round trip through the
// frontier, except on the hosts where the rule holds the URL back: the Crawl-delay host,
// and the host whose robots.txt is unreachable.
func TestCrawlWithoutDelay(t *testing.T) {
	t.Parallel()
	env := crawlEnv{MinDelay: 0, DelayFactor: 0, MaxDepth: 5, MaxRetries: 2}
	r := crawl(t, testWeb(), env, stack.Options{}, nil)
	checkInvariants(t, r, env, 0)

	want := 0
	for _, h := range r.web.Hosts() {
		if h.Kind != synthweb.KindCrawlDelay && h.Kind != synthweb.KindRobots503 {
			want++
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, ok, err := r.stack.Proc("fetcher", 0).Metric(ctx, "trawl_fetcher_robots_then_url_total")
	if err != nil || !ok {
		t.Fatalf("fetcher metric: %v (exported %v)", err, ok)
	}
	if int(got) != want {
		t.Errorf("%v tasks went on from robots.txt to their URL, want one per host whose rule allows it (%d)", got, want)
	}
}
