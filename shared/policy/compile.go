package policy

import (
	"cmp"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"
)

// Bounds of the fields: generous enough for any site an operator meets, tight enough that
// a typo (a delay in hours, a million connections) is refused rather than obeyed.
const (
	maxDelay       = 24 * time.Hour
	maxDelayFactor = 1000
	maxConnections = 64
	maxRecrawl     = 365 * 24 * time.Hour
)

// perHostFields are the politeness fields: per host, so refused on a path prefix.
var perHostFields = []Field{FMinDelay, FDelayFactor, FCrawlDelay, FConnections, FHostBudget, FDomainBudget}

// RenderModes are the values of Rule.Render.
var RenderModes = []string{"always", "never", "auto"}

// plainHeadersRefused are request headers a rule may not set in plain text: the request's
// own framing, and the ones that carry credentials, which belong in secrets.
var plainHeadersRefused = map[string]string{
	"host":                "the URL decides it",
	"content-length":      "the request decides it",
	"transfer-encoding":   "the request decides it",
	"connection":          "the client decides it",
	"cookie":              "use cookies (a secret name)",
	"authorization":       "use credentials or header_secrets (a secret name)",
	"proxy-authorization": "use header_secrets (a secret name)",
	"user-agent":          "use user_agent",
}

// Set fields (the set's matcher) are built by compile.
type matcher struct {
	hosts    map[string]*entry
	domains  map[string]*entry
	prefixes map[string][]*entry // host → its prefix rules, longest path first
	addrs    map[int]map[string]*entry
	addrLen  []int // the prefix lengths present, longest first
	// scope holds the host, domain and prefix rules that set max depth, include or
	// exclude: the only ones Admit, asked of every link, needs to visit. Most rules are
	// about politeness, so this is usually far smaller.
	scope struct {
		hosts, domains map[string]*entry
		prefixes       map[string][]*entry
	}
}

// entry is one compiled rule.
type entry struct {
	st       *Stored // in the Set's rules: one copy of each rule, whose fields the GC scans
	port     string  // prefix rules: the port, "" for the scheme's default
	path     string  // prefix rules: the path prefix
	include  []*regexp.Regexp
	exclude  []*regexp.Regexp
	addrBits int
	// merged: host and domain rules, the rule merged with the domain rules above it (nil
	// for the others, which are most rules of a large set).
	merged *Resolved
}

