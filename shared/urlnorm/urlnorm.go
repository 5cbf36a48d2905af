// Package urlnorm puts URLs in the one form Trawl uses for identity: the key of the seen
// test, the frontier entry and the fetch. Only the safe normalisations of RFC 3986 §6.2.2
// and §6.2.3 are applied by default:
//
//   - scheme and host lowercased; host IDNA-encoded (A-labels); a trailing dot dropped
//   - the scheme's default port dropped (http :80, https :443), as is an empty port
//   - an empty password (and an empty userinfo) dropped
//   - percent-encodings uppercased; encodings of unreserved characters decoded; characters
//     that may not appear unencoded (space, quotes, <, >, controls, non-ASCII …) encoded
//   - dot segments removed; an empty path becomes "/"
//   - the fragment dropped, and an empty query ("?" alone) dropped
//
// Input is read the way the WHATWG URL standard reads an http(s) URL, so that a link means
// to Trawl what it means to a browser: leading and trailing C0 controls and spaces are
// ignored, tabs and newlines anywhere are removed, a backslash before the query is a slash,
// "http:example.com" and "http:///example.com" are http://example.com/, a same-scheme
// "http:g" relative to an http base is relative, a percent-encoded host is decoded, and a
// host that ends in a number is an IPv4 address in the WHATWG's legacy forms. The few
// places where the normal form deliberately differs from the WHATWG serialisation are
// listed in DEVIATIONS.md and checked by the WHATWG test-data test.
//
// Only http and https URLs are accepted; anything else is ErrScheme.
//
// NormalizeWith adds unsafe normalisations (session-id stripping, query sorting) that may
// merge URLs a server tells apart; see Options.
package urlnorm

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"golang.org/x/net/idna"
)

var (
	// ErrInvalid marks a string that is not a usable absolute URL.
	ErrInvalid = errors.New("urlnorm: invalid URL")
	// ErrScheme marks a URL whose scheme Trawl does not fetch (mailto:, javascript:, ftp: …).
	ErrScheme = errors.New("urlnorm: unsupported scheme")
)

// MaxLength is the longest raw input considered at all; longer strings are ErrInvalid.
// Crawl scope applies its own, usually smaller, limit to the normalised result.
const MaxLength = 16 << 10

var profile = idna.New(idna.MapForLookup(), idna.Transitional(false), idna.BidiRule(), idna.StrictDomainName(false))

// Normalize returns the normal form of an absolute http(s) URL.
func Normalize(raw string) (string, error) {
	s, err := clean(raw)
	if err != nil {
		return "", err
	}
	return normalizeClean(s)
}

// normalizeClean is Normalize of a string clean has already prepared (cleaning twice
// would trim spaces that the first pass left inside the URL).
func normalizeClean(s string) (string, error) {
	if u, ok := plainAbsolute(s); ok {
		return u, nil
	}
	return normalizeGeneral(s)
}

// normalizeGeneral is normalizeClean by the general rules.
func normalizeGeneral(s string) (string, error) {
	scheme, rest, ok := splitScheme(s)
	if !ok {
		return "", fmt.Errorf("%w: not absolute: %q", ErrInvalid, s)
	}
	abs, err := absolute(s, scheme, rest)
	if err != nil {
		return "", err
	}
	u, err := url.Parse(abs)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return normalizeURL(u)
}

// Parse parses and normalises raw, returning the parsed normal form (for use as a base).
func Parse(raw string) (*url.URL, error) {
	s, err := Normalize(raw)
	if err != nil {
		return nil, err
	}
	return url.Parse(s)
}

func normalizeURL(u *url.URL) (string, error) {
	scheme := strings.ToLower(u.Scheme)
	switch scheme {
	case "http", "https":
	case "":
		return "", fmt.Errorf("%w: not absolute: %q", ErrInvalid, u.String())
	default:
		return "", fmt.Errorf("%w: %s", ErrScheme, scheme)
	}
	if u.Opaque != "" {
		return "", fmt.Errorf("%w: opaque %s URL", ErrInvalid, scheme)
	}
	host, err := normalizeHost(u.Hostname())
	if err != nil {
		return "", err
	}
	port := u.Port()
	if port != "" {
		for _, c := range port {
			if c < '0' || c > '9' {
				return "", fmt.Errorf("%w: port %q", ErrInvalid, port)
			}
		}
		port = strings.TrimLeft(port, "0")
		if port == "" {
			return "", fmt.Errorf("%w: port 0", ErrInvalid)
		}
		if n, err := strconv.Atoi(port); err != nil || n > 65535 {
			return "", fmt.Errorf("%w: port %s out of range", ErrInvalid, port)
		}
		if (scheme == "http" && port == "80") || (scheme == "https" && port == "443") {
			port = ""
		}
	}
	var b strings.Builder
	b.Grow(len(scheme) + len(host) + len(u.RawQuery) + len(u.Path) + 16)
	b.WriteString(scheme)
	b.WriteString("://")
	if ui := userinfo(u.User); ui != "" {
		b.WriteString(ui)
		b.WriteByte('@')
	}
	if strings.Contains(host, ":") {
		b.WriteByte('[')
		b.WriteString(host)
		b.WriteByte(']')
	} else {
		b.WriteString(host)
	}
	if port != "" {
		b.WriteByte(':')
		b.WriteString(port)
	}
	path := removeDotSegments(NormalizeEscapes(u.EscapedPath(), pathSafe))
	if path == "" {
		path = "/"
	}
	b.WriteString(path)
	if q := u.RawQuery; q != "" {
		b.WriteByte('?')
		b.WriteString(NormalizeEscapes(q, querySafe))
	}
	return b.String(), nil
}

