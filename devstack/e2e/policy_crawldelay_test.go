package e2e

import (
	"slices"
	"testing"
	"time"

	"github.com/trawl/trawl/devstack/stack"
	"github.com/trawl/trawl/devstack/synthweb"
	"github.com/trawl/trawl/shared/policy"
)

// Two hosts ask for the same long Crawl-delay in robots.txt while the process-wide cap
// (TRAWL_MAX_CRAWL_DELAY) is one second; a rule honours it exactly for one of them. From
// the web's own log: that host's requests are the whole Crawl-delay apart (after the
// previous response), the other's only the cap — so the cap still applies to it, and the
// rule reached no host it does not name.
func TestPolicyCrawlDelayExact(t *testing.T) {
	t.Parallel()
	const (
		crawlDelay = 3 * time.Second
		capped     = time.Second
	)
	env := crawlEnv{MinDelay: 100 * time.Millisecond, DelayFactor: 0, MaxDepth: 5, MaxRetries: 2}
	wcfg := synthweb.DefaultConfig()
	wcfg.Special = false
	wcfg.Hosts, wcfg.PagesPerHost = 2, 2
	wcfg.RobotsCrawlDelay = crawlDelay
	wcfg.BaseIP = "127.0.24.1"
	var exact, other string
	pc := startPolicyCrawl(t, wcfg, env, stack.Options{Env: map[string]string{"TRAWL_MAX_CRAWL_DELAY": capped.String()}},
		func(web *synthweb.Web) []policy.Change {
			exact, other = web.Hosts()[0].Name, web.Hosts()[1].Name
			return []policy.Change{hostRule(exact, policy.Rule{CrawlDelay: &policy.CrawlDelay{Exact: true}})}
		})
	p := pc.wait(t)
	reqs := pc.web.Requests()
	for _, prob := range pc.web.Expected(env.MaxDepth).Check(reqs, pc.web.Origin, env.MaxRetries) {
		t.Errorf("request log: %s", prob)
	}
	if p.Accepted != p.Terminal() {
		t.Errorf("accounting: %d URLs accepted, %d terminal (%+v)", p.Accepted, p.Terminal(), p)
	}
	for _, tc := range []struct {
		host     string
		min, max time.Duration // of every gap; max bounds the longest, so a delay applied where no rule asks shows
	}{
		{exact, crawlDelay, 0},
		{other, capped, crawlDelay - 500*time.Millisecond},
	} {
		hr := of(reqs, tc.host)
		if len(hr) < 3 {
			t.Errorf("host %s: %d requests, want robots.txt and at least two pages", tc.host, len(hr))
			continue
		}
		var gaps []time.Duration
		for i := 1; i < len(hr); i++ {
			gap := hr[i].Start.Sub(hr[i-1].End)
			gaps = append(gaps, gap.Round(time.Millisecond))
			if gap < tc.min {
				t.Errorf("host %s: %s came %s after %s ended, want ≥ %s", tc.host, reqString(hr[i]), gap, reqString(hr[i-1]), tc.min)
			}
		}
		if tc.max > 0 && slices.Max(gaps) > tc.max {
			t.Errorf("host %s (no rule, Crawl-delay %s capped at %s): gaps %v, the longest above %s", tc.host, crawlDelay, capped, gaps, tc.max)
		}
		t.Logf("host %s: gaps %v", tc.host, gaps)
	}
}
