// Package urlnorm puts URLs in the one form Trawl uses for identity: the key of the seen
// test, the frontier entry and the fetch. Only the safe normalisations of RFC 3986 §6.2.2
// and §6.2.3 are applied by default:
//
//   - scheme and host lowercased; host IDNA-encoded (A-labels); a trailing dot dropped
//   - the scheme's default port dropped (http :80, https :443), as is an empty port
//   - percent-encodings uppercased; encodings of unreserved characters decoded; characters
//     that may not appear unencoded (space, quotes, <, >, non-ASCII …) encoded
//   - dot segments removed; an empty path becomes "/"
//   - the fragment dropped, and an empty query ("?" alone) dropped
//
// Only http and https URLs are accepted; anything else is ErrScheme.
package urlnorm

import (
	"errors"
	"fmt"
	"net"
	"net/url"
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
	u, err := parse(raw)
	if err != nil {
		return "", err
	}
	return normalizeURL(u)
}

// Resolve resolves ref against base (RFC 3986 §5) and normalises the result. base must be
// absolute; ref may be relative. Leading and trailing white space of ref is ignored, as
// browsers do with href attributes.
func Resolve(base *url.URL, ref string) (string, error) {
	ref = strings.TrimSpace(ref)
	if len(ref) > MaxLength {
		return "", fmt.Errorf("%w: %d bytes", ErrInvalid, len(ref))
	}
	ref = escapeStrayPercents(stripTabsNewlines(ref))
	r, err := url.Parse(ref)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	// "http:g" against an http base is relative for browsers (WHATWG) and RFC 3986's
	// backward-compatible parsers; Go parses it as opaque.
	if r.Opaque != "" && strings.EqualFold(r.Scheme, base.Scheme) {
		if r, err = url.Parse(ref[len(r.Scheme)+1:]); err != nil {
			return "", fmt.Errorf("%w: %v", ErrInvalid, err)
		}
	}
	return normalizeURL(base.ResolveReference(r))
}

// Parse parses and normalises raw, returning the parsed normal form (for use as a base).
func Parse(raw string) (*url.URL, error) {
	s, err := Normalize(raw)
	if err != nil {
		return nil, err
	}
	return url.Parse(s)
}

// Host returns the politeness key of a URL: its hostname, lowercased, without port.
func Host(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	h := strings.ToLower(u.Hostname())
	if h == "" {
		return "", fmt.Errorf("%w: no host in %q", ErrInvalid, raw)
	}
	return h, nil
}

// Origin returns scheme://host[:port] of a normalised URL (the robots.txt scope).
func Origin(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("%w: %q", ErrInvalid, raw)
	}
	return u.Scheme + "://" + u.Host, nil
}

func parse(raw string) (*url.URL, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return nil, fmt.Errorf("%w: empty", ErrInvalid)
	}
	if len(raw) > MaxLength {
		return nil, fmt.Errorf("%w: %d bytes", ErrInvalid, len(raw))
	}
	u, err := url.Parse(escapeStrayPercents(stripTabsNewlines(raw)))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return u, nil
}

