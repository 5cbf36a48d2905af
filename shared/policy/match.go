package policy

import (
	"net/netip"
	"regexp"
	"slices"
	"strings"
)

// fieldOps are, per field, whether a rule sets it and how it is copied: the one list the
// merge, the per-scope checks and explain's field names all follow.
var fieldOps = []struct {
	f    Field
	set  func(r *Rule) bool
	copy func(dst, src *Rule)
}{
	{FMinDelay, func(r *Rule) bool { return r.MinDelay != nil }, func(d, s *Rule) { d.MinDelay = s.MinDelay }},
	{FDelayFactor, func(r *Rule) bool { return r.DelayFactor != nil }, func(d, s *Rule) { d.DelayFactor = s.DelayFactor }},
	{FCrawlDelay, func(r *Rule) bool { return r.CrawlDelay != nil }, func(d, s *Rule) { d.CrawlDelay = s.CrawlDelay }},
	{FConnections, func(r *Rule) bool { return r.Connections != nil }, func(d, s *Rule) { d.Connections = s.Connections }},
	{FHostBudget, func(r *Rule) bool { return r.HostBudget != nil }, func(d, s *Rule) { d.HostBudget = s.HostBudget }},
	{FDomainBudget, func(r *Rule) bool { return r.DomainBudget != nil }, func(d, s *Rule) { d.DomainBudget = s.DomainBudget }},
	{FMaxDepth, func(r *Rule) bool { return r.MaxDepth != nil }, func(d, s *Rule) { d.MaxDepth = s.MaxDepth }},
	{FInclude, func(r *Rule) bool { return len(r.Include) > 0 }, func(d, s *Rule) { d.Include = s.Include }},
	{FExclude, func(r *Rule) bool { return len(r.Exclude) > 0 }, func(d, s *Rule) { d.Exclude = s.Exclude }},
	{FRecrawlMin, func(r *Rule) bool { return r.RecrawlMin != nil }, func(d, s *Rule) { d.RecrawlMin = s.RecrawlMin }},
	{FRecrawlMax, func(r *Rule) bool { return r.RecrawlMax != nil }, func(d, s *Rule) { d.RecrawlMax = s.RecrawlMax }},
	{FUserAgent, func(r *Rule) bool { return r.UserAgent != nil }, func(d, s *Rule) { d.UserAgent = s.UserAgent }},
	{FHeaders, func(r *Rule) bool { return len(r.Headers) > 0 }, func(d, s *Rule) { d.Headers = s.Headers }},
	{FHeaderSecrets, func(r *Rule) bool { return len(r.HeaderSecrets) > 0 }, func(d, s *Rule) { d.HeaderSecrets = s.HeaderSecrets }},
	{FCookies, func(r *Rule) bool { return r.Cookies != nil }, func(d, s *Rule) { d.Cookies = s.Cookies }},
	{FCredentials, func(r *Rule) bool { return r.Credentials != nil }, func(d, s *Rule) { d.Credentials = s.Credentials }},
	{FRender, func(r *Rule) bool { return r.Render != nil }, func(d, s *Rule) { d.Render = s.Render }},
	{FBlock, func(r *Rule) bool { return r.Block != nil }, func(d, s *Rule) { d.Block = s.Block }},
}

// Fields are every field a rule can set, in the order explain prints them.
func Fields() []Field {
	out := make([]Field, len(fieldOps))
	for i, op := range fieldOps {
		out[i] = op.f
	}
	return out
}

// setFields are the fields r sets.
func (r *Rule) setFields() []Field {
	var out []Field
	for _, op := range fieldOps {
		if op.set(r) {
			out = append(out, op.f)
		}
	}
	return out
}

// Fields are the fields the rule sets, in Fields order.
func (r Rule) Fields() []Field { return r.setFields() }

// ScopeFields are the fields that decide whether a URL is in the crawl's scope (Admit):
// max depth, include and exclude.
func ScopeFields() []Field { return slices.Clone(scopeFields) }

var scopeFields = []Field{FMaxDepth, FInclude, FExclude}

