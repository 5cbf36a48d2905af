// Package scope decides which of a page's outlinks and requisites become crawl.discovered
// URLs: nofollow, the URL-only rule (crawlscope.Rule, which trawlctl explain tells a URL by
// too), the live site policies and the bounds on one page's links.
package scope

import (
	"fmt"
	"regexp"
	"strings"
	"sync/atomic"

	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/crawlscope"
	"github.com/trawl/trawl/shared/policy"
)

// Mode is the scope rule of TRAWL_SCOPE.
type Mode string

// The modes are crawlscope's values of TRAWL_SCOPE.
const (
	Any    Mode = crawlscope.Any    // follow links anywhere
	Host   Mode = crawlscope.Host   // only to the linking page's host
	Domain Mode = crawlscope.Domain // only to the linking page's registered domain (eTLD+1)
)

// ParseMode reads a TRAWL_SCOPE value by crawlscope's rule.
func ParseMode(s string) (Mode, error) {
	if m := (crawlscope.Settings{Scope: s}).Mode(); m != "" {
		return Mode(m), nil
	}
	return "", fmt.Errorf("scope: unknown mode %q (want any, host or domain)", s)
}

// Reason says why a link was not emitted; it is the label of
// trawl_parser_links_rejected_total.
type Reason string

const (
	ReasonNoFollow   Reason = "nofollow"    // rel=nofollow, or the page is nofollow
	ReasonOutlinks   Reason = "outlinks"    // beyond MaxOutlinks for the page
	ReasonBatchBytes Reason = "batch_bytes" // the page's batch would outgrow MaxBatchBytes
	ReasonEmbedHops  Reason = "embed_hops"  // a requisite more embed hops from a page than MaxEmbedHops
	// The URL-only rule (crawlscope.Rule) refused it.
	ReasonDepth   = Reason(crawlscope.RefusedDepth)   // depth+1 exceeds MaxDepth
	ReasonLength  = Reason(crawlscope.RefusedLength)  // URL longer than MaxURLLength
	ReasonScope   = Reason(crawlscope.RefusedScope)   // other host / domain than the page
	ReasonExclude = Reason(crawlscope.RefusedExclude) // matches TRAWL_EXCLUDE
	ReasonInclude = Reason(crawlscope.RefusedInclude) // does not match TRAWL_INCLUDE
	ReasonTrap    = Reason(crawlscope.RefusedTrap)    // a path segment repeats 3+ times
	ReasonInvalid = Reason(crawlscope.RefusedInvalid) // no host could be read from the URL
	// A live site policy's rule (shared/policy) refused it: deeper than the rule's
	// max_depth, not matching its include patterns, or matching one of its exclude patterns.
	ReasonPolicyDepth   Reason = "policy_depth"
	ReasonPolicyInclude Reason = "policy_include"
	ReasonPolicyExclude Reason = "policy_exclude"
)

// Reasons lists every Reason (to initialise metric series).
var Reasons = []Reason{ReasonNoFollow, ReasonDepth, ReasonLength, ReasonScope, ReasonExclude,
	ReasonInclude, ReasonTrap, ReasonOutlinks, ReasonBatchBytes, ReasonInvalid, ReasonEmbedHops,
	ReasonPolicyDepth, ReasonPolicyInclude, ReasonPolicyExclude}

// policyReason is the Reason of a refusal by Resolved.Admit, whose why starts with the
// field that refused ("exclude of surt:…").
func policyReason(why string) Reason {
	switch field, _, _ := strings.Cut(why, " "); {
	case strings.Contains(field, "include"):
		return ReasonPolicyInclude
	case strings.Contains(field, "depth"):
		return ReasonPolicyDepth
	}
	return ReasonPolicyExclude
}

// EmbedScope says where a page's requisites may be fetched from (TRAWL_EMBED_SCOPE).
type EmbedScope string

const (
	// EmbedAny lets a requisite leave the crawl's scope (TRAWL_SCOPE and TRAWL_INCLUDE), as
	// Heritrix's TransclusionDecideRule does: images, fonts and scripts are often served by
	// another host (a CDN), and a capture without them does not replay.
	EmbedAny EmbedScope = "any"
	// EmbedCrawl holds requisites to the scope links are held to.
	EmbedCrawl EmbedScope = "crawl"
)

