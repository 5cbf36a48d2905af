package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/trawl/trawl/devstack/stack"
	"github.com/trawl/trawl/devstack/synthweb"
)

// With TRAWL_SITEMAPS=on a host's sitemaps are read: robots.txt names a sitemap index,
// whose two sitemaps (one a gzip file) list pages no page links to. Those pages are
// fetched once each, at a link depth the index chain does not add to (TRAWL_MAX_DEPTH=1
// here, and the pages sit below an index and a sitemap); the entries robots.txt disallows
// and the URL of another host a sitemap may not list are never requested; every other
// host's /sitemap.xml is asked for once; and every request, sitemaps included, keeps the
// host's gap. The rest of the crawl is the crawl of the same web without sitemaps.
func TestSitemaps(t *testing.T) {
	t.Parallel()
	wcfg := synthweb.Config{Hosts: 3, PagesPerHost: 8, LinksPerPage: 4, Sitemaps: true, SlowDelay: -1}
	env := crawlEnv{MinDelay: 100 * time.Millisecond, DelayFactor: 2, MaxDepth: 1, MaxRetries: 2}
	r := crawl(t, wcfg, env, stack.Options{Env: map[string]string{"TRAWL_SITEMAPS": "on"}}, nil)

	counts := synthweb.CountByURL(r.reqs, r.web.Origin)
	fetch, never := r.web.SitemapOnly()
	sitemapReq := map[string]bool{}
	for _, u := range fetch {
		sitemapReq[u] = true
		if counts[u] != 1 {
			t.Errorf("listed only in a sitemap, fetched %d times, want once: %s", counts[u], u)
		}
	}
	for _, u := range never {
		if counts[u] != 0 {
			t.Errorf("fetched %d times, must never be (robots.txt disallows it, or another host's sitemap lists it): %s", counts[u], u)
		}
	}
	for _, h := range r.web.Hosts() {
		if h.Kind == synthweb.KindSitemaps {
			continue
		}
		u := h.Origin + "/sitemap.xml"
		sitemapReq[u] = true
		if counts[u] != 1 {
			t.Errorf("%s: robots.txt names no sitemap, so /sitemap.xml is asked for once; asked %d times", h.Name, counts[u])
		}
	}

	// Politeness over the whole log, sitemaps included.
	for _, v := range synthweb.Overlaps(r.reqs) {
		t.Errorf("politeness: overlapping requests: %s", v)
	}
	for _, v := range synthweb.Gaps(r.reqs, func(string) time.Duration { return env.MinDelay }) {
		t.Errorf("politeness: requests too close: %s", v)
	}

	// Without the sitemaps' own requests, the crawl is the link crawl of the same web.
	links := r
	links.reqs = nil
	for _, q := range r.reqs {
		if !sitemapReq[r.web.Origin(q.Host)+q.Path] {
			links.reqs = append(links.reqs, q)
		}
	}
	checkInvariants(t, links, env, 0)

	var listed int
	for _, u := range fetch {
		if strings.Contains(u, "/s/") {
			listed++
		}
	}
	t.Logf("%d requests; %d pages found through sitemaps alone", len(r.reqs), listed)
}
