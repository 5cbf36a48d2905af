package service

import (
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/trawl/trawl/services/parser/internal/scope"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/obs"
	"github.com/trawl/trawl/shared/policy"
)

// TestProcessRedirectScope: a 3xx's Location is held to the rules a link of the
// redirecting URL is held to, at its depth. Downstream only the live rules are applied
// again, so a target let through here is fetched and, being a page, crawled from:
// another site, or an excluded URL such as a logout. A refused target is counted by the
// rule that refused it, and the 3xx itself is handled as before.
func TestProcessRedirectScope(t *testing.T) {
	const page = "https://www.example.com/account"
	long := "https://www.example.com/" + strings.Repeat("x", 100)
	excludeLogout := func(c *scope.Config) { c.Exclude = regexp.MustCompile(`/logout`) }
	host := func(c *scope.Config) { c.Mode = scope.Host }
	tests := []struct {
		name  string
		cfg   func(*scope.Config)
		rules func(*policy.Rule) // a rule for host:www.example.com
		url   string             // the 3xx's URL; page when ""
		depth int                // the 3xx's depth; 0 is a seed
		kind  crawlmsg.Kind
		loc   string
		want  string // redirectFollowed or the refusing reason
	}{
		// The default scope (any) has no other host: the default crawl of a site that
		// moves to https or to www is unchanged.
		{name: "default scope: http to https", url: "http://example.com/", depth: 2,
			loc: "https://example.com/", want: redirectFollowed},
		{name: "default scope: to www", url: "https://example.com/a", depth: 2,
			loc: "https://www.example.com/a", want: redirectFollowed},
		{name: "default scope: another host", depth: 2, loc: "https://other.test/", want: redirectFollowed},

		{name: "excluded", cfg: excludeLogout, depth: 2,
			loc: "https://www.example.com/logout?all=1", want: string(scope.ReasonExclude)},
		{name: "excluded from a seed too", cfg: excludeLogout,
			loc: "https://www.example.com/logout?all=1", want: string(scope.ReasonExclude)},
		{name: "a live rule's exclude", depth: 2, rules: func(r *policy.Rule) { r.Exclude = []string{"/logout"} },
			loc: "https://www.example.com/logout", want: string(scope.ReasonPolicyExclude)},
		{name: "over the URL length", cfg: func(c *scope.Config) { c.MaxURLLength = 64 }, depth: 2,
			loc: long, want: string(scope.ReasonLength)},
		{name: "a repeating path (a redirect loop)", depth: 2,
			loc: "https://www.example.com/a/a/a/", want: string(scope.ReasonTrap)},
		{name: "not included", cfg: func(c *scope.Config) { c.Include = regexp.MustCompile(`^https://www\.example\.com/docs/`) }, depth: 2,
			loc: "https://www.example.com/login", want: string(scope.ReasonInclude)},

		{name: "scope host: another host", cfg: host, depth: 2, loc: "https://other.test/", want: string(scope.ReasonScope)},
		{name: "scope host: the apex is another host", cfg: host, depth: 2,
			loc: "https://example.com/account", want: string(scope.ReasonScope)},
		{name: "scope host: http to https of the host", cfg: host, url: "http://www.example.com/a", depth: 2,
			loc: "https://www.example.com/a", want: redirectFollowed},
		{name: "scope domain: www to the apex", cfg: func(c *scope.Config) { c.Mode = scope.Domain }, depth: 2,
			loc: "https://example.com/account", want: redirectFollowed},
		{name: "scope domain: another domain", cfg: func(c *scope.Config) { c.Mode = scope.Domain }, depth: 2,
			loc: "https://example.org/", want: string(scope.ReasonScope)},
		// A seed's target stands for the seed: the crawl starts where the site lives.
		{name: "scope host: a seed moved to www", cfg: host, url: "http://example.com/",
			loc: "https://www.example.com/", want: redirectFollowed},

		{name: "requisite: to a CDN", cfg: host, depth: 2, kind: crawlmsg.KindEmbed,
			loc: "https://cdn.test/a.css", want: redirectFollowed},
		{name: "requisite held to the crawl's scope", cfg: func(c *scope.Config) { c.Mode, c.EmbedScope = scope.Host, scope.EmbedCrawl },
			depth: 2, kind: crawlmsg.KindEmbed, loc: "https://cdn.test/a.css", want: string(scope.ReasonScope)},
		{name: "requisite excluded", cfg: excludeLogout, depth: 2, kind: crawlmsg.KindEmbed,
			loc: "https://cdn.test/logout.css", want: string(scope.ReasonExclude)},
		// At depth 2, so that its kind alone tells it from a seed.
		{name: "sitemap: to another host", cfg: host, url: "https://www.example.com/sitemap.xml", depth: 2, kind: crawlmsg.KindSitemap,
			loc: "https://static.test/sitemap.xml", want: redirectFollowed},
		{name: "sitemap excluded", cfg: func(c *scope.Config) { c.Exclude = regexp.MustCompile(`static`) },
			url: "https://www.example.com/sitemap.xml", kind: crawlmsg.KindSitemap,
			loc: "https://static.test/sitemap.xml", want: string(scope.ReasonExclude)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := scope.Config{MaxURLLength: 2048, MaxEmbedHops: 2}
			if tt.cfg != nil {
				tt.cfg(&cfg)
			}
			p := newProcessor(t, cfg)
			if tt.rules != nil {
				set := policySet(t, "host:www.example.com", tt.rules)
				p.rules = func() *policy.Set { return set }
			}
			u := tt.url
			if u == "" {
				u = page
			}
			pg := &crawlmsg.Page{Meta: crawlmsg.PageMeta{V: 1, URL: u, Depth: tt.depth, Kind: tt.kind,
				Status: 302, ContentType: "text/html", Location: tt.loc, Under: under(tt.kind)}}
			o, err := processEncoded(p, pg)
			if err != nil {
				t.Fatalf("a refused target fails its page: %v", err)
			}
			if o.redirect != tt.want {
				t.Errorf("redirect %q, want %q", o.redirect, tt.want)
			}
			followed := o.follow != nil && len(o.follow.URLs) == 1 && o.follow.URLs[0].URL == tt.loc && o.follow.URLs[0].Depth == tt.depth
			if followed != (tt.want == redirectFollowed) {
				t.Errorf("follow %+v, want the target followed: %v", o.follow, tt.want == redirectFollowed)
			}
			// Counted once settled, whatever the 3xx was fetched as.
			reg := prometheus.NewRegistry()
			newMetrics(obs.NewMetrics(reg, "parser")).record(o, false)
			if n := counted(t, reg, "trawl_parser_redirects_total", tt.want); n != 1 {
				t.Errorf("trawl_parser_redirects_total{result=%q} = %v, want 1", tt.want, n)
			}
		})
	}
}

// under is the Under a fetched sitemap carries: its robots.txt origin.
func under(k crawlmsg.Kind) string {
	if k == crawlmsg.KindSitemap {
		return "https://www.example.com/"
	}
	return ""
}

// policySet is one live rule for scope s.
func policySet(t *testing.T, s string, set func(*policy.Rule)) *policy.Set {
	t.Helper()
	sc, err := policy.ParseScope(s)
	if err != nil {
		t.Fatal(err)
	}
	r := policy.Stored{Rule: policy.Rule{Scope: sc}, Origin: policy.Origin{Version: 1}}
	set(&r.Rule)
	rules, err := policy.Compile([]policy.Stored{r}, 1)
	if err != nil {
		t.Fatal(err)
	}
	return rules
}

// counted is the value of the series of counter name whose one label is value.
func counted(t *testing.T, reg *prometheus.Registry, name, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if l := m.GetLabel(); len(l) == 1 && l[0].GetValue() == value {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}
