package synthweb

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trawl/trawl/shared/urlnorm"
)

// testModel builds the pure model without listening, for fast tests.
func testModel(t testing.TB, cfg Config) *model {
	t.Helper()
	cfg, err := cfg.withDefaults()
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	ips, _, err := hostIPs(cfg)
	if err != nil {
		t.Fatalf("addrs: %v", err)
	}
	return newModel(cfg, ips, 8080)
}

// allResources visits every URL Expected walks at the given depth, plus the
// pages it deliberately leaves out (nofollow targets, bait, forbidden).
func allResources(m *model, depth int) map[string]resource {
	exp := m.expected(depth, nil)
	out := make(map[string]resource)
	for _, set := range []map[string]bool{exp.Fetch, exp.Forbidden} {
		for u := range set {
			if h, pq, ok := m.lookup(u); ok {
				out[u] = m.resource(h, pq)
			}
		}
	}
	for u := range exp.Retried {
		h, pq, _ := m.lookup(u)
		out[u] = m.resource(h, pq)
	}
	return out
}

func TestHrefsResolveToTargets(t *testing.T) {
	configs := map[string]Config{
		"default": DefaultConfig(),
		"one link per page": func() Config {
			c := DefaultConfig()
			c.LinksPerPage, c.Hosts, c.PagesPerHost = 1, 2, 9
			return c
		}(),
	}
	for name, cfg := range configs {
		t.Run(name, func(t *testing.T) {
			m := testModel(t, cfg)
			checked := 0
			for page, res := range allResources(m, 8) {
				base, err := url.Parse(page)
				if err != nil {
					t.Fatal(err)
				}
				if res.base != "" {
					if base, err = base.Parse(res.base); err != nil {
						t.Fatalf("%s: bad base %q: %v", page, res.base, err)
					}
				}
				for _, l := range res.links {
					u, err := base.Parse(l.href)
					if err != nil {
						t.Errorf("%s: href %q: %v", page, l.href, err)
						continue
					}
					if u.Scheme != "http" && u.Scheme != "https" {
						if l.target != "" {
							t.Errorf("%s: href %q has target %q but scheme %q", page, l.href, l.target, u.Scheme)
						}
						continue
					}
					if got := normalise(u); got != l.target {
						t.Errorf("%s: href %q resolves to %s, model says %s", page, l.href, got, l.target)
					}
					// The crawler's own normaliser must agree, or its URL
					// keys would not match Expected's.
					if got, err := urlnorm.Resolve(base, l.href); err != nil || got != l.target {
						t.Errorf("%s: urlnorm.Resolve(%q) = %q, %v; model says %s", page, l.href, got, err, l.target)
					}
					// So must its session-id stripping: exactly the links the model
					// gives a plain form lose something, and that form.
					want := l.target
					if l.canon != "" {
						want = l.canon
					}
					if got, err := urlnorm.NormalizeWith(l.target, urlnorm.Options{StripSessionIDs: true}); err != nil || got != want {
						t.Errorf("%s: stripping session ids from %s gives %q, %v; model says %s", page, l.target, got, err, want)
					}
					checked++
				}
				if res.location != "" {
					pu, _ := url.Parse(page)
					u, err := pu.Parse(res.location)
					if err != nil || normalise(u) != res.locTarget {
						t.Errorf("%s: Location %q resolves to %v (err %v), model says %s", page, res.location, u, err, res.locTarget)
					}
				}
			}
			for u := range allResources(m, 8) {
				if n, err := urlnorm.Normalize(u); err != nil || n != u {
					t.Errorf("URL %s is not in normal form: urlnorm gives %q, %v", u, n, err)
				}
			}
			if checked < 100 {
				t.Fatalf("only %d links checked", checked)
			}
		})
	}
}

