package synthweb

import (
	"net/http"
	"strconv"
)

// Expectation is what a correct crawl from Seeds must and must not request.
// URLs are absolute and normalised: http://ip:port/path?query, no fragment.
// Fetch and Retried are disjoint; robots.txt requests are in neither.
type Expectation struct {
	// Fetch holds every URL a correct crawl must request exactly once.
	Fetch map[string]bool
	// Retried holds URLs whose server always answers 5xx, with that status:
	// each must be requested at least once and at most 1+maxRetries times.
	Retried map[string]int
	// Forbidden holds URLs that must never be requested: robots-disallowed
	// ones, the robots-503 host's pages, and pages reachable only through
	// rel="nofollow" links or from inside non-HTML bodies.
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
// for ProductToken, and non-HTML bodies contribute no links.
func (w *Web) Expected(maxDepth int) Expectation { return w.m.expected(maxDepth) }

func (m *model) expected(maxDepth int) Expectation {
	exp := Expectation{
		Fetch:          make(map[string]bool),
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
			if res.locTarget != "" && res.status >= 300 && res.status < 400 {
				if !forbidden(res.locTarget) {
					level = append(level, res.locTarget)
				}
			}
			unfollowed = append(unfollowed, res.bait...)
			if res.status != http.StatusOK || res.contentType != htmlType {
				continue
			}
			for _, l := range res.links {
				if l.target == "" || forbidden(l.target) {
					continue
				}
				if !l.follow() {
					unfollowed = append(unfollowed, l.target)
					continue
				}
				if depth < maxDepth && !visited[l.target] {
					next = append(next, l.target)
				}
			}
		}
		level = next
	}

	for _, u := range unfollowed {
		if !exp.Fetch[u] && exp.Retried[u] == 0 {
			exp.Forbidden[u] = true
		}
	}
	// The robots-503 host is off limits entirely; list its pages so tests
	// can name them, even those no link reaches at this depth.
	if h, ok := m.special[KindRobots503]; ok {
		exp.ForbiddenHosts[m.hosts[h].Addr] = true
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