// ParseEmbedScope reads a TRAWL_EMBED_SCOPE value.
func ParseEmbedScope(s string) (EmbedScope, error) {
	switch e := EmbedScope(strings.ToLower(strings.TrimSpace(s))); e {
	case EmbedAny, EmbedCrawl:
		return e, nil
	}
	return "", fmt.Errorf("scope: unknown embed scope %q (want any or crawl)", s)
}

// Config is the crawl scope.
type Config struct {
	Mode         Mode
	MaxDepth     int // a discovered URL's depth (page depth + 1) may not exceed it
	MaxURLLength int // bytes of the normalised URL; 0 = no limit
	MaxOutlinks  int // URLs emitted per page; 0 = no limit
	// MaxBatchBytes bounds the encoded size of one page's DiscoveredBatch so it stays under
	// the stream's message size; 0 = no limit.
	MaxBatchBytes int
	Include       *regexp.Regexp // if set, a URL must match it
	Exclude       *regexp.Regexp // if set, a matching URL is rejected (wins over Include)
	// MaxEmbedHops bounds a chain of requisites (a stylesheet, the sheet it imports, the
	// font that one loads): a requisite's Embeds may not exceed it.
	MaxEmbedHops int
	// EmbedScope says whether requisites may leave the crawl's scope; "" is EmbedAny.
	EmbedScope EmbedScope
}

// Filter applies a Config. It is safe for concurrent use.
type Filter struct {
	cfg Config
	// rule is the Config's URL-only part.
	rule crawlscope.Rule
	// scoped remembers whether the rule set last seen has scope rules.
	scoped atomic.Pointer[scopedSet]
}

// New checks cfg and returns its Filter.
func New(cfg Config) (*Filter, error) {
	if _, err := ParseMode(string(cfg.Mode)); err != nil {
		return nil, err
	}
	if cfg.MaxDepth < 0 || cfg.MaxURLLength < 0 || cfg.MaxOutlinks < 0 || cfg.MaxBatchBytes < 0 || cfg.MaxEmbedHops < 0 {
		return nil, fmt.Errorf("scope: negative limit in %+v", cfg)
	}
	if cfg.EmbedScope == "" {
		cfg.EmbedScope = EmbedAny
	}
	if _, err := ParseEmbedScope(string(cfg.EmbedScope)); err != nil {
		return nil, err
	}
	rule := crawlscope.Rule{Mode: string(cfg.Mode), MaxDepth: cfg.MaxDepth, MaxURLLength: cfg.MaxURLLength, Include: cfg.Include, Exclude: cfg.Exclude}
	return &Filter{cfg: cfg, rule: rule}, nil
}

// Page is the linking page.
type Page struct {
	URL      string
	Depth    int
	NoFollow bool // page-level nofollow
	// Embeds is the page's own embed hops (PageMeta.Embeds): 0 for a page reached by a
	// link, a seed or a redirect from one; a frame or style sheet fetched as a requisite
	// counts the hops that led to it.
	Embeds int
	// Rules are the live site policies the links are held to as well (each link's
	// Resolved.Admit at its depth), on top of the Config: a rule narrows the crawl for the
	// URLs it matches, never widens it past the process-wide settings. nil: none.
	Rules *policy.Set
}

// Rejected counts rejected links by reason.
type Rejected map[Reason]int

// Per-URL overhead of a Discovered in JSON besides the URL itself:
// {"url":"","depth":NN,"via":"link"}, plus a comma; a requisite adds
// ,"kind":"embed","embeds":NN.
const (
	discoveredOverhead = 48
	embedOverhead      = 28
)

// discoveredSize bounds the encoded size of d.
func discoveredSize(d crawlmsg.Discovered) int {
	n := len(d.URL) + discoveredOverhead
	if d.Kind != crawlmsg.KindPage {
		n += embedOverhead
	}
	return n
}

// groupOverhead is a link group's JSON besides its source and URLs: {"source":"","urls":[]},
// plus a comma.
const groupOverhead = 32

