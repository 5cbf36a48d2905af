package synthweb

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/trawl/trawl/shared/urlnorm"
)

// refCrawler is a small, independent, sequential crawler used to validate
// the web end to end: it reads the served robots.txt and HTML with real
// parsers, so if Expected disagreed with what the server actually serves,
// Check would fail. Its bug switches let tests prove that Check catches
// the corresponding crawler mistakes.
type refCrawler struct {
	maxDepth   int
	maxRetries int
	agent      string

	// URL rules, as in the real crawler (Config.KeepSessionIDs, Config.MaxURLLength).
	keepSessionIDs bool
	maxURLLength   int

	// Deliberate bugs.
	noTrapRule     bool // follow paths that repeat a segment
	noLengthLimit  bool // follow over-long URLs
	ignoreNofollow bool
	ignoreBase     bool
	ignoreRobots   bool
	parseAnyType   bool // look for links in non-HTML bodies too
	noDedup        bool // refetch every discovered URL

	client *http.Client
	robots map[string]robotsFile // by origin
	last   map[string]time.Time  // end of the last request per origin
	delay  map[string]time.Duration
}

type crawlItem struct {
	url   string
	depth int
}

func newRefCrawler(maxDepth int) *refCrawler {
	return &refCrawler{
		maxDepth:     maxDepth,
		maxRetries:   2,
		agent:        ProductToken,
		maxURLLength: 2048,
		client: &http.Client{
			Timeout:       10 * time.Second,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		robots: make(map[string]robotsFile),
		last:   make(map[string]time.Time),
		delay:  make(map[string]time.Duration),
	}
}

// crawl visits breadth-first; every discovered URL is marked seen at once,
// first discovery wins, as in the real crawler.
func (c *refCrawler) crawl(ctx context.Context, seeds []string) error {
	seen := make(map[string]bool)
	var queue []crawlItem
	push := func(u string, depth int) {
		if !c.keepSessionIDs {
			// What the dedup service does with every discovered URL.
			s, err := urlnorm.NormalizeWith(u, urlnorm.Options{StripSessionIDs: true})
			if err != nil {
				return
			}
			u = s
		}
		if depth > c.maxDepth || (seen[u] && !c.noDedup) {
			return
		}
		seen[u] = true
		queue = append(queue, crawlItem{u, depth})
	}
	for _, s := range seeds {
		push(s, 0)
	}
	for len(queue) > 0 {
		it := queue[0]
		queue = queue[1:]
		u, err := url.Parse(it.url)
		if err != nil {
			return err
		}
		origin := u.Scheme + "://" + u.Host
		if !c.ignoreRobots {
			rf, err := c.robotsFor(ctx, origin)
			if err != nil {
				return err
			}
			if !robotsAllowed(rf, c.agent, u.RequestURI()) {
				continue
			}
		}
		resp, body, err := c.get(ctx, origin, it.url)
		if err != nil {
			return err
		}
		for try := 0; resp.StatusCode >= 500 && try < c.maxRetries; try++ {
			if resp, body, err = c.get(ctx, origin, it.url); err != nil {
				return err
			}
		}
		switch {
		case resp.StatusCode >= 300 && resp.StatusCode < 400:
			loc, err := u.Parse(resp.Header.Get("Location"))
			if err != nil {
				return fmt.Errorf("bad Location from %s: %w", it.url, err)
			}
			push(normalise(loc), it.depth)
		case resp.StatusCode == http.StatusOK && (c.parseAnyType || strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html")):
			for _, l := range c.links(u, body) {
				if (c.noLengthLimit || len(l) <= c.maxURLLength) && (c.noTrapRule || !pathRepeats(l)) {
					push(l, it.depth+1)
				}
			}
		}
	}
	return nil
}

func (c *refCrawler) get(ctx context.Context, origin, u string) (*http.Response, []byte, error) {
	// Honour Crawl-delay between requests to one host; this is rate
	// limiting, not synchronisation.
	if d := c.delay[origin]; d > 0 {
		if wait := time.Until(c.last[origin].Add(d)); wait > 0 {
			time.Sleep(wait + time.Millisecond)
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, nil, err
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("GET %s: %w", u, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	c.last[origin] = time.Now()
	if err != nil {
		return nil, nil, fmt.Errorf("GET %s: %w", u, err)
	}
	return resp, body, nil
}

func (c *refCrawler) robotsFor(ctx context.Context, origin string) (robotsFile, error) {
	if rf, ok := c.robots[origin]; ok {
		return rf, nil
	}
	resp, body, err := c.get(ctx, origin, origin+"/robots.txt")
	if err != nil {
		return robotsFile{}, err
	}
	rf := robotsFile{status: resp.StatusCode}
	if resp.StatusCode == http.StatusOK {
		rf.groups = parseRobots(string(body))
		for _, g := range rf.groups {
			if g.crawlDelay > 0 {
				c.delay[origin] = g.crawlDelay
			}
		}
	}
	c.robots[origin] = rf
	return rf, nil
}

// parseRobots is a minimal RFC 9309 reader, independent of renderRobots.
func parseRobots(text string) []robotsGroup {
	var groups []robotsGroup
	inAgents := false
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		key, val, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		key, val = strings.ToLower(strings.TrimSpace(key)), strings.TrimSpace(val)
		switch key {
		case "user-agent":
			if !inAgents {
				groups = append(groups, robotsGroup{})
			}
			g := &groups[len(groups)-1]
			g.agents = append(g.agents, val)
			inAgents = true
			continue
		case "allow", "disallow":
			if len(groups) > 0 {
				g := &groups[len(groups)-1]
				g.rules = append(g.rules, robotsRule{allow: key == "allow", pattern: val})
			}
		case "crawl-delay":
			if len(groups) > 0 {
				var secs float64
				fmt.Sscan(val, &secs)
				groups[len(groups)-1].crawlDelay = time.Duration(secs * float64(time.Second))
			}
		}
		inAgents = false
	}
	return groups
}

func (c *refCrawler) links(page *url.URL, body []byte) []string {
	doc, err := html.Parse(strings.NewReader(string(body)))
	if err != nil {
		return nil
	}
	base := page
	var out []string
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode {
			switch n.Data {
			case "base":
				if href, ok := attr(n, "href"); ok && !c.ignoreBase {
					if b, err := page.Parse(href); err == nil {
						base = b
					}
				}
			case "a":
				href, ok := attr(n, "href")
				rel, _ := attr(n, "rel")
				nofollow := false
				for _, tok := range strings.Fields(rel) {
					nofollow = nofollow || strings.EqualFold(tok, "nofollow")
				}
				if ok && (!nofollow || c.ignoreNofollow) {
					if u, err := base.Parse(strings.TrimSpace(href)); err == nil && (u.Scheme == "http" || u.Scheme == "https") {
						out = append(out, normalise(u))
					}
				}
			}
		}
		for ch := n.FirstChild; ch != nil; ch = ch.NextSibling {
			walk(ch)
		}
	}
	walk(doc)
	return out
}

// pathRepeats is the parser's trap rule, written a third time: some path segment occurs
// three or more times.
func pathRepeats(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil {
		return false
	}
	seen := map[string]int{}
	for _, seg := range strings.Split(u.EscapedPath(), "/") {
		if seg != "" {
			seen[seg]++
			if seen[seg] == 3 {
				return true
			}
		}
	}
	return false
}

func attr(n *html.Node, key string) (string, bool) {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val, true
		}
	}
	return "", false
}

func normalise(u *url.URL) string {
	v := *u
	v.Fragment, v.RawFragment = "", ""
	v.Scheme = strings.ToLower(v.Scheme)
	v.Host = strings.ToLower(v.Host)
	return v.String()
}

func smallConfig() Config {
	cfg := DefaultConfig()
	cfg.Hosts = 3
	cfg.PagesPerHost = 14
	cfg.Seed = 42
	cfg.CrawlDelay = 30 * time.Millisecond
	cfg.SlowDelay = 20 * time.Millisecond
	return cfg
}

func startWeb(t *testing.T, cfg Config) *Web {
	t.Helper()
	w, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("synthweb: start (needs 127.0.0.0/8 on lo, as on Linux): %v", err)
	}
	t.Cleanup(func() {
		if err := w.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return w
}

func TestReferenceCrawlMatchesExpected(t *testing.T) {
	for _, depth := range []int{0, 1, 2, 3, 6} {
		t.Run(fmt.Sprintf("depth %d", depth), func(t *testing.T) {
			w := startWeb(t, smallConfig())
			c := newRefCrawler(depth)
			if err := c.crawl(context.Background(), w.Seeds()); err != nil {
				t.Fatalf("crawl: %v", err)
			}
			reqs := w.Requests()
			exp := w.Expected(depth)
			for _, p := range exp.Check(reqs, w.Origin, c.maxRetries) {
				t.Error(p)
			}
			for _, v := range Overlaps(reqs) {
				t.Errorf("sequential crawler overlapped: %v", v)
			}
			delays := make(map[string]time.Duration)
			for _, h := range w.Hosts() {
				delays[h.Addr] = h.CrawlDelay
			}
			for _, v := range Gaps(reqs, func(h string) time.Duration { return delays[h] }) {
				t.Errorf("crawl delay not honoured: %v", v)
			}
		})
	}
}

// TestReferenceCrawlKeepingSessionIDs: a crawler that keeps session ids finds new URLs on
// every page of the session-ids host, down to the depth limit, and Expected, told so,
// predicts exactly which.
func TestReferenceCrawlKeepingSessionIDs(t *testing.T) {
	cfg := smallConfig()
	cfg.KeepSessionIDs = true
	w := startWeb(t, cfg)
	c := newRefCrawler(3)
	c.keepSessionIDs = true
	if err := c.crawl(context.Background(), w.Seeds()); err != nil {
		t.Fatalf("crawl: %v", err)
	}
	exp := w.Expected(3)
	for _, p := range exp.Check(w.Requests(), w.Origin, c.maxRetries) {
		t.Error(p)
	}
	sessionURLs := 0
	for u := range exp.Fetch {
		if strings.Contains(u, "/s/") {
			sessionURLs++
		}
	}
	// Page n links to pages n+1 and n+2 (mod 6) with fresh session ids, except that the
	// link to page 5 ("sid=7", not a session id) is always the same URL. Depth 1: the
	// home's 6 links; depth 2: 2 new URLs from each page but 3 and 4, which have 1 (10);
	// depth 3: the same from those 10 pages (16). A crawler that strips session ids
	// fetches 6.
	if want := 6 + 10 + 16; sessionURLs != want {
		t.Errorf("%d session-host pages expected at depth 3, want %d", sessionURLs, want)
	}
}

func TestCheckCatchesCrawlerBugs(t *testing.T) {
	tests := []struct {
		name string
		bug  func(*refCrawler)
		want string // substring of at least one problem
	}{
		// Depth is lowered where a bug would otherwise blow up the crawl.
		{"ignores nofollow", func(c *refCrawler) { c.ignoreNofollow = true }, "/hidden/"},
		{"ignores base href", func(c *refCrawler) { c.ignoreBase = true }, "unexpected URL"},
		{"ignores robots", func(c *refCrawler) { c.ignoreRobots = true }, "forbidden URL"},
		{"matches the wrong robots group", func(c *refCrawler) { c.agent = "somebot" }, "/private/secret.html"},
		{"parses plain text", func(c *refCrawler) { c.parseAnyType = true }, "/unlinked/"},
		{"no dedup", func(c *refCrawler) { c.noDedup = true; c.maxDepth = 2 }, "want once"},
		{"too many retries", func(c *refCrawler) { c.maxRetries = 5 }, "retries"},
		{"stops too shallow", func(c *refCrawler) { c.maxDepth = 2 }, "never fetched"},
		{"keeps session ids", func(c *refCrawler) { c.keepSessionIDs = true }, "jsessionid="},
		{"no trap rule", func(c *refCrawler) { c.noTrapRule = true }, "/loop/a/b/a/b/a/b/"},
		{"no URL length limit", func(c *refCrawler) { c.noLengthLimit = true }, "/" + growSegment(1) + "/" + growSegment(2)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := startWeb(t, smallConfig())
			c := newRefCrawler(4)
			tt.bug(c)
			if err := c.crawl(context.Background(), w.Seeds()); err != nil {
				t.Fatalf("crawl: %v", err)
			}
			// The test's retry budget stays 2 whatever the buggy crawler did.
			problems := w.Expected(4).Check(w.Requests(), w.Origin, 2)
			for _, p := range problems {
				if strings.Contains(p, tt.want) {
					return
				}
			}
			t.Fatalf("no problem mentioning %q; got %d problems: %q", tt.want, len(problems), problems)
		})
	}
}
