package robots

import (
	"slices"
	"strings"

	"github.com/trawl/trawl/shared/urlnorm"
)

// rule is one Allow or Disallow line in comparable form.
type rule struct {
	pattern  string   // normalised, as written: with its "*" and final "$"
	segs     []string // pattern without the final "$", split at "*"
	anchored bool     // pattern ended in "$"
	allow    bool
}

func newRule(raw string, allow bool) rule {
	if raw[0] != '/' && raw[0] != '*' {
		raw = "/" + raw
	}
	p := normalizePattern(raw)
	r := rule{pattern: p, allow: allow}
	body := p
	if strings.HasSuffix(body, "$") {
		r.anchored, body = true, body[:len(body)-1]
	}
	r.segs = strings.Split(body, "*")
	return r
}

// sortRules orders rules so that the first match is the one RFC 9309 §2.2.2 picks: the
// longest pattern in octets, and of equally long ones an Allow.
func sortRules(rs []rule) {
	slices.SortStableFunc(rs, func(a, b rule) int {
		if la, lb := len(a.pattern), len(b.pattern); la != lb {
			return lb - la
		}
		switch {
		case a.allow == b.allow:
			return 0
		case a.allow:
			return -1
		default:
			return 1
		}
	})
}

// match reports whether the rule matches p, a normalised path-and-query. Without "*" this
// is a prefix (or, anchored, an exact) comparison. With "*" the segments between stars are
// found leftmost-first, which is exact for patterns whose only wildcard is "*": taking the
// earliest occurrence of a segment never rules out a match that a later one would allow.
func (r *rule) match(p string) bool {
	if len(r.segs) == 1 {
		if r.anchored {
			return p == r.segs[0]
		}
		return strings.HasPrefix(p, r.segs[0])
	}
	first := r.segs[0]
	if !strings.HasPrefix(p, first) {
		return false
	}
	rest := p[len(first):]
	last := len(r.segs) - 1
	for _, s := range r.segs[1:last] {
		i := strings.Index(rest, s)
		if i < 0 {
			return false
		}
		rest = rest[i+len(s):]
	}
	tail := r.segs[last]
	if r.anchored {
		return strings.HasSuffix(rest, tail)
	}
	return strings.Contains(rest, tail)
}

// literal is what stays literal in both patterns and URLs besides RFC 3986's unreserved
// characters: gen-delims and sub-delims but "*" and "$", which a URL carries encoded so that
// only a pattern's own "*" and "$" act as wildcard and anchor. Everything else is
// percent-encoded before comparing.
const literal = ":/?#[]@" + "!&'()+,;="

// normalizePattern puts a rule's pattern in the comparison form. "*" stays a wildcard and a
// final "$" stays the end anchor; a "$" anywhere else is a literal dollar, so it is encoded
// like a "$" in a URL.
func normalizePattern(p string) string {
	anchored := strings.HasSuffix(p, "$")
	if anchored {
		p = p[:len(p)-1]
	}
	out := urlnorm.NormalizeEscapes(p, literal+"*")
	if anchored {
		out += "$"
	}
	return out
}

// normalizePath puts a URL's path-and-query in the comparison form.
func normalizePath(p string) string { return urlnorm.NormalizeEscapes(p, literal) }