// GroupSize bounds the encoded size of a link group of links that Select returned, by the
// same measure Select holds one page's group to MaxBatchBytes with.
func GroupSize(g crawlmsg.LinkGroup) int {
	n := len(g.Source) + groupOverhead
	for _, d := range g.URLs {
		n += discoveredSize(d)
	}
	return n
}

// Select returns the links to publish, in page order, with depth = page depth + 1, and
// counts the others by reason. A link beyond MaxDepth is not emitted at all: marking it
// seen would stop a shorter path from reaching it later.
func (f *Filter) Select(p Page, links []crawlmsg.Link) ([]crawlmsg.Discovered, Rejected) {
	rej := Rejected{}
	if len(links) == 0 {
		return nil, rej
	}
	depth := p.Depth + 1
	if p.NoFollow {
		rej[ReasonNoFollow] += len(links)
		return nil, rej
	}
	if f.rule.TooDeep(depth) {
		for _, l := range links {
			if l.NoFollow {
				rej[ReasonNoFollow]++
			} else {
				rej[ReasonDepth]++
			}
		}
		return nil, rej
	}
	from := f.rule.From(p.URL)
	// Sized once: most links of a page pass.
	out := make([]crawlmsg.Discovered, 0, len(links))
	size := 0
	rules := f.activeRules(p.Rules)
	for _, l := range links {
		r, ok := ReasonNoFollow, false
		if !l.NoFollow {
			r, ok = f.check(l.URL, from, true)
		}
		if ok && rules != nil {
			r, ok = admit(rules, l.URL, depth)
		}
		if ok && f.cfg.MaxOutlinks > 0 && len(out) >= f.cfg.MaxOutlinks {
			r, ok = ReasonOutlinks, false
		}
		if ok && f.cfg.MaxBatchBytes > 0 && size+len(l.URL)+discoveredOverhead > f.cfg.MaxBatchBytes {
			r, ok = ReasonBatchBytes, false
		}
		if !ok {
			rej[r]++
			continue
		}
		size += len(l.URL) + discoveredOverhead
		out = append(out, crawlmsg.Discovered{URL: l.URL, Depth: depth, Via: crawlmsg.ViaLink})
	}
	return out, rej
}

// SelectEmbeds returns the page's requisites to publish, in page order, as Kind embed at
// the page's own depth (a requisite is no link hop) with Embeds one more than the page's,
// and counts the others by reason. linked are the page's links Select returned: a URL the
// page both links to and embeds goes once, as the link, which is followed wherever a link
// may go; it is fetched as a requisite only where a link may not (past the depth limit,
// outside the scope, nofollow). Requisites ignore nofollow, which is about links: a
// browser showing the page loads them. robots.txt still rules each fetch.
func (f *Filter) SelectEmbeds(p Page, embeds []crawlmsg.Link, linked []crawlmsg.Discovered) ([]crawlmsg.Discovered, Rejected) {
	rej := Rejected{}
	if len(embeds) == 0 {
		return nil, rej
	}
	hops := p.Embeds + 1
	if hops > f.cfg.MaxEmbedHops {
		rej[ReasonEmbedHops] += len(embeds)
		return nil, rej
	}
	size := 0
	skip := make(map[string]bool, len(linked))
	for _, d := range linked {
		size += discoveredSize(d)
		skip[d.URL] = true
	}
	from := f.rule.From(p.URL)
	crawlScope := f.cfg.EmbedScope == EmbedCrawl
	// Requisites held to the crawl's scope are held to the rules' too; by default they
	// may leave it, as they may leave TRAWL_SCOPE and TRAWL_INCLUDE.
	var rules *policy.Set
	if crawlScope {
		rules = f.activeRules(p.Rules)
	}
	var out []crawlmsg.Discovered
	for _, l := range embeds {
		if skip[l.URL] {
			continue
		}
		r, ok := f.check(l.URL, from, crawlScope)
		if ok && rules != nil {
			r, ok = admit(rules, l.URL, p.Depth)
		}
		d := crawlmsg.Discovered{URL: l.URL, Depth: p.Depth, Via: crawlmsg.ViaLink, Kind: crawlmsg.KindEmbed, Embeds: hops}
		if ok && f.cfg.MaxOutlinks > 0 && len(out) >= f.cfg.MaxOutlinks {
			r, ok = ReasonOutlinks, false
		}
		if ok && f.cfg.MaxBatchBytes > 0 && size+discoveredSize(d) > f.cfg.MaxBatchBytes {
			r, ok = ReasonBatchBytes, false
		}
		if !ok {
			rej[r]++
			continue
		}
		size += discoveredSize(d)
		out = append(out, d)
	}
	return out, rej
}