// SetsAny says whether the rule sets one of fields.
func (r *Rule) SetsAny(fields ...Field) bool {
	for _, op := range fieldOps {
		if op.set(r) && slices.Contains(fields, op.f) {
			return true
		}
	}
	return false
}

// merge fills the fields res has not decided yet from e: called from the most specific
// matching rule to the least, so each field ends with the most specific rule that sets it.
func (res *Resolved) merge(e *entry) {
	for _, op := range fieldOps {
		if op.set(&res.Rule) || !op.set(&e.st.Rule) {
			continue
		}
		op.copy(&res.Rule, &e.st.Rule)
		if res.From == nil {
			res.From = make(map[Field]*Stored, 4)
		}
		res.From[op.f] = e.st
		switch op.f {
		case FInclude:
			res.include = e.include
		case FExclude:
			res.exclude = e.exclude
		case FDomainBudget:
			res.Domain = e.st.Scope.Value
		}
	}
}

// host merges the host rule, then the domain rules from the longest name to the
// shortest. A domain rule is never a public suffix, so walking every suffix of the name
// is correct and costs one map lookup per label. The merge of each host rule and each
// domain rule with the domains above it is made once, by compile, so a lookup that no
// prefix rule adds to returns it as it is: no merge, no allocation.
func (m *matcher) host(host string) Resolved {
	if e := m.hosts[host]; e != nil {
		return *e.merged
	}
	for d := host; len(m.domains) > 0; {
		if e := m.domains[d]; e != nil {
			return *e.merged
		}
		i := strings.IndexByte(d, '.')
		if i < 0 {
			break
		}
		d = d[i+1:]
	}
	return Resolved{}
}

// hostInto merges host's rules under the fields res holds already.
func (m *matcher) hostInto(res *Resolved, host string) {
	if e := m.hosts[host]; e != nil {
		res.merge(e)
	}
	if len(m.domains) == 0 {
		return
	}
	for d := host; ; {
		if e := m.domains[d]; e != nil {
			res.merge(e)
		}
		i := strings.IndexByte(d, '.')
		if i < 0 {
			return
		}
		d = d[i+1:]
	}
}

// premerge makes each host and domain rule's merged policy (see host).
func (m *matcher) premerge() {
	for d, e := range m.domains {
		e.merged = &Resolved{}
		e.merged.merge(e)
		for p := d; ; {
			i := strings.IndexByte(p, '.')
			if i < 0 {
				break
			}
			p = p[i+1:]
			if pe := m.domains[p]; pe != nil {
				e.merged.merge(pe)
			}
		}
	}
	for h, e := range m.hosts {
		e.merged = &Resolved{}
		m.hostInto(e.merged, h)
	}
}

// url merges the prefix rules of the URL's host that match it (longest first), then the
// host's policy. The host's prefix rules are few; the rules of other hosts are never
// looked at.
func (m *matcher) url(rawURL string) Resolved {
	host, port, path, ok := splitURL(rawURL)
	if !ok {
		return Resolved{}
	}
	// res is made only when a prefix rule matches: merge's calls through fieldOps move it
	// to the heap, which the common lookup (no prefix rule) does not pay.
	var res *Resolved
	for _, e := range m.prefixes[host] {
		if e.port == port && strings.HasPrefix(path, e.path) {
			if res == nil {
				res = &Resolved{}
			}
			res.merge(e)
		}
	}
	if res == nil || res.From == nil {
		return m.host(host)
	}
	m.hostInto(res, host)
	return *res
}

