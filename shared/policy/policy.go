// Package policy is Trawl's live per-site rules: what an operator sets for one host, a
// registrable domain, a URL prefix (SURT form) or a server address block while the crawl
// runs. It holds the rule model and its precedence (Compile, Set), the store in Redis with
// its version and audit log (Store), the watcher every service keeps current from it
// (Watcher), and named secrets that rules refer to but that never enter Redis (Secrets).
//
// Precedence, most specific wins, field by field (a rule sets only some fields; each
// field of a URL's policy comes from the most specific rule that sets it, else the
// process-wide setting):
//
//	address block (CIDR; a longer prefix beats a shorter one; only under TRAWL_POLITENESS=ip,
//	  and only for the server's own limits: delay, factor, connections)
//	< domain (a registrable domain or any name under it; a longer name beats a shorter one)
//	< host (exactly one host name)
//	< URL prefix (SURT; a longer prefix beats a shorter one)
//
// A SURT prefix that stops at the authority ("http://(com,example,)" or
// "http://(com,example,") is stored as the host or domain rule it equals, so each scope
// has one spelling. A URL prefix with a path may set only per-URL fields (block, depth,
// include/exclude, recrawl intervals, User-Agent, headers, cookies, credentials): the
// politeness fields are per host, and a rule that sets them on a path prefix is refused.
// Two rules never share a scope: setting a scope again replaces its rule.
package policy

import (
	"net/netip"
	"regexp"
	"time"
)

// Kind is the kind of a rule's scope.
type Kind string

const (
	KindAddr   Kind = "cidr"   // server addresses: "cidr:192.0.2.0/24", "cidr:2001:db8::/32"
	KindDomain Kind = "domain" // a registrable domain or a name under it: "domain:example.co.uk"
	KindHost   Kind = "host"   // one host name: "host:www.example.com"
	KindPrefix Kind = "surt"   // a URL prefix in SURT form: "surt:http://(com,example,)/private/"
)

// Scope is what a rule applies to, in canonical form (lowercase ASCII host names,
// canonical prefixes and CIDRs), so that equal scopes are equal strings.
type Scope struct {
	Kind  Kind
	Value string
}

// String is the scope as written in rules files and by trawlctl: "<kind>:<value>".
func (s Scope) String() string { return string(s.Kind) + ":" + s.Value }

// ParseScope reads a scope: "host:NAME", "domain:NAME", "surt:PREFIX", "cidr:PREFIX", or a
// plain http(s) URL prefix ("https://example.com/private/"), which becomes its SURT form.
// A domain must not be a public suffix itself (publicsuffix list).
func ParseScope(s string) (Scope, error) { return parseScope(s) }

// CrawlDelay says how a host's robots.txt Crawl-delay is honoured.
type CrawlDelay struct {
	// Exact honours the Crawl-delay however long it is; otherwise it is capped at Cap.
	Exact bool
	Cap   time.Duration
}

// Duration is a time.Duration written as Go writes durations ("1.5s", "2m") in JSON and
// YAML.
type Duration time.Duration

// Rule is one scope's settings. A nil field is unset: the next less specific rule, or the
// process-wide setting, decides it.
type Rule struct {
	Scope Scope `json:"-"`

	// Politeness, per host (per server address for a cidr rule).
	MinDelay    *Duration   `json:"min_delay,omitempty"`    // least gap between two requests
	DelayFactor *float64    `json:"delay_factor,omitempty"` // k: the gap's multiple of the response time
	CrawlDelay  *CrawlDelay `json:"crawl_delay,omitempty"`
	// Connections is the most requests in flight to one host (1 by default). N
	// connections give the host N times one connection's rate: each request starts at
	// least 1/N of one connection's cycle (the last response time and the host's gap)
	// after the previous request to the host started.
	Connections *int `json:"connections,omitempty"`

	// Budgets: pages fetched per host (for each host the rule matches), and, on a domain
	// rule only, pages fetched from all the domain's hosts together.
	HostBudget   *int64 `json:"host_budget,omitempty"`
	DomainBudget *int64 `json:"domain_budget,omitempty"`

	// Scope of the crawl.
	MaxDepth *int     `json:"max_depth,omitempty"`
	Include  []string `json:"include,omitempty"` // regexps; a URL must match one (none = all)
	Exclude  []string `json:"exclude,omitempty"` // regexps; a URL matching one is out of scope

	// Recrawl intervals, bounding the adaptive schedule's interval.
	RecrawlMin *Duration `json:"recrawl_min,omitempty"`
	RecrawlMax *Duration `json:"recrawl_max,omitempty"`

	// Requests. Secret values are named, never stored: the name refers to a secret the
	// fetcher reads from TRAWL_SECRETS_DIR (Secrets).
	UserAgent     *string           `json:"user_agent,omitempty"`
	Headers       map[string]string `json:"headers,omitempty"`        // plain extra request headers
	HeaderSecrets map[string]string `json:"header_secrets,omitempty"` // header → secret name
	Cookies       *string           `json:"cookies,omitempty"`        // secret name: a Cookie header value
	Credentials   *string           `json:"credentials,omitempty"`    // secret name: "user:password" for HTTP basic

	// Render says whether the scope's HTML pages are rendered in a browser: "always",
	// "never", or "auto" (when the parser detects an application shell). Unset: the
	// process-wide TRAWL_RENDER.
	Render *string `json:"render,omitempty"`

	// Block stops every request to the scope: queued URLs are parked, not lost, and resume
	// when a later change sets it false or removes the rule.
	Block *bool `json:"block,omitempty"`

	// Note is the operator's word on why the rule exists ("owner asked 2026-11-26").
	Note string `json:"note,omitempty"`
}

