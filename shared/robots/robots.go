// Package robots implements the Robots Exclusion Protocol as RFC 9309 states it, plus the
// two common extensions Trawl honours (Crawl-delay and Sitemap), the HTTP status handling
// of a robots.txt fetch, and the compact encoding of one origin's verdict that the
// fetchers share through Redis. It is pure logic (no I/O), so the fetcher and the operator
// CLI (trawlctl robots check) decide exactly alike.
//
// # API
//
//	rules := robots.Parse(body, robots.DefaultMaxBytes)      // a 2xx robots.txt body
//	rules.Allowed("trawl", "/path?query")                    // RFC 9309 §2.2.2 matching
//	robots.FromStatus(code)                                  // Parsed, Unavailable, Unreachable
//	robots.ForResponse(code, body, robots.DefaultMaxBytes)   // rules for any final status
//
//	e := robots.NewEntry("trawl", code, body, robots.DefaultMaxBytes, time.Now())
//	e := robots.UnreachableEntry("trawl", err, time.Now())  // no response at all
//	d, err := robots.Decide(e, "trawl", "https://example.com/a?b") // what the fetcher does
//	d.Allowed, d.Class, d.Reason, d.Rule, d.CrawlDelay
//
//	raw, _ := e.MarshalBinary()        // the value under <prefix>:robots:<origin> in Redis
//	e, err := robots.UnmarshalEntry(raw)
//
// A status decides before the body: 2xx parses the body; 4xx other than 429 (and a
// redirect chain longer than five hops) allows everything; 5xx, 429, any other status and
// no response disallow everything. The path /robots.txt itself is always allowed.
//
// # Why the rules are matched here and not by github.com/temoto/robotstxt
//
// The brief was to build on temoto/robotstxt (v1.1.2). Its exported API turned out to offer
// only whole-file verdicts (FromBytes, TestAgent, FindGroup, Group.Test); the parsed rules,
// the tokeniser and the group list are unexported, so neither "use its line parsing and
// match ourselves" nor "wrap its groups" is possible without forking it. Pre-processing the
// body so that temoto accepts it fixes only the first of its gaps against RFC 9309:
//
//   - a rule before any user-agent line makes FromBytes fail for the whole file (the RFC
//     says to skip the line and keep the rest) — pre-processing could drop such lines, and
//     an unparseable Crawl-delay fails the whole file in the same way;
//   - wildcard patterns become unanchored regular expressions, so "Disallow: /a*b" also
//     matches "/x/a/b", and they are ranked by the length of the regular expression
//     (QuoteMeta escapes and ".*" included), not by the pattern's octets;
//   - of two equally long matching rules the first wins, where the RFC prefers Allow;
//   - a user-agent line matches every agent it is a prefix of ("User-agent: traw" selects
//     the group for "trawl"), where the RFC asks for the product token, case-insensitively;
//   - percent-encodings are compared as written (/%7Ejoe differs from /~joe);
//   - 429 is not told apart from other 4xx, and 3xx yields an error.
//
// No input rewriting can fix the ranking, tie, anchoring or agent-prefix behaviour, because
// they are decided inside TestAgent. So this package has its own small line parser (RFC 9309
// §2.2 grammar, forgiving as §2.2 allows) and matcher (§2.2.2, §2.2.3). temoto stays as an
// independent test oracle in the fetcher (shared/robotscache, so that
// shared/go.mod does not pull it into every service): it checks that both agree on every
// case where temoto's behaviour and the RFC coincide, and pins the cases above where they
// differ, so a regression here shows up as a disagreement with a second implementation.
//
// # What is implemented
//
//   - Lines end at CR, LF or CRLF; a UTF-8 byte order mark is skipped; "#" starts a comment.
//     A line is "key: value"; keys are case-insensitive, and common misspellings that major
//     crawlers accept (useragent, dissallow, crawldelay …) are read as their directive.
//     Lines that cannot be parsed are skipped, never the file.
//   - A group is one or more user-agent lines followed by rules. Allow, Disallow and
//     Crawl-delay are group members; a user-agent line after a member starts a new group.
//     Sitemap and unknown lines belong to no group and do not end one. Members before the
//     first user-agent line are ignored (RFC 9309 §2.1: they belong to no group).
//   - The agent is matched by its product token: the leading run of [A-Za-z_-] of the
//     user-agent value (so "ExampleBot/1.0" is "examplebot"), compared case-insensitively
//     and exactly. Every group naming the token is merged; if none does, the "*" groups
//     are; if there is none either, nothing is disallowed. A group that names the agent but
//     has no rules still counts: it allows everything instead of falling back to "*".
//   - Patterns not starting with "/" or "*" get a "/" in front (what crawlers do with
//     "Disallow: private"). An empty Allow or Disallow has no effect.
//   - "*" matches any run of octets and a final "$" anchors the end; a "$" elsewhere is a
//     literal. A pattern without "$" matches any path it is a prefix of.
//   - Both the pattern and the URL's path-and-query are put in one percent-encoded form
//     before comparing: encodings of unreserved characters decoded, hex uppercased, octets
//     that cannot appear literally (controls, space, non-ASCII …) encoded. In the URL a
//     literal "*" or "$" is compared as %2A / %24, so a pattern can name those characters
//     only in encoded form, as RFC 9309 §2.2.3 prescribes.
//   - The most specific match wins: the matching rule whose normalised pattern has the most
//     octets ("*" and "$" included); on a tie Allow wins. No match means allowed. The path
//     /robots.txt is always allowed.
//   - Crawl-delay is a non-negative decimal number of seconds (fractions allowed); invalid
//     values are skipped; if merged groups give several, the largest (most polite) counts.
//   - At most a caller-given number of octets is parsed (DefaultMaxBytes = 500 KiB, the
//     RFC's minimum); a line cut by that limit is dropped, since a shortened path could
//     widen or narrow a rule.
//   - The HTTP status of the robots.txt fetch decides before the body does (FromStatus).
package robots