// userinfo serialises user[:password], dropping an empty password and an empty userinfo
// as the WHATWG serialiser does: "http://a:@h/" and "http://:@h/" mean "http://a@h/" and
// "http://h/".
func userinfo(u *url.Userinfo) string {
	if u == nil {
		return ""
	}
	name := NormalizeEscapes(url.User(u.Username()).String(), userinfoSafe)
	pw, _ := u.Password()
	if pw == "" {
		return name
	}
	// Escaped as a username, so a ':' in the password stays encoded.
	return name + ":" + NormalizeEscapes(url.User(pw).String(), userinfoSafe)
}

// Characters, besides unreserved ones, left as they are in each component.
const (
	subDelims    = "!$&'()*+,;="
	pathSafe     = subDelims + ":@/"
	querySafe    = subDelims + ":@/?"
	userinfoSafe = subDelims + ":"
)

func isUnreserved(c byte) bool {
	return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
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

const upperHex = "0123456789ABCDEF"

// NormalizeEscapes puts percent-encoding in RFC 3986's normal form (§6.2.2.1–2): it
// uppercases percent-encodings, decodes encoded unreserved characters, and encodes every
// byte that is neither unreserved nor in safe. A '%' not followed by two hex digits is
// encoded as %25. robots.txt matching compares paths in this form too, with its own safe
// set.
func NormalizeEscapes(s, safe string) string {
	clean := true
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '%' || !(isUnreserved(c) || strings.IndexByte(safe, c) >= 0) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]):
			v := unhex(s[i+1])<<4 | unhex(s[i+2])
			if isUnreserved(v) {
				b.WriteByte(v)
			} else {
				b.WriteByte('%')
				b.WriteByte(upperHex[v>>4])
				b.WriteByte(upperHex[v&15])
			}
			i += 2
		case isUnreserved(c) || (c != '%' && strings.IndexByte(safe, c) >= 0):
			b.WriteByte(c)
		default:
			b.WriteByte('%')
			b.WriteByte(upperHex[c>>4])
			b.WriteByte(upperHex[c&15])
		}
	}
	return b.String()
}

// hasDotSegment reports whether a segment of p is "." or "..".
func hasDotSegment(p string) bool {
	for i := strings.IndexByte(p, '.'); i >= 0; {
		if i == 0 || p[i-1] == '/' {
			j := i + 1
			if j < len(p) && p[j] == '.' {
				j++
			}
			if j == len(p) || p[j] == '/' {
				return true
			}
		}
		k := strings.IndexByte(p[i+1:], '.')
		if k < 0 {
			return false
		}
		i += 1 + k
	}
	return false
}

// removeDotSegments is RFC 3986 §5.2.4.
func removeDotSegments(p string) string {
	if !hasDotSegment(p) {
		// Without a "." or ".." segment the algorithm gives p back as it is.
		return p
	}
	return dotSegments(p)
}

// dotSegments is the algorithm of §5.2.4 itself.
func dotSegments(p string) string {
	in := p
	out := make([]string, 0, strings.Count(p, "/")+1)
	for in != "" {
		switch {
		case strings.HasPrefix(in, "../"):
			in = in[3:]
		case strings.HasPrefix(in, "./"):
			in = in[2:]
		case strings.HasPrefix(in, "/./"):
			in = in[2:]
		case in == "/.":
			in = "/"
		case strings.HasPrefix(in, "/../"):
			in = in[3:]
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
		case in == "/..":
			in = "/"
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
		case in == "." || in == "..":
			in = ""
		default:
			j := strings.IndexByte(in[1:], '/')
			seg := in
			if j >= 0 {
				seg = in[:j+1]
			}
			out = append(out, seg)
			in = in[len(seg):]
		}
	}
	return strings.Join(out, "")
}