// Origin is where a rule came from: the change that set it and, for a rules file, its
// line. Shown by trawlctl explain and policy ls.
type Origin struct {
	Version int64     `json:"version"` // the store's version after the change
	At      time.Time `json:"at"`
	By      string    `json:"by,omitempty"`     // who, as given to trawlctl
	Source  string    `json:"source,omitempty"` // "rules.yaml:12", or "" for policy set
}

// Stored is a rule with its origin, as the store keeps it.
type Stored struct {
	Rule
	Origin Origin `json:"origin"`
}

// Field names a setting a rule can decide, as explain prints it.
type Field string

const (
	FMinDelay      Field = "min_delay"
	FDelayFactor   Field = "delay_factor"
	FCrawlDelay    Field = "crawl_delay"
	FConnections   Field = "connections"
	FHostBudget    Field = "host_budget"
	FDomainBudget  Field = "domain_budget"
	FMaxDepth      Field = "max_depth"
	FInclude       Field = "include"
	FExclude       Field = "exclude"
	FRecrawlMin    Field = "recrawl_min"
	FRecrawlMax    Field = "recrawl_max"
	FUserAgent     Field = "user_agent"
	FHeaders       Field = "headers"
	FHeaderSecrets Field = "header_secrets"
	FCookies       Field = "cookies"
	FCredentials   Field = "credentials"
	FRender        Field = "render"
	FBlock         Field = "block"
)

// Resolved is the policy of one host, URL or server address: the merged fields of every
// rule that matches it, and for each field set, the rule that decided it. Unset fields are
// nil: the caller's process-wide setting applies.
// A Resolved is read-only: its fields and maps may be shared with the Set and with other
// lookups.
type Resolved struct {
	Rule
	// From names, for each field a rule decided, that rule's scope and origin. The rules
	// are the Set's own, shared and read-only: a copy per field would make each host's
	// premerged policy kilobytes, which every garbage collection of a fetcher or parser
	// with 10,000 rules would scan.
	From map[Field]*Stored
	// Domain is the domain rule's name whose DomainBudget applies, if any.
	Domain string

	// The compiled Include and Exclude of the rules that decided them.
	include, exclude []*regexp.Regexp
}

// Blocked says the policy blocks requests.
func (r Resolved) Blocked() bool { return r.Block != nil && *r.Block }

// Set is a compiled, immutable set of rules at one store version. Its lookups are safe for
// concurrent use and cost map lookups, not a scan of the rules, so a crawl with 10,000
// rules pays the same per URL as one with ten.
type Set struct {
	version int64
	rules   []Stored
	impl    *matcher
	// domainBudgets: some rule sets a domain budget.
	domainBudgets bool
}

// Compile checks every rule (scope, field ranges, regexps, fields allowed for the scope)
// and builds the lookup structure. An error names each bad rule by its scope.
func Compile(rules []Stored, version int64) (*Set, error) { return compile(rules, version) }

// Empty is the set with no rules.
func Empty() *Set { s, _ := Compile(nil, 0); return s }

// DomainBudgets says some rule sets a domain budget, so that a scheduler without any
// skips looking up the domain of every task it dispatches.
func (s *Set) DomainBudgets() bool { return s.domainBudgets }

// Version is the store version the set was read at (0: no rule ever set).
func (s *Set) Version() int64 { return s.version }

// Rules are the set's rules, sorted by scope string.
func (s *Set) Rules() []Stored { return s.rules }

// Host is a host's policy: the domain and host rules that match it (and any SURT prefix
// that covers the whole host). The per-host politeness, budget and block fields are
// decided here.
func (s *Set) Host(host string) Resolved { return s.impl.host(host) }

// URL is a normalised URL's policy: Host's, with the URL prefix rules that match it on top.
func (s *Set) URL(rawURL string) Resolved { return s.impl.url(rawURL) }

// Addr is a server address's policy under TRAWL_POLITENESS=ip: the address-block rules
// that contain it.
func (s *Set) Addr(a netip.Addr) Resolved { return s.impl.addr(a) }

// Covers says whether a rule of the set can apply to the host: a host, domain or prefix
// rule whose scope covers it. Used to find the hosts a change touches.
func (s *Set) Covers(sc Scope, host string) bool { return s.impl.covers(sc, host) }

// PrefixBlocks says whether a URL-prefix rule of host sets block: some of its URLs may be
// blocked while others are not, so whether a URL of it is blocked is Set.URL's to say.
func (s *Set) PrefixBlocks(host string) bool { return s.impl.prefixBlocks(host) }

// Change is one operation of an apply: set a rule (replacing its scope's rule) or remove
// a scope's rule.
type Change struct {
	Remove bool
	Rule   Rule
	Source string // "rules.yaml:12"
}

// Diff is what applying changes would do: each scope's old and new rule (nil when absent).
type Diff struct {
	Scope Scope
	Old   *Stored
	New   *Rule
}

func (d Duration) String() string { return time.Duration(d).String() }

// Admit says whether a URL found at depth is in the crawl's scope under its policy: no
// deeper than MaxDepth, matching an Include when there are any and no Exclude. When not,
// why names the field and the rule that decided it ("exclude of surt:http://(com,example,)/private/").
// The parser asks it of every link, the scheduler of queued URLs when a change narrows a
// scope, trawlctl explain of the URL it explains.
func (r Resolved) Admit(rawURL string, depth int) (ok bool, why string) {
	if r.include == nil && len(r.Include) > 0 || r.exclude == nil && len(r.Exclude) > 0 {
		r.include, r.exclude = compilePatterns(r.Include), compilePatterns(r.Exclude)
	}
	return r.admit(rawURL, depth)
}
