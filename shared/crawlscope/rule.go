package crawlscope

import (
	"fmt"
	"net"
	"regexp"

	"golang.org/x/net/publicsuffix"

	"github.com/trawl/trawl/shared/urlnorm"
)

// Rule is the URL-only part of the crawl's scope, compiled: what the parser holds every
// link to before the live site policies, and what trawlctl explain tells a URL by. Every
// URL is reached through a chain of links that each passed it, so the rules relative to
// the linking page (same host, same registered domain) keep the crawl on its seeds' sites.
type Rule struct {
	Mode         string         // Any, Host or Domain, canonical (Settings.Mode); "" is Any
	MaxDepth     int            // a URL deeper than it is not followed (TRAWL_MAX_DEPTH)
	MaxURLLength int            // bytes of the normalised URL; 0 = no limit
	Include      *regexp.Regexp // if set, a followed URL must match it
	Exclude      *regexp.Regexp // if set, a matching URL is never followed (wins over Include)
}

// Refusal names the rule that refused a URL. The values are the parser's labels of
// trawl_parser_links_rejected_total.
type Refusal string

const (
	RefusedDepth   Refusal = "depth"   // deeper than MaxDepth
	RefusedLength  Refusal = "length"  // longer than MaxURLLength
	RefusedInvalid Refusal = "invalid" // no host could be read from the URL
	RefusedScope   Refusal = "scope"   // another host or registered domain than the linking page
	RefusedExclude Refusal = "exclude" // matches Exclude
	RefusedInclude Refusal = "include" // does not match Include
	RefusedTrap    Refusal = "trap"    // a path segment repeats (urlnorm.RepeatsSegment)
)

// Rule compiles the settings into the rule, with maxDepth (TRAWL_MAX_DEPTH, the
// frontier's setting) as its depth limit.
func (s Settings) Rule(maxDepth int) (Rule, error) {
	mode := s.Mode()
	if mode == "" {
		return Rule{}, fmt.Errorf("crawlscope: TRAWL_SCOPE=%q: want any, host or domain", s.Scope)
	}
	inc, exc, err := s.Regexps()
	if err != nil {
		return Rule{}, fmt.Errorf("crawlscope: %w", err)
	}
	return Rule{Mode: mode, MaxDepth: maxDepth, MaxURLLength: s.MaxURLLength, Include: inc, Exclude: exc}, nil
}

// TooDeep reports a depth beyond MaxDepth.
func (r *Rule) TooDeep(depth int) bool { return depth > r.MaxDepth }

// TooLong reports a URL longer than MaxURLLength.
func (r *Rule) TooLong(u string) bool { return r.MaxURLLength > 0 && len(u) > r.MaxURLLength }

// Excluded reports a URL that matches Exclude.
func (r *Rule) Excluded(u string) bool { return r.Exclude != nil && r.Exclude.MatchString(u) }

// NotIncluded reports a URL that Include is set and does not match.
func (r *Rule) NotIncluded(u string) bool { return r.Include != nil && !r.Include.MatchString(u) }

// Trap reports a URL whose path repeats a segment: the signature of relative-link loops
// and calendar traps.
func (r *Rule) Trap(u string) bool { return urlnorm.RepeatsSegment(u) }

// From is a linking page as the rule compares hosts with it: worked out once per page,
// not per link.
type From struct {
	host string
	key  string // what another host must share with host to be in scope of it
}

// From returns the linking page at pageURL (a normalised URL).
func (r *Rule) From(pageURL string) From {
	h := urlnorm.HostOf(pageURL)
	return From{host: h, key: r.key(h)}
}

// key is what two hosts must share to be in scope of each other.
func (r *Rule) key(host string) string {
	if r.Mode != Domain {
		return host
	}
	return RegisteredDomain(host)
}

// Check applies the per-URL rules to a link of the page from, cheapest first, and names
// the first that refuses it. held false leaves out the two rules a page's requisites may
// be exempt from (the mode and Include), as a browser showing the page loads them from
// wherever they are; MaxDepth is the caller's, who knows the depth a link is found at.
func (r *Rule) Check(u string, from From, held bool) (Refusal, bool) {
	if r.TooLong(u) {
		return RefusedLength, false
	}
	host := urlnorm.HostOf(u)
	if host == "" {
		return RefusedInvalid, false
	}
	switch {
	case !held:
	case r.Mode == Host:
		if host != from.host {
			return RefusedScope, false
		}
	case r.Mode == Domain:
		if host != from.host && r.key(host) != from.key {
			return RefusedScope, false
		}
	}
	// Excluded and NotIncluded, spelt out: the nil tests stay inline on the parser's path
	// per link, where the calls would not.
	if r.Exclude != nil && r.Exclude.MatchString(u) {
		return RefusedExclude, false
	}
	if held && r.Include != nil && !r.Include.MatchString(u) {
		return RefusedInclude, false
	}
	if r.Trap(u) {
		return RefusedTrap, false
	}
	return "", true
}

// RegisteredDomain is host's eTLD+1 by the Public Suffix List (so a.example.co.uk and
// b.example.co.uk share example.co.uk, while alice.github.io and bob.github.io do not).
// An IP address, or a name that is itself a public suffix or has no registrable part
// (localhost), is its own domain.
func RegisteredDomain(host string) string {
	if net.ParseIP(host) != nil {
		return host
	}
	d, err := publicsuffix.EffectiveTLDPlusOne(host)
	if err != nil {
		return host
	}
	return d
}