// splitURL reads a normalised absolute URL's host (as Trawl keys hosts), its port when it
// is not the scheme's default, and its path with query ("/" at least).
func splitURL(raw string) (host, port, path string, ok bool) {
	i := strings.Index(raw, "://")
	if i <= 0 {
		return "", "", "", false
	}
	scheme, rest := raw[:i], raw[i+3:]
	auth := rest
	path = "/"
	if j := strings.IndexAny(rest, "/?#"); j >= 0 {
		auth = rest[:j]
		path = rest[j:]
		if k := strings.IndexByte(path, '#'); k >= 0 {
			path = path[:k]
		}
		if path == "" || path[0] != '/' {
			path = "/" + path
		}
	}
	if k := strings.LastIndexByte(auth, '@'); k >= 0 {
		auth = auth[k+1:]
	}
	if strings.HasPrefix(auth, "[") {
		end := strings.IndexByte(auth, ']')
		if end < 0 {
			return "", "", "", false
		}
		host, port = auth[1:end], strings.TrimPrefix(auth[end+1:], ":")
	} else if k := strings.LastIndexByte(auth, ':'); k >= 0 {
		host, port = auth[:k], auth[k+1:]
	} else {
		host = auth
	}
	if host == "" {
		return "", "", "", false
	}
	if hasUpper(host) {
		host = strings.ToLower(host)
	}
	if port != "" && (port == "80" && strings.EqualFold(scheme, "http") || port == "443" && strings.EqualFold(scheme, "https")) {
		port = ""
	}
	return host, port, path, true
}

func hasUpper(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 'A' && s[i] <= 'Z' {
			return true
		}
	}
	return false
}

// addr merges the address-block rules containing a, the longest prefix first: one map
// lookup per prefix length in use.
func (m *matcher) addr(a netip.Addr) Resolved {
	var res Resolved
	a = a.Unmap()
	for _, bits := range m.addrLen {
		if bits > a.BitLen() {
			continue
		}
		p, err := a.Prefix(bits)
		if err != nil {
			continue
		}
		if e := m.addrs[bits][p.String()]; e != nil {
			res.merge(e)
		}
	}
	return res
}

// covers says whether sc's rule can apply to host's URLs.
func (m *matcher) covers(sc Scope, host string) bool {
	switch sc.Kind {
	case KindHost:
		return sc.Value == host
	case KindDomain:
		return host == sc.Value || strings.HasSuffix(host, "."+sc.Value)
	case KindPrefix:
		return prefixHost(sc) == host
	}
	return false
}

func (m *matcher) prefixBlocks(host string) bool {
	for _, e := range m.prefixes[host] {
		if b := e.st.Rule.Block; b != nil && *b {
			return true
		}
	}
	return false
}

// Rule is the rule of one scope, if the set has one.
func (s *Set) Rule(sc Scope) (Stored, bool) {
	var e *entry
	switch sc.Kind {
	case KindHost:
		e = s.impl.hosts[sc.Value]
	case KindDomain:
		e = s.impl.domains[sc.Value]
	case KindPrefix:
		for _, x := range s.impl.prefixes[prefixHost(sc)] {
			if x.st.Scope == sc {
				e = x
			}
		}
	case KindAddr:
		for _, byBits := range s.impl.addrs {
			if x := byBits[sc.Value]; x != nil {
				e = x
			}
		}
	}
	if e == nil {
		return Stored{}, false
	}
	return *e.st, true
}

// Admit: see its doc comment in policy.go.
func (r Resolved) admit(rawURL string, depth int) (bool, string) {
	if r.MaxDepth != nil && depth > *r.MaxDepth {
		return false, string(FMaxDepth) + " of " + r.DecidedBy(FMaxDepth)
	}
	if len(r.include) > 0 {
		in := false
		for _, re := range r.include {
			if re.MatchString(rawURL) {
				in = true
				break
			}
		}
		if !in {
			return false, string(FInclude) + " of " + r.DecidedBy(FInclude)
		}
	}
	for _, re := range r.exclude {
		if re.MatchString(rawURL) {
			return false, string(FExclude) + " of " + r.DecidedBy(FExclude)
		}
	}
	return true, ""
}

// DecidedBy is the scope of the rule that decided field f, "" when no rule did (or for a
// Resolved built by hand).
func (r Resolved) DecidedBy(f Field) string {
	if st := r.From[f]; st != nil {
		return st.Scope.String()
	}
	return ""
}

// compilePatterns compiles patterns of a Resolved built by hand (a Set's carry them
// compiled); one that does not compile matches nothing, as Compile would have refused it.
func compilePatterns(pats []string) []*regexp.Regexp {
	out := make([]*regexp.Regexp, 0, len(pats))
	for _, p := range pats {
		if re, err := regexp.Compile(p); err == nil {
			out = append(out, re)
		}
	}
	return out
}