import (
	"bytes"
	"strconv"
	"strings"
	"time"
)

// DefaultMaxBytes is how much of a robots.txt file is parsed: the minimum RFC 9309 §2.5
// asks crawlers to read.
const DefaultMaxBytes = 500 << 10

// Limits that keep a hostile file from making the cached verdict large.
const (
	maxSitemaps   = 64
	maxSitemapLen = 2048
)

type mode uint8

const (
	modeRules mode = iota // decided by the parsed groups
	modeAllowAll
	modeDisallowAll
)

// Rules is one robots.txt file parsed, or a verdict that stands for one (allow all,
// disallow all). It is immutable and safe for concurrent use.
type Rules struct {
	mode     mode
	groups   map[string]*group // by lowercased product token, "*" included
	sitemaps []string
}

type group struct {
	rules    []rule // sorted: longest pattern first, Allow before Disallow on equal length
	delay    time.Duration
	hasDelay bool
}

// AllowAll is the verdict for a robots.txt that is unavailable (4xx): no restrictions.
func AllowAll() *Rules { return &Rules{mode: modeAllowAll} }

// DisallowAll is the verdict for a robots.txt that is unreachable (5xx, 429, network
// error): nothing may be crawled.
func DisallowAll() *Rules { return &Rules{mode: modeDisallowAll} }

// Parse parses at most maxBytes octets of body (all of it if maxBytes <= 0; pass
// DefaultMaxBytes to read what the fetcher reads). It never fails: lines it cannot read are
// skipped. A line cut by maxBytes is dropped, so a caller that read maxBytes+1 octets lets
// Parse see that the file went on.
func Parse(body []byte, maxBytes int) *Rules {
	if maxBytes > 0 && len(body) > maxBytes {
		body = body[:maxBytes]
		if i := bytes.LastIndexAny(body, "\r\n"); i >= 0 {
			body = body[:i+1]
		} else {
			body = nil
		}
	}
	body = bytes.TrimPrefix(body, []byte("\xef\xbb\xbf"))

	r := &Rules{groups: make(map[string]*group)}
	var cur []*group // groups the current user-agent lines named
	inMembers := false
	for len(body) > 0 {
		var line []byte
		line, body = nextLine(body)
		key, val, ok := splitRecord(line)
		if !ok {
			continue
		}
		switch key {
		case keyUserAgent:
			tok := ProductToken(val)
			if tok == "" {
				continue
			}
			if inMembers {
				cur, inMembers = cur[:0:0], false
			}
			g := r.groups[tok]
			if g == nil {
				g = &group{}
				r.groups[tok] = g
			}
			if !containsGroup(cur, g) {
				cur = append(cur, g)
			}
		case keyAllow, keyDisallow:
			if len(cur) == 0 {
				continue
			}
			inMembers = true
			if val == "" {
				continue
			}
			ru := newRule(val, key == keyAllow)
			for _, g := range cur {
				g.rules = append(g.rules, ru)
			}
		case keyCrawlDelay:
			if len(cur) == 0 {
				continue
			}
			inMembers = true
			d, ok := parseDelay(val)
			if !ok {
				continue
			}
			for _, g := range cur {
				if !g.hasDelay || d > g.delay {
					g.delay, g.hasDelay = d, true
				}
			}
		case keySitemap:
			if val != "" && len(val) <= maxSitemapLen && len(r.sitemaps) < maxSitemaps {
				r.sitemaps = append(r.sitemaps, val)
			}
		}
	}
	for _, g := range r.groups {
		sortRules(g.rules)
	}
	return r
}

func containsGroup(gs []*group, g *group) bool {
	for _, x := range gs {
		if x == g {
			return true
		}
	}
	return false
}

// nextLine splits off one line ending in CR, LF or CRLF.
func nextLine(b []byte) (line, rest []byte) {
	i := bytes.IndexAny(b, "\r\n")
	if i < 0 {
		return b, nil
	}
	line, rest = b[:i], b[i+1:]
	if b[i] == '\r' && len(rest) > 0 && rest[0] == '\n' {
		rest = rest[1:]
	}
	return line, rest
}