func compile(rules []Stored, version int64) (*Set, error) {
	m := &matcher{
		hosts:    map[string]*entry{},
		domains:  map[string]*entry{},
		prefixes: map[string][]*entry{},
		addrs:    map[int]map[string]*entry{},
	}
	var errs []error
	seen := make(map[Scope]bool, len(rules))
	// Sorted first, so that each entry can point at its rule in the set's list.
	sorted := slices.Clone(rules)
	// In Scope.String order, compared without building the strings: no kind is a prefix of
	// another, so the kinds order as "kind:" does.
	slices.SortStableFunc(sorted, func(a, b Stored) int {
		return cmp.Or(cmp.Compare(a.Scope.Kind, b.Scope.Kind), cmp.Compare(a.Scope.Value, b.Scope.Value))
	})
	entries := make([]*entry, 0, len(sorted))
	kept := sorted[:0]
	for _, st := range sorted {
		e, err := compileRule(st)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if seen[st.Scope] {
			errs = append(errs, fmt.Errorf("policy: %s: two rules for one scope", st.Scope))
			continue
		}
		seen[st.Scope] = true
		kept = append(kept, st)
		entries = append(entries, e)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	sorted = slices.Clip(kept)
	for i, e := range entries {
		e.st = &sorted[i]
		switch e.st.Scope.Kind {
		case KindHost:
			m.hosts[e.st.Scope.Value] = e
		case KindDomain:
			m.domains[e.st.Scope.Value] = e
		case KindPrefix:
			host, port, path := prefixParts(e.st.Scope.Value)
			e.port, e.path = port, path
			m.prefixes[host] = append(m.prefixes[host], e)
		case KindAddr:
			bits := strings.LastIndexByte(e.st.Scope.Value, '/')
			var n int
			fmt.Sscanf(e.st.Scope.Value[bits+1:], "%d", &n)
			e.addrBits = n
			if m.addrs[n] == nil {
				m.addrs[n] = map[string]*entry{}
				m.addrLen = append(m.addrLen, n)
			}
			m.addrs[n][e.st.Scope.Value] = e
		}
	}
	for _, es := range m.prefixes {
		sort.Slice(es, func(i, j int) bool {
			if len(es[i].path) != len(es[j].path) {
				return len(es[i].path) > len(es[j].path)
			}
			return es[i].st.Scope.Value < es[j].st.Scope.Value
		})
	}
	sort.Sort(sort.Reverse(sort.IntSlice(m.addrLen)))
	m.premerge()
	m.scope.hosts, m.scope.domains = scopeEntries(m.hosts), scopeEntries(m.domains)
	m.scope.prefixes = map[string][]*entry{}
	for h, es := range m.prefixes {
		for _, e := range es {
			if e.setsScope() {
				m.scope.prefixes[h] = append(m.scope.prefixes[h], e)
			}
		}
	}
	set := &Set{version: version, rules: sorted, impl: m}
	for _, st := range sorted {
		if b := st.DomainBudget; b != nil && *b > 0 {
			set.domainBudgets = true
			break
		}
	}
	return set, nil
}

// setsScope says the rule sets a field Admit decides by.
func (e *entry) setsScope() bool { return e.st.SetsAny(scopeFields...) }

// scopeEntries are the entries of m that set a field Admit decides by.
func scopeEntries(m map[string]*entry) map[string]*entry {
	out := map[string]*entry{}
	for k, e := range m {
		if e.setsScope() {
			out[k] = e
		}
	}
	return out
}

// compileRule checks one rule and compiles its patterns. Its errors name the scope.
func compileRule(st Stored) (*entry, error) {
	sc, err := ParseScope(st.Scope.String())
	if err != nil {
		return nil, err
	}
	if sc != st.Scope {
		return nil, fmt.Errorf("policy: %s: not the canonical form %s", st.Scope, sc)
	}
	e := &entry{}
	var errs []string
	bad := func(f Field, format string, args ...any) {
		errs = append(errs, string(f)+": "+fmt.Sprintf(format, args...))
	}
	r := &st.Rule
	if r.MinDelay != nil && (*r.MinDelay < 0 || time.Duration(*r.MinDelay) > maxDelay) {
		bad(FMinDelay, "%s is outside 0..%s", r.MinDelay, maxDelay)
	}
	if r.DelayFactor != nil && (*r.DelayFactor < 0 || *r.DelayFactor > maxDelayFactor || *r.DelayFactor != *r.DelayFactor) {
		bad(FDelayFactor, "%v is outside 0..%d", *r.DelayFactor, maxDelayFactor)
	}
	if r.CrawlDelay != nil && !r.CrawlDelay.Exact && (r.CrawlDelay.Cap < 0 || r.CrawlDelay.Cap > maxDelay) {
		bad(FCrawlDelay, "cap %s is outside 0..%s", r.CrawlDelay.Cap, maxDelay)
	}
	if r.Connections != nil && (*r.Connections < 1 || *r.Connections > maxConnections) {
		bad(FConnections, "%d is outside 1..%d", *r.Connections, maxConnections)
	}
	if r.HostBudget != nil && *r.HostBudget < 0 {
		bad(FHostBudget, "%d is negative", *r.HostBudget)
	}
	if r.DomainBudget != nil && *r.DomainBudget < 0 {
		bad(FDomainBudget, "%d is negative", *r.DomainBudget)
	}
	if r.MaxDepth != nil && *r.MaxDepth < 0 {
		bad(FMaxDepth, "%d is negative", *r.MaxDepth)
	}
	compileAll := func(f Field, pats []string) []*regexp.Regexp {
		var out []*regexp.Regexp
		for _, p := range pats {
			re, err := regexp.Compile(p)
			if err != nil {
				bad(f, "%q does not compile: %v", p, err)
				continue
			}
			out = append(out, re)
		}
		return out
	}
	e.include = compileAll(FInclude, r.Include)
	e.exclude = compileAll(FExclude, r.Exclude)
	for _, f := range []struct {
		f Field
		d *Duration
	}{{FRecrawlMin, r.RecrawlMin}, {FRecrawlMax, r.RecrawlMax}} {
		if f.d != nil && (*f.d <= 0 || time.Duration(*f.d) > maxRecrawl) {
			bad(f.f, "%s is outside (0, %s]", f.d, maxRecrawl)
		}
	}
	if r.RecrawlMin != nil && r.RecrawlMax != nil && *r.RecrawlMin > *r.RecrawlMax {
		bad(FRecrawlMin, "%s is above recrawl_max %s", r.RecrawlMin, r.RecrawlMax)
	}
	if r.UserAgent != nil && (strings.TrimSpace(*r.UserAgent) == "" || !httpguts.ValidHeaderFieldValue(*r.UserAgent)) {
		bad(FUserAgent, "%q is empty or not a header value", *r.UserAgent)
	}
	for _, k := range sortedKeys(r.Headers) {
		if !httpguts.ValidHeaderFieldName(k) {
			bad(FHeaders, "%q is not a header name", k)
		} else if why, no := plainHeadersRefused[strings.ToLower(k)]; no {
			bad(FHeaders, "%s may not be set here: %s", k, why)
		} else if !httpguts.ValidHeaderFieldValue(r.Headers[k]) {
			bad(FHeaders, "%s: the value is not a header value", k)
		}
	}
	for _, k := range sortedKeys(r.HeaderSecrets) {
		if !httpguts.ValidHeaderFieldName(k) {
			bad(FHeaderSecrets, "%q is not a header name", k)
		} else if err := checkSecretName(r.HeaderSecrets[k]); err != nil {
			bad(FHeaderSecrets, "%s: %v", k, err)
		}
	}
	for _, f := range []struct {
		f Field
		s *string
	}{{FCookies, r.Cookies}, {FCredentials, r.Credentials}} {
		if f.s != nil {
			if err := checkSecretName(*f.s); err != nil {
				bad(f.f, "%v", err)
			}
		}
	}
	if r.Render != nil && !contains(RenderModes, *r.Render) {
		bad(FRender, "%q is not one of %s", *r.Render, strings.Join(RenderModes, ", "))
	}
	switch sc.Kind {
	case KindPrefix:
		for _, f := range r.setFields() {
			if contains(perHostFields, f) {
				bad(f, "a URL prefix rule may not set it: politeness and budgets are per host (use host:%s or a domain rule)", prefixHost(sc))
			}
		}
	case KindAddr:
		for _, f := range r.setFields() {
			if f != FMinDelay && f != FDelayFactor && f != FConnections {
				bad(f, "an address-block rule sets only min_delay, delay_factor and connections (the server's own limits)")
			}
		}
	case KindHost:
		if r.DomainBudget != nil {
			bad(FDomainBudget, "only a domain rule has a domain budget")
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("policy: %s: %s", sc, strings.Join(errs, "; "))
	}
	return e, nil
}

func prefixHost(sc Scope) string { h, _, _ := prefixParts(sc.Value); return h }

// checkSecretName: a secret is a file in the secrets directory, so its name is one plain
// file name.
func checkSecretName(n string) error {
	if n == "" || len(n) > 255 || strings.HasPrefix(n, ".") {
		return fmt.Errorf("secret name %q: want a file name such as site-cookie", n)
	}
	for _, c := range n {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("secret name %q: only letters, digits, '.', '_' and '-'", n)
		}
	}
	return nil
}

func contains[T comparable](xs []T, x T) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

func sortedKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