// TestDepthIndependentOfDiscoveryOrder backs the package's central claim: a
// crawler that processes URLs in any order and keeps the depth of the first
// link it sees fetches exactly what Expected says.
func TestDepthIndependentOfDiscoveryOrder(t *testing.T) {
	configs := []Config{
		DefaultConfig(),
		{Hosts: 4, PagesPerHost: 100, LinksPerPage: 4, Special: true, Seed: 7},
		{Hosts: 3, PagesPerHost: 30, LinksPerPage: 1, Special: true, Seed: 3},
		{Hosts: 1, PagesPerHost: 1, Special: true},
	}
	for ci, cfg := range configs {
		m := testModel(t, cfg)
		for depth := 0; depth <= 6; depth++ {
			t.Run(fmt.Sprintf("config %d depth %d", ci, depth), func(t *testing.T) {
				exp := m.expected(depth, nil)
				for trial := uint64(0); trial < 5; trial++ {
					got := randomOrderCrawl(m, depth, rand.New(rand.NewPCG(trial, uint64(depth))))
					for u := range got {
						if !exp.Fetch[u] && exp.Retried[u] == 0 {
							t.Fatalf("trial %d fetched %s, not expected", trial, u)
						}
					}
					for u := range exp.Fetch {
						if !got[u] {
							t.Fatalf("trial %d never fetched expected %s", trial, u)
						}
					}
				}
			})
		}
	}
}

// randomOrderCrawl marks URLs seen on first discovery even when too deep,
// the least forgiving policy a crawler might have.
func randomOrderCrawl(m *model, maxDepth int, rng *rand.Rand) map[string]bool {
	type item struct {
		u     string
		depth int
	}
	seen := make(map[string]bool)
	var frontier []item
	for _, s := range m.seedURLs() {
		seen[s] = true
		frontier = append(frontier, item{s, 0})
	}
	fetched := make(map[string]bool)
	for len(frontier) > 0 {
		i := rng.IntN(len(frontier))
		it := frontier[i]
		frontier[i] = frontier[len(frontier)-1]
		frontier = frontier[:len(frontier)-1]
		h, pq, ok := m.lookup(it.u)
		if !ok || !m.allowed(h, pq) {
			continue
		}
		fetched[it.u] = true
		res := m.resource(h, pq)
		var next []item
		if res.locTarget != "" {
			next = append(next, item{res.locTarget, it.depth})
		}
		if res.status == 200 && res.contentType == htmlType {
			for _, l := range res.links {
				if l.follow() && l.target != "" && m.admits(l.target) {
					next = append(next, item{m.key(l), it.depth + 1})
				}
			}
		}
		for _, n := range next {
			if seen[n.u] {
				continue
			}
			seen[n.u] = true
			if n.depth <= maxDepth {
				frontier = append(frontier, n)
			}
		}
	}
	return fetched
}

func TestLevelsCoverAllPages(t *testing.T) {
	tests := []struct {
		pages, links int
		wantLevels   []span
	}{
		{pages: 20, links: 6, wantLevels: []span{{0, 4}, {4, 12}, {16, 4}}},
		{pages: 1, links: 6, wantLevels: []span{{0, 1}}},
		{pages: 3, links: 1, wantLevels: []span{{0, 1}, {1, 1}, {2, 1}}},
		{pages: 10, links: 2, wantLevels: []span{{0, 2}, {2, 2}, {4, 2}, {6, 2}, {8, 2}}},
		{pages: 50, links: 10, wantLevels: []span{{0, 4}, {4, 20}, {24, 26}}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d pages %d links", tt.pages, tt.links), func(t *testing.T) {
			m := testModel(t, Config{Hosts: 1, PagesPerHost: tt.pages, LinksPerPage: tt.links})
			if !slices.Equal(m.levels, tt.wantLevels) {
				t.Fatalf("levels = %v, want %v", m.levels, tt.wantLevels)
			}
			// Every page must be fetched by a deep enough crawl.
			exp := m.expected(len(m.levels)+1, nil)
			for n := 0; n < tt.pages; n++ {
				if u := m.url(0, pagePath(n)); !exp.Fetch[u] {
					t.Errorf("page %s unreachable", u)
				}
			}
		})
	}
}