// escapeStrayPercents encodes a '%' not followed by two hex digits as %25, as browsers do,
// instead of rejecting the URL.
func escapeStrayPercents(s string) string {
	i := strings.IndexByte(s, '%')
	if i < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	b.WriteString(s[:i])
	for ; i < len(s); i++ {
		c := s[i]
		if c == '%' && !(i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2])) {
			b.WriteString("%25")
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// stripTabsNewlines removes ASCII tab and newline anywhere, as the WHATWG URL parser does.
func stripTabsNewlines(s string) string {
	if !strings.ContainsAny(s, "\t\n\r") {
		return s
	}
	return strings.Map(func(r rune) rune {
		if r == '\t' || r == '\n' || r == '\r' {
			return -1
		}
		return r
	}, s)
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
		if (scheme == "http" && port == "80") || (scheme == "https" && port == "443") {
			port = ""
		}
	}
	var b strings.Builder
	b.Grow(len(scheme) + len(host) + len(u.RawQuery) + len(u.Path) + 16)
	b.WriteString(scheme)
	b.WriteString("://")
	if u.User != nil {
		b.WriteString(normalizeEscapes(u.User.String(), userinfoSafe))
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
	path := removeDotSegments(normalizeEscapes(u.EscapedPath(), pathSafe))
	if path == "" {
		path = "/"
	}
	b.WriteString(path)
	q := u.RawQuery
	if u.ForceQuery && q == "" {
		q = ""
	}
	if q != "" {
		b.WriteByte('?')
		b.WriteString(normalizeEscapes(q, querySafe))
	}
	return b.String(), nil
}

func normalizeHost(h string) (string, error) {
	if h == "" {
		return "", fmt.Errorf("%w: no host", ErrInvalid)
	}
	if ip := net.ParseIP(h); ip != nil {
		if ip4 := ip.To4(); ip4 != nil && !strings.Contains(h, ":") {
			return ip4.String(), nil
		}
		return ip.String(), nil
	}
	if strings.Contains(h, "%") {
		dec, err := url.PathUnescape(h)
		if err != nil {
			return "", fmt.Errorf("%w: host %q", ErrInvalid, h)
		}
		h = dec
	}
	h = strings.TrimSuffix(strings.ToLower(h), ".")
	if h == "" {
		return "", fmt.Errorf("%w: empty host", ErrInvalid)
	}
	if ip, numeric, err := parseLegacyIPv4(h); numeric {
		if err != nil {
			return "", fmt.Errorf("%w: host %q: %v", ErrInvalid, h, err)
		}
		return ip, nil
	}
	ascii, err := profile.ToASCII(h)
	if err != nil {
		return "", fmt.Errorf("%w: host %q: %v", ErrInvalid, h, err)
	}
	if len(ascii) > 253 {
		return "", fmt.Errorf("%w: host longer than 253 bytes", ErrInvalid)
	}
	for _, label := range strings.Split(ascii, ".") {
		if label == "" || len(label) > 63 {
			return "", fmt.Errorf("%w: host %q has an empty or over-long label", ErrInvalid, h)
		}
	}
	for i := 0; i < len(ascii); i++ {
		c := ascii[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_') {
			return "", fmt.Errorf("%w: host %q has %q", ErrInvalid, h, c)
		}
	}
	return ascii, nil
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

// normalizeEscapes uppercases percent-encodings, decodes encoded unreserved characters,
// and encodes every byte that is neither unreserved nor in safe. A '%' not followed by two
// hex digits is encoded as %25.
func normalizeEscapes(s, safe string) string {
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

// removeDotSegments is RFC 3986 §5.2.4.
func removeDotSegments(p string) string {
	if !strings.Contains(p, ".") {
		return p
	}
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

// parseLegacyIPv4 reads hosts whose last label is a number the way the WHATWG URL
// standard does: 1 to 4 parts, each decimal, octal (leading 0) or hex (0x), so
// "127.000.000.001" and "0x7f.1" are 127.0.0.1. numeric is false for ordinary names.
func parseLegacyIPv4(h string) (ip string, numeric bool, err error) {
	parts := strings.Split(h, ".")
	last := parts[len(parts)-1]
	if _, ok := parseIPv4Part(last); !ok {
		return "", false, nil
	}
	if len(parts) > 4 {
		return "", true, errors.New("too many IPv4 parts")
	}
	nums := make([]uint64, len(parts))
	for i, p := range parts {
		n, ok := parseIPv4Part(p)
		if !ok {
			return "", true, fmt.Errorf("bad IPv4 part %q", p)
		}
		nums[i] = n
	}
	for _, n := range nums[:len(nums)-1] {
		if n > 255 {
			return "", true, errors.New("IPv4 part over 255")
		}
	}
	if nums[len(nums)-1] >= 1<<(8*(5-len(nums))) {
		return "", true, errors.New("IPv4 address out of range")
	}
	v := nums[len(nums)-1]
	for i, n := range nums[:len(nums)-1] {
		v += n << (8 * (3 - i))
	}
	return fmt.Sprintf("%d.%d.%d.%d", v>>24, v>>16&255, v>>8&255, v&255), true, nil
}

func parseIPv4Part(p string) (uint64, bool) {
	if p == "" {
		return 0, false
	}
	base := uint64(10)
	switch {
	case len(p) > 1 && (p[:2] == "0x" || p[:2] == "0X"):
		base, p = 16, p[2:]
		if p == "" {
			return 0, true
		}
	case len(p) > 1 && p[0] == '0':
		base, p = 8, p[1:]
	}
	var n uint64
	for i := 0; i < len(p); i++ {
		c := p[i]
		var d uint64
		switch {
		case c >= '0' && c <= '9':
			d = uint64(c - '0')
		case base == 16 && c >= 'a' && c <= 'f':
			d = uint64(c-'a') + 10
		default:
			return 0, false
		}
		if d >= base {
			return 0, false
		}
		n = n*base + d
		if n > 1<<32 {
			return 0, false
		}
	}
	return n, true
}
