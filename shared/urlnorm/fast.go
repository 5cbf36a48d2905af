package urlnorm

import (
	"net/url"
	"strings"
)

// The references most links are — an absolute http(s) URL, a scheme-relative one, a path
// from the root, a path relative to the base's directory, a new query — give the normal
// form by concatenation alone when they and the base hold nothing the normal form would
// change: no percent-encoding, no character it encodes, no dot segment, no empty query, a
// host that is a dotted quad or a lowercase name IDNA leaves as it is, a port that is
// kept. resolveFast answers those and leaves every other reference to the general code,
// which gives the same string (a test compares the two); it saves net/url's parse and
// resolution, and the rebuilding, per link.

// resolveFast resolves s, a cleaned reference, against base when it can; ok is false when
// the general code must.
func resolveFast(base *url.URL, s string) (string, bool) {
	switch {
	case s == "":
		return "", false
	case hasPrefixFold(s, "http://") || hasPrefixFold(s, "https://"):
		return plainAbsolute(s)
	case strings.HasPrefix(s, "//"):
		if !plainBase(base, false) || !plainNetPath(base.Scheme, s[2:], true) {
			return "", false
		}
		return base.Scheme + ":" + s, true
	case s[0] == '/':
		if !plainBase(base, false) || !plainTail(s, true) {
			return "", false
		}
		return base.Scheme + "://" + base.Host + s, true
	case s[0] == '?':
		if !plainBase(base, true) || !plainQuery(s[1:]) {
			return "", false
		}
		return base.Scheme + "://" + base.Host + base.Path + s, true
	default:
		if !plainBase(base, true) || !plainTail(s, false) {
			return "", false
		}
		dir := base.Path[:strings.LastIndexByte(base.Path, '/')+1]
		return base.Scheme + "://" + base.Host + dir + s, true
	}
}

// plainAbsolute gives the normal form of s, an absolute http(s) URL, when s holds
// nothing it changes but the scheme's case.
func plainAbsolute(s string) (string, bool) {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		return "", false
	}
	low := strings.ToLower(scheme)
	if low != "http" && low != "https" || !plainNetPath(low, rest, true) {
		return "", false
	}
	if low != scheme {
		return low + "://" + rest, true
	}
	return s, true
}

// plainBase reports whether base is in normal form with nothing resolveFast cannot
// carry over; withPath asks for its path too (a relative reference keeps part of it).
func plainBase(base *url.URL, withPath bool) bool {
	if base.Scheme != "http" && base.Scheme != "https" || base.User != nil || base.Opaque != "" || !plainAuthority(base.Scheme, base.Host) {
		return false
	}
	if !withPath {
		return true
	}
	return base.RawPath == "" && strings.HasPrefix(base.Path, "/") && plainPath(base.Path, true)
}

// plainNetPath reports whether rest, after "scheme://", is an authority resolveFast keeps
// followed by a path from the root (a URL with no path gets "/" in its normal form).
func plainNetPath(scheme, rest string, colon bool) bool {
	end := strings.IndexAny(rest, "/?")
	if end < 0 || rest[end] != '/' {
		return false
	}
	return plainAuthority(scheme, rest[:end]) && plainTail(rest[end:], colon)
}

// plainAuthority reports whether auth is host[:port] in normal form: no userinfo, a
// dotted quad or a plain name, and a port that is not the scheme's default.
func plainAuthority(scheme, auth string) bool {
	host, port := auth, ""
	if i := strings.LastIndexByte(auth, ':'); i >= 0 {
		host, port = auth[:i], auth[i+1:]
		if !plainPort(scheme, port) {
			return false
		}
	}
	return isDottedQuad(host) || plainName(host)
}

// plainPort reports whether port is kept as it is: digits without a leading zero, at most
// 65535, not the scheme's default.
func plainPort(scheme, port string) bool {
	if port == "" || len(port) > 5 || port[0] == '0' {
		return false
	}
	n := 0
	for i := 0; i < len(port); i++ {
		c := port[i]
		if c < '0' || c > '9' {
			return false
		}
		n = n*10 + int(c-'0')
	}
	return n <= 65535 && !(scheme == "http" && n == 80) && !(scheme == "https" && n == 443)
}

// plainName reports whether h is a host name IDNA maps to itself and the normal form
// keeps: lowercase letters, digits and inner hyphens (no "--", which could be an A-label
// or a hyphen rule), labels of 1 to 63 octets, at most 253 in all, and a last label that
// starts with a letter (one ending in a number is read as an IPv4 address).
func plainName(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	start := 0
	for i := 0; i <= len(h); i++ {
		if i < len(h) && h[i] != '.' {
			c := h[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
			continue
		}
		label := h[start:i]
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' || strings.Contains(label, "--") {
			return false
		}
		if i == len(h) && !(label[0] >= 'a' && label[0] <= 'z') {
			return false
		}
		start = i + 1
	}
	return true
}

// plainTail reports whether t, a path and an optional query, is kept as it is: path and
// query of plain characters, no dot segment, no empty query. colon allows ':' in the
// path, which a relative reference may not have (it would read as a scheme).
func plainTail(t string, colon bool) bool {
	path, query, hasQuery := strings.Cut(t, "?")
	if !plainPath(path, colon) || hasDotSegment(path) {
		return false
	}
	return !hasQuery || plainQuery(query)
}

// plainPath reports whether every octet of p is one the normal form and net/url leave
// alone in a path.
func plainPath(p string, colon bool) bool {
	for i := 0; i < len(p); i++ {
		c := p[i]
		if isUnreserved(c) || c == '/' || c == ';' || c == '=' || c == '+' || c == ',' || c == '@' || c == '&' || c == '$' || colon && c == ':' {
			continue
		}
		return false
	}
	return true
}

// plainQuery reports whether q is a non-empty query the normal form keeps as it is.
func plainQuery(q string) bool {
	if q == "" {
		return false
	}
	for i := 0; i < len(q); i++ {
		c := q[i]
		if isUnreserved(c) || c != '%' && strings.IndexByte(querySafe, c) >= 0 {
			continue
		}
		return false
	}
	return true
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}
