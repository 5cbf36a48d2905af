package synthweb

import (
	"net/http"
	"strconv"
	"strings"
)

// Expectation is what a correct crawl from Seeds must and must not request.
// URLs are absolute and normalised: http://ip:port/path?query, no fragment.
// Fetch and Retried are disjoint; robots.txt requests are in neither.
type Expectation struct {
	// Fetch holds every URL a correct crawl must request exactly once.
	Fetch map[string]bool
	// Browser holds the URLs of Fetch that a rendering browser requests (a page's script
	// and what it loads), not the frontier.
	Browser map[string]bool
	// Retried holds URLs whose server always answers 5xx, with that status:
	// each must be requested at least once and at most 1+maxRetries times.
	Retried map[string]int
	// Forbidden holds URLs that must never be requested: robots-disallowed
	// ones, the robots-503 host's pages, pages reachable only through
	// rel="nofollow" links or from inside non-HTML bodies, and links the
	// crawler's URL rules refuse (longer than Config.MaxURLLength, or a path
	// segment repeated three times).
	Forbidden map[string]bool
	// ForbiddenHosts holds hosts (IP) where only /robots.txt may be
	// requested because it answers 5xx.
	ForbiddenHosts map[string]bool
}

// Expected walks the web breadth-first from Seeds at depth 0. A link from a
// page at depth d has depth d+1; a redirect target keeps the depth of the
// URL that redirected (the crawler fetches the 3xx itself, then queues the
// Location). URLs deeper than maxDepth are not fetched. Only rel-less or
// followable <a> links of 2xx HTML pages are followed, robots.txt is obeyed
// for ProductToken, and non-HTML bodies contribute no links. Links are taken
// as the crawler configured by Config.KeepSessionIDs and Config.MaxURLLength
// takes them: session ids stripped, over-long and repeating paths refused.
func (w *Web) Expected(maxDepth int) Expectation { return w.m.expected(maxDepth, nil) }

// Discovery is what one response of a correct crawl sends to crawl.discovered.
type Discovery struct {
	URL   string // the URL fetched
	Depth int
	// Links are the page's followable outlinks in page order, each once, as the
	// crawler's parser emits them: resolved and normalised, within its URL rules
	// (robots-disallowed ones included: robots.txt is checked at fetch time),
	// session ids not yet stripped (dedup does that). For a redirect, the
	// Location. Empty for other responses and for pages at the depth limit.
	Links []string
}

// Walk returns, in the breadth-first order of Expected, every response of a
// correct crawl to maxDepth with the URLs it discovers: the input the dedup
// service sees, for measuring it on a realistic link stream.
func (w *Web) Walk(maxDepth int) []Discovery {
	var walk []Discovery
	w.m.expected(maxDepth, &walk)
	return walk
}

func (m *model) expected(maxDepth int, walk *[]Discovery) Expectation {
	exp := Expectation{
		Fetch:          make(map[string]bool),
		Browser:        make(map[string]bool),
		Retried:        make(map[string]int),
		Forbidden:      make(map[string]bool),
		ForbiddenHosts: make(map[string]bool),
	}
	visited := make(map[string]bool)
	var unfollowed []string // nofollow targets and bait, forbidden unless fetched anyway

	// forbidden reports (and records) URLs robots.txt keeps the crawler
	// from. It is applied to every link seen, whatever its depth, because
	// robots rules hold at any depth.
	forbidden := func(u string) bool {
		h, pq, ok := m.lookup(u)
		if !ok {
			return false
		}
		if !m.allowed(h, pq) {
			exp.Forbidden[u] = true
			return true
		}
		return false
	}

	level := m.seedURLs()
	// Process level by level; same-depth redirect targets join the level
	// being processed, so every URL is visited at its minimal depth.
	for depth := 0; depth <= maxDepth && len(level) > 0; depth++ {
		var next []string
		for i := 0; i < len(level); i++ {
			u := level[i]
			if visited[u] {
				continue
			}
			visited[u] = true
			h, pq, ok := m.lookup(u)
			if !ok || forbidden(u) {
				continue
			}
			res := m.resource(h, pq)
			if res.status >= 500 {
				exp.Retried[u] = res.status
			} else {
				exp.Fetch[u] = true
			}
			// found points into *walk, which only grows again at the next URL.
			var found *Discovery
			if walk != nil {
				*walk = append(*walk, Discovery{URL: u, Depth: depth})
				found = &(*walk)[len(*walk)-1]
			}
			if res.locTarget != "" && res.status >= 300 && res.status < 400 {
				if found != nil {
					found.Links = append(found.Links, res.locTarget)
				}
				if !forbidden(res.locTarget) {
					level = append(level, res.locTarget)
				}
			}
			unfollowed = append(unfollowed, res.bait...)
			m.expectRequisites(res, 0, visited, forbidden, &exp, &unfollowed)
			if res.status != http.StatusOK || res.contentType != htmlType || (res.scripted && !m.cfg.Render) {
				continue
			}
			emitted := map[string]bool{}
			for _, l := range res.links {
				if l.target == "" {
					continue
				}
				if found != nil && depth < maxDepth && l.follow() && m.admits(l.target) &&
					!strings.HasPrefix(l.href, "#") && !emitted[l.target] {
					emitted[l.target] = true
					found.Links = append(found.Links, l.target)
				}
				k := m.key(l)
				if forbidden(k) {
					continue
				}
				if !l.follow() || !m.admits(l.target) {
					unfollowed = append(unfollowed, k)
					continue
				}
				if depth < maxDepth && !visited[k] {
					next = append(next, k)
				}
			}
		}
		level = next
	}

	m.expectSPA(&exp, visited)
	for _, u := range unfollowed {
		if !exp.Fetch[u] && exp.Retried[u] == 0 {
			exp.Forbidden[u] = true
		}
	}
	// The robots-503 host is off limits entirely; list its pages so tests
	// can name them, even those no link reaches at this depth.
	if h, ok := m.special[KindRobots503]; ok {
		exp.ForbiddenHosts[m.hosts[h].Name] = true
		exp.Forbidden[m.url(h, "/")] = true
		for n := 0; n < 5; n++ {
			exp.Forbidden[m.url(h, "/p/"+strconv.Itoa(n))] = true
		}
	}
	return exp
}

func (m *model) seedURLs() []string {
	seeds := make([]string, len(m.hosts))
	for i, h := range m.hosts {
		seeds[i] = h.Origin + "/"
	}
	return seeds
}

// RobotsDisallowed reports whether u's host serves a robots.txt (200) whose rules for
// ProductToken forbid u: a crawler that finds u must skip it as robots-disallowed.
func (w *Web) RobotsDisallowed(u string) bool {
	h, pq, ok := w.m.lookup(u)
	if !ok {
		return false
	}
	f := w.m.robots(h)
	return f.status == http.StatusOK && !robotsAllowed(f, ProductToken, pq)
}
