package synthweb

import (
	"strconv"
	"strings"
	"time"
)

// robotsGroup is one group of a robots.txt. The web renders its robots.txt
// files from these and Expected evaluates the same values, so the served
// rules and the expectation cannot drift apart.
type robotsGroup struct {
	agents     []string
	rules      []robotsRule
	crawlDelay time.Duration
	comment    string
}

type robotsRule struct {
	allow   bool
	pattern string
}

type robotsFile struct {
	status   int // 200, or the error status served instead of a file
	groups   []robotsGroup
	sitemaps []string // Sitemap lines, absolute URLs
}

func renderRobots(groups []robotsGroup) string {
	var b strings.Builder
	for i, g := range groups {
		if i > 0 {
			b.WriteString("\n")
		}
		if g.comment != "" {
			b.WriteString("# " + g.comment + "\n")
		}
		for _, a := range g.agents {
			b.WriteString("User-agent: " + a + "\n")
		}
		if g.crawlDelay > 0 {
			b.WriteString("Crawl-delay: " + strconv.FormatFloat(g.crawlDelay.Seconds(), 'f', -1, 64) + "\n")
		}
		if len(g.rules) == 0 {
			// An empty Disallow is the conventional "allow everything"; it
			// keeps the group well-formed for strict parsers.
			b.WriteString("Disallow:\n")
		}
		for _, r := range g.rules {
			verb := "Disallow"
			if r.allow {
				verb = "Allow"
			}
			b.WriteString(verb + ": " + r.pattern + "\n")
		}
	}
	return b.String()
}

// robotsAllowed applies RFC 9309 to the web's own rules: the groups naming
// the agent (case-insensitively) are used, else the "*" groups; the longest
// matching pattern wins and Allow wins ties. pathQuery is the path plus any
// query, which patterns (including "$") are matched against.
func robotsAllowed(f robotsFile, agent, pathQuery string) bool {
	if pathQuery == "/robots.txt" {
		return true
	}
	switch {
	case f.status >= 500:
		return false // RFC 9309: unreachable robots.txt means complete disallow
	case f.status >= 400:
		return true // unavailable robots.txt means no restrictions
	}
	var rules []robotsRule
	for _, g := range f.groups {
		for _, a := range g.agents {
			if strings.EqualFold(a, agent) {
				rules = append(rules, g.rules...)
				break
			}
		}
	}
	if rules == nil {
		for _, g := range f.groups {
			for _, a := range g.agents {
				if a == "*" {
					rules = append(rules, g.rules...)
					break
				}
			}
		}
	}
	best, allowed := -1, true
	for _, r := range rules {
		if r.pattern == "" || !robotsMatch(r.pattern, pathQuery) {
			continue
		}
		if n := len(r.pattern); n > best || (n == best && r.allow) {
			best, allowed = n, r.allow
		}
	}
	return allowed
}

// robotsMatch matches a robots.txt path pattern: a prefix match where "*"
// matches any run of characters and a trailing "$" anchors the end.
func robotsMatch(pattern, path string) bool {
	anchored := strings.HasSuffix(pattern, "$")
	if anchored {
		pattern = strings.TrimSuffix(pattern, "$")
	}
	parts := strings.Split(pattern, "*")
	if !strings.HasPrefix(path, parts[0]) {
		return false
	}
	rest := path[len(parts[0]):]
	if len(parts) == 1 {
		return !anchored || rest == ""
	}
	// Greedy-leftmost matching of the middle parts is sufficient; the last
	// part, when anchored, must sit at the very end.
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	last := parts[len(parts)-1]
	if anchored {
		return strings.HasSuffix(rest, last)
	}
	return strings.Contains(rest, last)
}