// RedirectReasons are the reasons Redirect refuses a target for (to initialise metric
// series).
var RedirectReasons = []Reason{ReasonLength, ReasonInvalid, ReasonScope, ReasonExclude,
	ReasonInclude, ReasonTrap, ReasonPolicyDepth, ReasonPolicyInclude, ReasonPolicyExclude}

// Redirect says whether the target of a 3xx at p is followed, and names the rule that
// refuses it; kind is what p was fetched as. Downstream only the live rules are applied
// again, so the target is held here to what p's own links (a requisite's: requisites) are
// held to, at p's depth (a redirect is no link hop): TRAWL_EXCLUDE, TRAWL_MAX_URL_LENGTH
// and the trap rule always. TRAWL_SCOPE and TRAWL_INCLUDE do not bind a seed's target
// (depth 0), which stands for the seed (Heritrix's seedsRedirectNewSeeds: a seed
// example.com moved to www.example.com is crawled there under TRAWL_SCOPE=host too), nor a
// sitemap's, whose listed URLs stay held to its robots.txt origin (Under, which the
// redirect keeps).
func (f *Filter) Redirect(p Page, kind crawlmsg.Kind, target string) (Reason, bool) {
	held, ruled := false, false // held to TRAWL_SCOPE and TRAWL_INCLUDE; to the live rules
	switch kind {
	case crawlmsg.KindEmbed:
		held = f.cfg.EmbedScope == EmbedCrawl
		ruled = held
	case crawlmsg.KindSitemap:
		return f.Sitemap(p, target)
	default:
		held, ruled = p.Depth > 0, true
	}
	r, ok := f.check(target, f.rule.From(p.URL), held)
	if !ok || !ruled {
		return r, ok
	}
	if rules := f.activeRules(p.Rules); rules != nil {
		return admit(rules, target, p.Depth)
	}
	return "", true
}

// Sitemap says whether a sitemap that p (a sitemap index, or a sitemap's 3xx) names is
// fetched: held to TRAWL_EXCLUDE, TRAWL_MAX_URL_LENGTH and the trap rule, which no URL
// escapes, but not to TRAWL_SCOPE and TRAWL_INCLUDE, since the URLs it lists are held to
// its robots.txt origin (Under) instead.
func (f *Filter) Sitemap(p Page, target string) (Reason, bool) {
	return f.check(target, f.rule.From(p.URL), false)
}

// activeRules is rules, or nil when no rule sets a scope field (policy.ScopeFields), so
// that a crawl whose rules are all about politeness pays nothing per link for them. The
// answer is kept for the set last asked about: a set is immutable and replaced whole on a
// change, so one scan of its rules per change is enough.
func (f *Filter) activeRules(rules *policy.Set) *policy.Set {
	if rules == nil || len(rules.Rules()) == 0 {
		return nil
	}
	if k := f.scoped.Load(); k != nil && k.set == rules {
		return k.active
	}
	k := &scopedSet{set: rules}
	sf := policy.ScopeFields()
	for _, r := range rules.Rules() {
		if r.SetsAny(sf...) {
			k.active = rules
			break
		}
	}
	f.scoped.Store(k)
	return k.active
}

// scopedSet is whether a rule set has scope rules (active is the set, or nil).
type scopedSet struct{ set, active *policy.Set }

// admit asks the URL's policy whether it may be followed at depth.
func admit(rules *policy.Set, u string, depth int) (Reason, bool) {
	if ok, why := rules.Admit(u, depth); !ok {
		return policyReason(why), false
	}
	return "", true
}

// check applies the URL-only rule; inScope adds TRAWL_SCOPE and TRAWL_INCLUDE.
func (f *Filter) check(u string, from crawlscope.From, inScope bool) (Reason, bool) {
	r, ok := f.rule.Check(u, from, inScope)
	return Reason(r), ok
}