func TestRenderDeterministic(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Seed = 99
	a, b := testModel(t, cfg), testModel(t, cfg)
	cfg.Seed = 100
	other := testModel(t, cfg)
	differs := 0
	for _, path := range []string{"/", "/p/0", "/p/2", "/p/7", "/p/13", "/p/19", "/files/1.txt"} {
		ra, rb := a.render(a.resource(3, path)), b.render(b.resource(3, path))
		if !bytes.Equal(ra, rb) {
			t.Errorf("%s differs between two models with the same seed", path)
		}
		if !bytes.Equal(ra, other.render(other.resource(3, path))) {
			differs++
		}
	}
	if differs == 0 {
		t.Error("changing the seed changed no page")
	}
}

func TestRobotsMatch(t *testing.T) {
	tests := []struct {
		pattern, path string
		want          bool
	}{
		{"/private/", "/private/x.html", true},
		{"/private/", "/private", false},
		{"/private/", "/PRIVATE/x", false},
		{"/tmp", "/tmpfile.html", true},
		{"/*.pdf$", "/doc.pdf", true},
		{"/*.pdf$", "/a/b/doc.pdf", true},
		{"/*.pdf$", "/doc.pdf?x=1", false},
		{"/*.pdf$", "/doc.PDF", false},
		{"/*.pdf", "/doc.pdf?x=1", true},
		{"/a*b*c$", "/a-b-c-c", true},
		{"/a*b*c$", "/a-b-c-d", false},
		{"/*", "/anything", true},
		{"/$", "/", true},
		{"/$", "/x", false},
		{"/fish*", "/fish", true},
	}
	for _, tt := range tests {
		t.Run(tt.pattern+" "+tt.path, func(t *testing.T) {
			if got := robotsMatch(tt.pattern, tt.path); got != tt.want {
				t.Fatalf("robotsMatch(%q, %q) = %v, want %v", tt.pattern, tt.path, got, tt.want)
			}
		})
	}
}

func TestRobotsRulesHost(t *testing.T) {
	m := testModel(t, DefaultConfig())
	h := m.special[KindRobotsRules]
	tests := []struct {
		path         string
		trawl, other bool // allowed for ProductToken, for an agent that falls to "*"
	}{
		{"/", true, true},
		{"/robots.txt", true, true},
		{"/public/1.html", true, false},
		{"/private/secret.html", false, true},
		{"/private/open.html", true, true},
		{"/private/open.html?lang=en", true, true},
		{"/private", true, true},
		{"/PRIVATE/upper.html", true, true},
		{"/doc.pdf", false, true},
		{"/doc.pdf?x=1", true, true},
		{"/report.PDF", true, true},
		{"/tmpfile.html", false, true},
		{"/temp.html", true, true},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			f := m.robots(h)
			for _, agent := range []string{"trawl", "Trawl", "TRAWL"} {
				if got := robotsAllowed(f, agent, tt.path); got != tt.trawl {
					t.Errorf("%s allowed for %s = %v, want %v", tt.path, agent, got, tt.trawl)
				}
			}
			if got := robotsAllowed(f, "somebot", tt.path); got != tt.other {
				t.Errorf("%s allowed for somebot = %v, want %v", tt.path, got, tt.other)
			}
		})
	}
}

func TestRobotsStatus(t *testing.T) {
	tests := []struct {
		status int
		want   bool
	}{
		{200, true}, {404, true}, {410, true}, {500, false}, {503, false},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.status), func(t *testing.T) {
			f := robotsFile{status: tt.status}
			if got := robotsAllowed(f, ProductToken, "/p/1"); got != tt.want {
				t.Fatalf("allowed = %v, want %v", got, tt.want)
			}
			if !robotsAllowed(f, ProductToken, "/robots.txt") {
				t.Fatal("robots.txt itself must always be allowed")
			}
		})
	}
}

