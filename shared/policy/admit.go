package policy

import "strings"

// Admit is URL(rawURL).Admit(rawURL, depth) without building the Resolved: it visits the
// rules that match the URL in precedence order (its host's URL prefixes, longest first,
// then the host, then its domains, longest first) and keeps, for max depth, include and
// exclude, the first that sets each. The parser asks it of every link, so it allocates
// nothing and visits only the rules that set one of those (matcher.scope): a crawl with
// 10,000 rules pays a few map lookups per link, none when no rule limits the scope, plus
// the patterns of the rules that decide.
func (s *Set) Admit(rawURL string, depth int) (ok bool, why string) {
	m := &s.impl.scope
	if len(m.hosts) == 0 && len(m.domains) == 0 && len(m.prefixes) == 0 {
		return true, ""
	}
	host, port, path, parsed := splitURL(rawURL)
	if !parsed {
		return true, ""
	}
	var d scopeDeciders
	for _, e := range m.prefixes[host] {
		if e.port == port && strings.HasPrefix(path, e.path) {
			d.take(e)
		}
	}
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
	return d.admit(rawURL, depth)
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
