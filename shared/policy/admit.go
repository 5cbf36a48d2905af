package policy

import (
	"cmp"
	"strings"
)

// Admit is URL(rawURL).Admit(rawURL, depth) without building the Resolved: it visits the
// rules that match the URL in precedence order (its host's URL prefixes, longest first,
// then the host, then its domains, longest first) and keeps, for max depth, include and
// exclude, the first that sets each. It allocates nothing and visits only the rules that
// set one of those (matcher.scope): a crawl with 10,000 rules pays a few map lookups per
// URL, none when no rule limits the scope, plus the patterns of the rules that decide.
func (s *Set) Admit(rawURL string, depth int) (ok bool, why string) {
	a := s.Admitter()
	return a.Admit(rawURL, depth)
}

// Admitter answers Admit for the links of one page, which the parser asks of every link:
// most links of a page share a host, whose rules it looks up once instead of per link.
// It is not safe for concurrent use.
type Admitter struct {
	s *Set
	// The rules of the host asked about last: its URL prefixes (longest first), and the
	// first of its host and domain rules to set each scope field.
	host     string
	known    bool
	prefixes []*entry
	hd       scopeDeciders
}

// Admitter returns an Admitter of s.
func (s *Set) Admitter() Admitter { return Admitter{s: s} }

// Admit is Set.Admit.
func (a *Admitter) Admit(rawURL string, depth int) (ok bool, why string) {
	m := &a.s.impl.scope
	if len(m.hosts) == 0 && len(m.domains) == 0 && len(m.prefixes) == 0 {
		return true, ""
	}
	host, port, path, parsed := splitURL(rawURL)
	if !parsed {
		return true, ""
	}
	if !a.known || host != a.host {
		a.host, a.known = host, true
		a.prefixes, a.hd = m.prefixes[host], m.hostDeciders(host)
	}
	var d scopeDeciders
	for _, e := range a.prefixes {
		if e.port == port && strings.HasPrefix(path, e.path) {
			d.take(e)
		}
	}
	// A URL prefix rule is more specific than its host's and domains' rules.
	d.depth, d.include, d.exclude = cmp.Or(d.depth, a.hd.depth), cmp.Or(d.include, a.hd.include), cmp.Or(d.exclude, a.hd.exclude)
	return d.admit(rawURL, depth)
}

// hostDeciders are the first of host's host rule and domain rules (longest first) to set
// each scope field.
func (m *scopeMatcher) hostDeciders(host string) scopeDeciders {
	var d scopeDeciders
	if e := m.hosts[host]; e != nil {
		d.take(e)
	}
	if len(m.domains) > 0 {
		for n := host; !d.done(); {
			if e := m.domains[n]; e != nil {
				d.take(e)
			}
			i := strings.IndexByte(n, '.')
			if i < 0 {
				break
			}
			n = n[i+1:]
		}
	}
	return d
}

// scopeDeciders are the rules that decide a URL's max depth, include and exclude.
type scopeDeciders struct{ depth, include, exclude *entry }

func (d *scopeDeciders) take(e *entry) {
	if d.depth == nil && e.st.MaxDepth != nil {
		d.depth = e
	}
	if d.include == nil && len(e.st.Include) > 0 {
		d.include = e
	}
	if d.exclude == nil && len(e.st.Exclude) > 0 {
		d.exclude = e
	}
}

func (d *scopeDeciders) done() bool { return d.depth != nil && d.include != nil && d.exclude != nil }

// admit is Resolved.admit's verdict and wording for the deciding rules.
func (d *scopeDeciders) admit(rawURL string, depth int) (bool, string) {
	if e := d.depth; e != nil && depth > *e.st.MaxDepth {
		return false, string(FMaxDepth) + " of " + e.st.Scope.String()
	}
	if e := d.include; e != nil {
		in := false
		for _, re := range e.include {
			if re.MatchString(rawURL) {
				in = true
				break
			}
		}
		if !in {
			return false, string(FInclude) + " of " + e.st.Scope.String()
		}
	}
	if e := d.exclude; e != nil {
		for _, re := range e.exclude {
			if re.MatchString(rawURL) {
				return false, string(FExclude) + " of " + e.st.Scope.String()
			}
		}
	}
	return true, ""
}