func TestHostAddrs(t *testing.T) {
	tests := []struct {
		base    string
		n       int
		want    []string
		wantErr bool
	}{
		{base: "127.0.1.1", n: 3, want: []string{"127.0.1.1", "127.0.1.2", "127.0.1.3"}},
		{base: "127.0.1.254", n: 4, want: []string{"127.0.1.254", "127.0.1.255", "127.0.2.0", "127.0.2.1"}},
		{base: "127.255.255.254", n: 2, wantErr: true},
		{base: "10.0.0.1", n: 1, wantErr: true},
		{base: "::1", n: 1, wantErr: true},
		{base: "localhost", n: 1, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.base, func(t *testing.T) {
			got, err := hostAddrs(tt.base, tt.n)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if !tt.wantErr && !slices.Equal(got, tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestConfigDefaults(t *testing.T) {
	tests := []struct {
		name    string
		in      Config
		check   func(Config) bool
		wantErr bool
	}{
		{name: "zero gets defaults", in: Config{}, check: func(c Config) bool {
			return c.Hosts == 20 && c.PagesPerHost == 20 && c.LinksPerPage == 6 && c.CrawlDelay == time.Second &&
				c.SlowDelay == 300*time.Millisecond && c.BaseIP == "127.0.1.1" && !c.Special
		}},
		{name: "negative slow delay means none", in: Config{SlowDelay: -1}, check: func(c Config) bool { return c.SlowDelay == 0 }},
		{name: "explicit values kept", in: Config{Hosts: 2, CrawlDelay: 200 * time.Millisecond}, check: func(c Config) bool {
			return c.Hosts == 2 && c.CrawlDelay == 200*time.Millisecond
		}},
		{name: "negative hosts", in: Config{Hosts: -1}, wantErr: true},
		{name: "port out of range", in: Config{Port: 70000}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.in.withDefaults()
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if err == nil && !tt.check(got) {
				t.Fatalf("unexpected config %+v", got)
			}
		})
	}
}

func TestRobotsTxtRendering(t *testing.T) {
	cfg := DefaultConfig()
	cfg.CrawlDelay = 200 * time.Millisecond
	m := testModel(t, cfg)
	got := renderRobots(m.robots(m.special[KindCrawlDelay]).groups)
	if want := "User-agent: *\nCrawl-delay: 0.2\nDisallow:\n"; got != want {
		t.Fatalf("crawl-delay robots.txt = %q, want %q", got, want)
	}
	// The reference parser must read back what was rendered.
	for h := range m.hosts {
		f := m.robots(h)
		if f.status != 200 {
			continue
		}
		back := parseRobots(renderRobots(f.groups))
		for _, g := range back {
			if len(g.rules) == 1 && g.rules[0].pattern == "" {
				g.rules = nil
			}
		}
		if len(back) != len(f.groups) {
			t.Errorf("host %d: %d groups rendered, %d parsed back", h, len(f.groups), len(back))
		}
	}
}

func TestExpectedSmallWeb(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Hosts, cfg.PagesPerHost, cfg.Seed = 3, 14, 5
	m := testModel(t, cfg)
	url := func(k HostKind, pq string) string { return m.url(m.special[k], pq) }
	const depth = 3
	exp := m.expected(depth, nil)

	for u := range exp.Fetch {
		if exp.Forbidden[u] {
			t.Errorf("%s both expected and forbidden", u)
		}
		if _, ok := exp.Retried[u]; ok {
			t.Errorf("%s both in Fetch and Retried", u)
		}
		if strings.HasSuffix(u, "/robots.txt") {
			t.Errorf("robots.txt in Fetch: %s", u)
		}
		if strings.Contains(u, "#") {
			t.Errorf("fragment in expected URL %s", u)
		}
	}

	mustFetch := []string{
		m.url(0, "/"), m.url(0, "/p/0"), m.url(0, "/p/4"), m.url(0, "/files/1.txt"),
		url(KindRobotsRules, "/private/open.html"),
		url(KindRobotsRules, "/doc.pdf?x=1"),
		url(KindRobotsRules, "/temp.html?a=1&b=2"),
		url(KindRobots404, "/p/3"),
		url(KindCrawlDelay, "/p/4"),
		url(KindRedirect, "/old/0"), url(KindRedirect, "/p/0"), // redirect and target
		url(KindRedirect, "/chain/0"), url(KindRedirect, "/chain/1"), url(KindRedirect, "/p/3"),
		url(KindRedirect, "/away"),
		url(KindRedirect, "/to-private"),
		url(KindErrors, "/missing/0"), url(KindErrors, "/gone"),
		url(KindTrap, monthPath(2025, 1)), url(KindTrap, monthPath(2024, 11)), url(KindTrap, monthPath(2025, 3)),
	}
	for _, u := range mustFetch {
		if !exp.Fetch[u] {
			t.Errorf("expected %s in Fetch", u)
		}
	}
	mustForbid := []string{
		m.url(0, "/hidden/3"),   // only behind rel=nofollow
		m.url(1, "/unlinked/1"), // only inside a text file
		url(KindRobotsRules, "/private/secret.html"),
		url(KindRobotsRules, "/doc.pdf"),
		url(KindRobotsRules, "/tmpfile.html"),
		url(KindRobotsRules, "/private/redirected.html"), // redirect target, disallowed
		url(KindRobots503, "/"), url(KindRobots503, "/p/1"),
	}
	for _, u := range mustForbid {
		if !exp.Forbidden[u] {
			t.Errorf("expected %s in Forbidden", u)
		}
	}
	if !exp.ForbiddenHosts[m.hosts[m.special[KindRobots503]].Addr] || len(exp.ForbiddenHosts) != 1 {
		t.Errorf("ForbiddenHosts = %v, want only the robots-503 host", exp.ForbiddenHosts)
	}
	if st := exp.Retried[url(KindErrors, "/broken")]; st != 500 || len(exp.Retried) != 1 {
		t.Errorf("Retried = %v, want only /broken with 500", exp.Retried)
	}
	// The trap is cut at the depth limit, neither fetched nor forbidden.
	for _, u := range []string{url(KindTrap, monthPath(2024, 10)), url(KindTrap, monthPath(2025, 4))} {
		if exp.Fetch[u] || exp.Forbidden[u] {
			t.Errorf("%s beyond depth %d should be neither fetched nor forbidden", u, depth)
		}
	}
	trap := 0
	for u := range exp.Fetch {
		if strings.HasPrefix(u, url(KindTrap, "/cal/")) {
			trap++
		}
	}
	if want := 1 + 2*(depth-1); trap != want {
		t.Errorf("%d calendar pages expected at depth %d, want %d", trap, depth, want)
	}
	for u := range exp.Fetch {
		if h, _, _ := m.lookup(u); m.hosts[h].Kind == KindRobots503 {
			t.Errorf("page of the robots-503 host expected: %s", u)
		}
	}
}

func TestExpectedDepthZeroIsSeeds(t *testing.T) {
	m := testModel(t, DefaultConfig())
	exp := m.expected(0, nil)
	want := 0
	for _, s := range m.seedURLs() {
		h, _, _ := m.lookup(s)
		if m.hosts[h].Kind == KindRobots503 {
			continue
		}
		want++
		if !exp.Fetch[s] {
			t.Errorf("seed %s not expected at depth 0", s)
		}
	}
	if len(exp.Fetch) != want {
		t.Errorf("depth 0 expects %d URLs, want the %d seeds", len(exp.Fetch), want)
	}
}

func TestExpectedLargeWebIsFast(t *testing.T) {
	m := testModel(t, Config{Hosts: 10, PagesPerHost: 1000, Special: true})
	start := time.Now()
	exp := m.expected(20, nil)
	elapsed := time.Since(start)
	if len(exp.Fetch) < 10_000 {
		t.Fatalf("only %d URLs expected from a 10k-page web", len(exp.Fetch))
	}
	// Generous bound: it takes well under a second; this only catches an
	// accidental quadratic.
	if elapsed > 10*time.Second {
		t.Fatalf("Expected took %s for %d URLs", elapsed, len(exp.Fetch))
	}
	t.Logf("Expected(20) on 10k pages: %d URLs in %s", len(exp.Fetch), elapsed)
}

func BenchmarkExpected10k(b *testing.B) {
	m := testModel(b, Config{Hosts: 10, PagesPerHost: 1000, Special: true})
	for b.Loop() {
		m.expected(20, nil)
	}
}

func BenchmarkRenderPage(b *testing.B) {
	m := testModel(b, DefaultConfig())
	for b.Loop() {
		m.render(m.resource(1, "/p/7"))
	}
}

func TestTrapsStopAtTheCrawlersRules(t *testing.T) {
	grow := func(n int) string {
		var segs []string
		for i := range n {
			segs = append(segs, growSegment(i))
		}
		return growPrefix + strings.Join(segs, "/")
	}
	tests := []struct {
		name         string
		maxURLLength int
		fetch        []string
		forbid       []string
		grows        int // grow pages fetched in all
	}{
		{
			name:   "defaults",
			fetch:  []string{"/loop/", "/loop/a/b/", "/loop/a/b/a/b/", grow(0), grow(1), grow(2)},
			forbid: []string{"/loop/a/b/a/b/a/b/", grow(3)},
			grows:  3,
		},
		{
			name:         "longer URLs allowed",
			maxURLLength: 4096,
			fetch:        []string{grow(3), grow(4), grow(5)},
			forbid:       []string{grow(6)},
			grows:        6,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.MaxURLLength = tt.maxURLLength
			m := testModel(t, cfg)
			h := m.special[KindTrap]
			exp := m.expected(10, nil)
			for _, p := range tt.fetch {
				if !exp.Fetch[m.url(h, p)] {
					t.Errorf("%.60s… (%d bytes) not expected", m.url(h, p), len(m.url(h, p)))
				}
			}
			for _, p := range tt.forbid {
				if u := m.url(h, p); !exp.Forbidden[u] || exp.Fetch[u] {
					t.Errorf("%.60s… (%d bytes) not forbidden", u, len(u))
				}
			}
			// Nothing deeper exists for the crawler.
			loops, grows := 0, 0
			for u := range exp.Fetch {
				if h2, pq, _ := m.lookup(u); h2 == h {
					switch {
					case strings.HasPrefix(pq, loopPrefix):
						loops++
					case strings.HasPrefix(pq, growPrefix):
						grows++
					}
				}
			}
			if loops != 3 || grows != tt.grows {
				t.Errorf("%d loop and %d grow pages expected, want 3 and %d", loops, grows, tt.grows)
			}
		})
	}
}

func TestSessionIDsCollapse(t *testing.T) {
	for _, keep := range []bool{false, true} {
		t.Run(fmt.Sprintf("keep session ids %v", keep), func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.KeepSessionIDs = keep
			m := testModel(t, cfg)
			h := m.special[KindSessionIDs]
			exp := m.expected(3, nil)
			var got []string
			for u := range exp.Fetch {
				if h2, pq, _ := m.lookup(u); h2 == h {
					got = append(got, pq)
				}
			}
			slices.Sort(got)
			if !keep {
				want := []string{"/", "/s/0", "/s/1", "/s/2?lang=en", "/s/3", "/s/4", "/s/5?sid=7"}
				if !slices.Equal(got, want) {
					t.Fatalf("session host pages %q, want %q", got, want)
				}
				return
			}
			// The home, then 6, 10 and 16 new URLs at depths 1 to 3 (see
			// TestReferenceCrawlKeepingSessionIDs), and a session id in all but /s/5?sid=7.
			if len(got) != 1+6+10+16 {
				t.Fatalf("%d session host pages, want 33: %q", len(got), got)
			}
			for _, pq := range got {
				if pq != "/" && pq != "/s/5?sid=7" && !regexp.MustCompile(`(?i)(jsessionid|sid|sessionid|aspsessionid[a-z]+)=[0-9a-z]{24,}`).MatchString(pq) {
					t.Errorf("%s has no session id", pq)
				}
			}
		})
	}
}

var tagRE = regexp.MustCompile(`<[^>]*>`)

// visibleText is a crude extraction, enough to compare pages' words.
func visibleText(body []byte) []string {
	return strings.Fields(tagRE.ReplaceAllString(string(body), " "))
}

func TestDuplicates(t *testing.T) {
	w := &Web{m: testModel(t, DefaultConfig())}
	m := w.m
	dups, near := w.Duplicates(), w.NearDuplicates()
	if len(dups) != 6 || len(near) != 2 {
		t.Fatalf("%d duplicates, %d near; want 6 and 2", len(dups), len(near))
	}
	exp := m.expected(1, nil)
	body := func(u string) []byte {
		h, pq, ok := m.lookup(u)
		if !ok {
			t.Fatalf("%s outside the web", u)
		}
		res := m.resource(h, pq)
		if res.status != 200 {
			t.Fatalf("%s: status %d", u, res.status)
		}
		return m.render(res)
	}
	for copyURL, of := range dups {
		if !exp.Fetch[copyURL] || !exp.Fetch[of] {
			t.Errorf("%s or its original %s not fetched at depth 1", copyURL, of)
		}
		a, b := body(of), body(copyURL)
		if _, isNear := near[copyURL]; !isNear {
			if !bytes.Equal(a, b) {
				t.Errorf("exact copy %s differs from %s", copyURL, of)
			}
			continue
		}
		ta, tb := visibleText(a), visibleText(b)
		if len(ta) != len(tb) || len(ta) < 1000 {
			t.Fatalf("near copy %s: %d words, original %d; want the same, at least 1000", copyURL, len(tb), len(ta))
		}
		diff := 0
		for i := range ta {
			if ta[i] != tb[i] {
				diff++
			}
		}
		if diff != 1 {
			t.Errorf("near copy %s differs from %s in %d words, want 1", copyURL, of, diff)
		}
	}
	// No other two pages of a crawl share their text, so a content-dedup check can
	// require exactly these to be flagged.
	byText := map[string][]string{}
	for u := range m.expected(6, nil).Fetch {
		h, pq, _ := m.lookup(u)
		if res := m.resource(h, pq); res.status == 200 && res.contentType == htmlType {
			text := strings.Join(visibleText(m.render(res)), " ")
			byText[text] = append(byText[text], u)
		}
	}
	root := func(u string) string {
		if o, ok := dups[u]; ok {
			return o
		}
		return u
	}
	groups := 0
	for _, group := range byText {
		for _, u := range group[1:] {
			if root(u) != root(group[0]) {
				t.Errorf("pages %q share their text but are not listed as duplicates", group)
				break
			}
		}
		if len(group) > 1 {
			groups++
		}
	}
	if groups != 4 { // / and /index.html, and /doc/0, /doc/1, /doc/2 with their exact copies
		t.Errorf("%d groups of pages with the same text, want 4", groups)
	}
}

func TestWalk(t *testing.T) {
	w := &Web{m: testModel(t, smallConfig())}
	const depth = 3
	walk := w.Walk(depth)
	exp := w.Expected(depth)
	if len(walk) != len(exp.Fetch)+len(exp.Retried) {
		t.Fatalf("%d responses walked, Expected has %d fetches", len(walk), len(exp.Fetch)+len(exp.Retried))
	}
	linked := map[string]bool{}
	prev := 0
	for _, d := range walk {
		if !exp.Fetch[d.URL] && exp.Retried[d.URL] == 0 {
			t.Errorf("walked %s, not expected", d.URL)
		}
		if d.Depth < prev {
			t.Fatalf("%s at depth %d after depth %d: not breadth-first", d.URL, d.Depth, prev)
		}
		prev = d.Depth
		if d.Depth == depth && len(d.Links) > 0 && !strings.Contains(d.URL, "/old/") && !strings.Contains(d.URL, "/chain/") && !strings.HasSuffix(d.URL, "/away") && !strings.HasSuffix(d.URL, "/to-private") {
			t.Errorf("%s at the depth limit emits links %v", d.URL, d.Links)
		}
		once := map[string]bool{}
		for _, l := range d.Links {
			if once[l] || strings.Contains(l, "#") || len(l) > 2048 || repeatsSegment(l) {
				t.Errorf("%s emits %s twice, with a fragment, or against the URL rules", d.URL, l)
			}
			once[l] = true
			s, err := urlnorm.NormalizeWith(l, urlnorm.Options{StripSessionIDs: true})
			if err != nil {
				t.Fatalf("%s emits %s: %v", d.URL, l, err)
			}
			linked[s] = true
		}
	}
	seeds := map[string]bool{}
	for _, s := range w.Seeds() {
		seeds[s] = true
	}
	for u := range exp.Fetch {
		if !seeds[u] && !linked[u] {
			t.Errorf("%s is fetched but no walked response discovers it", u)
		}
	}
}