const (
	keyUnknown = iota
	keyUserAgent
	keyAllow
	keyDisallow
	keyCrawlDelay
	keySitemap
)

// keys maps every accepted spelling of a directive; the misspellings are the ones major
// crawlers accept, so site owners rely on them.
var keys = map[string]int{
	"user-agent": keyUserAgent, "useragent": keyUserAgent, "user agent": keyUserAgent,
	"allow":    keyAllow,
	"disallow": keyDisallow, "dissallow": keyDisallow, "dissalow": keyDisallow, "disalow": keyDisallow, "disallaw": keyDisallow,
	"crawl-delay": keyCrawlDelay, "crawldelay": keyCrawlDelay, "crawl delay": keyCrawlDelay,
	"sitemap": keySitemap, "site-map": keySitemap,
}

func splitRecord(line []byte) (key int, val string, ok bool) {
	if i := bytes.IndexByte(line, '#'); i >= 0 {
		line = line[:i]
	}
	i := bytes.IndexByte(line, ':')
	if i < 0 {
		return 0, "", false
	}
	k := strings.ToLower(string(bytes.Trim(line[:i], " \t")))
	key, ok = keys[k]
	if !ok {
		return 0, "", false
	}
	return key, string(bytes.Trim(line[i+1:], " \t")), true
}

// ProductToken returns the RFC 9309 product token of a user-agent value, lowercased: "*",
// or the leading run of letters, "-" and "_" ("ExampleBot/1.0 (+https://…)" → "examplebot").
// It returns "" when the value starts with anything else.
func ProductToken(v string) string {
	v = strings.TrimSpace(v)
	if strings.HasPrefix(v, "*") {
		return "*"
	}
	n := 0
	for n < len(v) && isTokenChar(v[n]) {
		n++
	}
	return strings.ToLower(v[:n])
}

// IsProductToken reports whether s is a bare product token: one or more of [A-Za-z_-].
func IsProductToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isTokenChar(s[i]) {
			return false
		}
	}
	return true
}

func isTokenChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '-' || c == '_'
}

func parseDelay(v string) (time.Duration, bool) {
	f, err := strconv.ParseFloat(v, 64)
	// Refuse what time.Duration cannot hold instead of wrapping around.
	if err != nil || f < 0 || f != f || f > 1e9 {
		return 0, false
	}
	return time.Duration(f * float64(time.Second)), true
}

// selected returns the merged group that applies to agent, or nil when none does.
func (r *Rules) selected(agent string) *group {
	if tok := ProductToken(agent); tok != "" && tok != "*" {
		if g := r.groups[tok]; g != nil {
			return g
		}
	}
	return r.groups["*"]
}

// Allowed reports whether agent (a product token; a full User-Agent string is reduced to
// its token) may fetch pathAndQuery: the URL's path, with "?query" if it has one.
func (r *Rules) Allowed(agent, pathAndQuery string) bool {
	return r.decide(agent, pathAndQuery).Allowed
}

// match returns the rule that decides pathAndQuery for agent in a parsed file, or nil.
func (r *Rules) match(agent, pathAndQuery string) *rule {
	g := r.selected(agent)
	if g == nil {
		return nil
	}
	p := normalizePath(pathAndQuery)
	for i := range g.rules {
		if g.rules[i].match(p) {
			return &g.rules[i]
		}
	}
	return nil
}

func isRobotsTxt(pathAndQuery string) bool {
	p, _, _ := strings.Cut(pathAndQuery, "?")
	return p == "/robots.txt"
}

// CrawlDelay is the Crawl-delay agent's group asks for, or 0.
func (r *Rules) CrawlDelay(agent string) time.Duration {
	if g := r.selected(agent); g != nil {
		return g.delay
	}
	return 0
}

// Sitemaps lists the Sitemap lines' values in file order.
func (r *Rules) Sitemaps() []string { return r.sitemaps }

// AllowsAll reports a verdict that allows everything (unavailable robots.txt).
func (r *Rules) AllowsAll() bool { return r.mode == modeAllowAll }

// DisallowsAll reports a verdict that allows nothing (unreachable robots.txt).
func (r *Rules) DisallowsAll() bool { return r.mode == modeDisallowAll }

// ForAgent returns the part of r that agent uses: its merged group (filed under the
// agent's token) and the sitemaps. It is what the shared cache stores, so the cached form
// stays small however many groups the file has.
func (r *Rules) ForAgent(agent string) *Rules {
	if r.mode != modeRules {
		return &Rules{mode: r.mode, sitemaps: r.sitemaps}
	}
	out := &Rules{groups: make(map[string]*group, 1), sitemaps: r.sitemaps}
	if g := r.selected(agent); g != nil {
		out.groups[AgentKey(agent)] = g
	}
	return out
}

// AgentKey is the key an Entry is reduced for: agent's product token, or "*" when agent
// has none.
func AgentKey(agent string) string {
	if tok := ProductToken(agent); tok != "" {
		return tok
	}
	return "*"
}
