package service

import (
	"context"
	"net/url"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/obs"
	"github.com/trawl/trawl/shared/robots"
	"github.com/trawl/trawl/shared/topology"
	"github.com/trawl/trawl/shared/urlnorm"
)

// sitemapsOf are the sitemaps an origin's robots.txt entry points to, as crawl.discovered
// URLs of kind sitemap: its Sitemap lines, or the origin's /sitemap.xml when it names
// none. They are at depth 0 whatever task fetched robots.txt: a sitemap is the site's own
// list of its pages, an entry point like a seed, and the pages it lists are one hop below
// it. Under is the origin, so that a sitemap on another host (cross-submission) may list
// this origin's URLs. fromRobots reports whether robots.txt named them.
func sitemapsOf(origin string, entry *robots.Entry) (urls []crawlmsg.Discovered, fromRobots bool) {
	under := origin + "/"
	var named []string
	if entry.Rules != nil {
		named = entry.Rules.Sitemaps()
	}
	base, err := url.Parse(origin + "/robots.txt")
	if err != nil {
		return nil, false
	}
	seen := map[string]bool{}
	for _, raw := range named {
		// The RFC wants absolute URLs; a relative one is read against robots.txt, as
		// search engines do.
		u, err := urlnorm.Resolve(base, raw)
		if err != nil || seen[u] {
			continue
		}
		seen[u] = true
		urls = append(urls, crawlmsg.Discovered{URL: u, Via: crawlmsg.ViaSitemap, Kind: crawlmsg.KindSitemap, Under: under})
	}
	if len(named) > 0 {
		return urls, true
	}
	return []crawlmsg.Discovered{{URL: under + "sitemap.xml", Via: crawlmsg.ViaSitemap, Kind: crawlmsg.KindSitemap, Under: under}}, false
}

// publishSitemaps sends an origin's sitemaps to crawl.discovered after its robots.txt was
// fetched and cached (once per robots.txt fetch; the seen test drops those already
// known). It runs before the task's outcome is published and retries until the task's
// time is up; a sitemap lost then is found again at the next robots.txt fetch.
func (s *Service) publishSitemaps(ctx context.Context, lease, origin string, entry *robots.Entry) {
	urls, fromRobots := sitemapsOf(origin, entry)
	if len(urls) == 0 {
		return
	}
	data, err := crawlmsg.Marshal(&crawlmsg.DiscoveredBatch{Source: origin + "/robots.txt", URLs: urls})
	if err != nil {
		s.log.Error("sitemaps not published", "origin", origin, "err", err)
		return
	}
	msg := natsx.NewMsg(topology.SubjectDiscovered, topology.SitemapsID(lease), data)
	if err := s.retry(cutoffOf(ctx), origin, "sitemaps", publishTimeout, func(ctx context.Context) error {
		return natsx.PublishBatch(ctx, s.js, []*nats.Msg{msg})
	}); err != nil {
		s.log.Warn("sitemaps not published; they are found again at the next robots.txt fetch", "origin", origin, "err", err)
		return
	}
	source := "default"
	if fromRobots {
		source = "robots"
	}
	s.m.sitemaps.WithLabelValues(source).Add(float64(len(urls)))
}

func newSitemapsMetric(om *obs.Metrics) *prometheus.CounterVec {
	return om.CounterVec("sitemaps_discovered_total", "Sitemap URLs published to crawl.discovered after a robots.txt fetch (TRAWL_SITEMAPS): robots (named by Sitemap lines) or default (the host's /sitemap.xml, when robots.txt names none).", "source")
}
