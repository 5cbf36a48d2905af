package robots

import (
	"slices"
	"strings"
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

// Characters that stay literal in both patterns and URLs: RFC 3986 unreserved, gen-delims
// and sub-delims. Everything else is percent-encoded before comparing.
const literal = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~" + ":/?#[]@" + "!$&'()*+,;="

func isLiteral(c byte) bool { return strings.IndexByte(literal, c) >= 0 }

func isUnreserved(c byte) bool {
	return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}

// normalizePattern puts a rule's pattern in the comparison form. "*" stays a wildcard and a
// final "$" stays the end anchor; a "$" anywhere else is a literal dollar, so it is encoded
// like a "$" in a URL.
func normalizePattern(p string) string {
	anchored := strings.HasSuffix(p, "$")
	if anchored {
		p = p[:len(p)-1]
	}
	out := normalize(p, func(c byte) bool { return c == '*' })
	if anchored {
		out += "$"
	}
	return out
}

// normalizePath puts a URL's path-and-query in the comparison form. Its "*" and "$" are
// encoded so that only a pattern's own "*" and "$" act as wildcard and anchor.
func normalizePath(p string) string {
	return normalize(p, func(byte) bool { return false })
}

// normalize decodes percent-encoded unreserved characters, uppercases the hex of other
// encodings, and encodes every octet that is not literal (a "%" not starting a valid
// encoding included). keep names octets left alone; "*" and "$" are otherwise encoded.
func normalize(s string, keep func(byte) bool) string {
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case keep(c):
			b.WriteByte(c)
		case c == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]):
			v := unhex(s[i+1])<<4 | unhex(s[i+2])
			if isUnreserved(v) {
				b.WriteByte(v)
			} else {
				writeEscaped(&b, v)
			}
			i += 2
		case c == '*' || c == '$':
			writeEscaped(&b, c)
		case c != '%' && isLiteral(c):
			b.WriteByte(c)
		default:
			writeEscaped(&b, c)
		}
	}
	return b.String()
}

const upperHex = "0123456789ABCDEF"

func writeEscaped(b *strings.Builder, c byte) {
	b.WriteByte('%')
	b.WriteByte(upperHex[c>>4])
	b.WriteByte(upperHex[c&15])
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c >= '0' && c <= '9':
		return c - '0'
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10
	default:
		return c - 'A' + 10
	}
}
