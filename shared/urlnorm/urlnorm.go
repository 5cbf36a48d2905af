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
	"net"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

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
	scheme, rest, ok := splitScheme(s)
	if !ok {
		return "", fmt.Errorf("%w: not absolute: %q", ErrInvalid, s)
	}
	abs, err := absolute(scheme, rest)
	if err != nil {
		return "", err
	}
	u, err := url.Parse(abs)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return normalizeURL(u)
}

// Resolve resolves ref against base (RFC 3986 §5) and normalises the result. base must be
// absolute; ref may be relative. ref is read as a browser reads an href (see the package
// comment): "http:g" against an http base is relative, backslashes are slashes.
func Resolve(base *url.URL, ref string) (string, error) {
	s, err := clean(ref)
	if err != nil {
		return "", err
	}
	if scheme, rest, ok := splitScheme(s); ok {
		// A special scheme equal to the base's, not followed by "//", is relative to the
		// base (WHATWG "special relative or authority state"); any other scheme makes ref
		// absolute.
		if !strings.EqualFold(scheme, base.Scheme) || !isSpecial(scheme) || strings.HasPrefix(slashes(rest), "//") {
			return normalizeClean(s)
		}
		s = rest
	}
	if !isSpecial(base.Scheme) {
		return "", fmt.Errorf("%w: %s", ErrScheme, strings.ToLower(base.Scheme))
	}
	rel, err := relative(s)
	if err != nil {
		return "", err
	}
	r, err := url.Parse(rel)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrInvalid, err)
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

// clean is the WHATWG pre-processing: strip leading and trailing C0 controls and spaces,
// remove every tab and newline, and drop the fragment, which is never part of the
// identity (dropping it first also keeps junk in it from failing the whole URL).
func clean(raw string) (string, error) {
	s := strings.TrimFunc(raw, func(r rune) bool { return r <= ' ' })
	if len(s) > MaxLength {
		return "", fmt.Errorf("%w: %d bytes", ErrInvalid, len(s))
	}
	if strings.ContainsAny(s, "\t\n\r") {
		s = strings.Map(func(r rune) rune {
			if r == '\t' || r == '\n' || r == '\r' {
				return -1
			}
			return r
		}, s)
	}
	if i := strings.IndexByte(s, '#'); i >= 0 {
		s = s[:i]
	}
	return s, nil
}

// splitScheme splits "scheme:rest" when s starts with a valid scheme (RFC 3986 §3.1).
func splitScheme(s string) (scheme, rest string, ok bool) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
		case (c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.') && i > 0:
		case c == ':' && i > 0:
			return s[:i], s[i+1:], true
		default:
			return "", "", false
		}
	}
	return "", "", false
}

func isSpecial(scheme string) bool {
	return strings.EqualFold(scheme, "http") || strings.EqualFold(scheme, "https")
}

// slashes turns backslashes before the query into slashes, as the WHATWG parser does for
// special (http, https) URLs.
func slashes(s string) string {
	end := strings.IndexByte(s, '?')
	if end < 0 {
		end = len(s)
	}
	if !strings.Contains(s[:end], `\`) {
		return s
	}
	return strings.ReplaceAll(s[:end], `\`, "/") + s[end:]
}

// absolute rebuilds an absolute URL of the given scheme in a form net/url parses the way
// the WHATWG parser reads it.
func absolute(scheme, rest string) (string, error) {
	scheme = strings.ToLower(scheme)
	if !isSpecial(scheme) {
		return "", fmt.Errorf("%w: %s", ErrScheme, scheme)
	}
	// Any number of slashes, even none, introduces the authority of a special URL.
	rest = strings.TrimLeft(slashes(rest), "/")
	auth, tail := splitAuthority(rest)
	auth, err := authority(auth)
	if err != nil {
		return "", err
	}
	return scheme + "://" + auth + escapeTail(tail), nil
}

// relative prepares a reference without a scheme for net/url.
func relative(s string) (string, error) {
	s = slashes(s)
	if strings.HasPrefix(s, "//") {
		auth, tail := splitAuthority(strings.TrimLeft(s, "/"))
		if auth == "" {
			// net/url would read "//" as the empty reference, i.e. the base itself.
			return "", fmt.Errorf("%w: no host in %q", ErrInvalid, s)
		}
		auth, err := authority(auth)
		if err != nil {
			return "", err
		}
		return "//" + auth + escapeTail(tail), nil
	}
	// A colon in the first segment would read as a scheme to net/url; for the WHATWG
	// parser (which has already ruled out a scheme) it is part of the path.
	first := s
	if i := strings.IndexAny(s, "/?"); i >= 0 {
		first = s[:i]
	}
	if strings.Contains(first, ":") {
		s = "./" + s
	}
	return escapeTail(s), nil
}

// splitAuthority splits "authority/path?query" after the "//".
func splitAuthority(s string) (auth, tail string) {
	if i := strings.IndexAny(s, "/?"); i >= 0 {
		return s[:i], s[i:]
	}
	return s, ""
}

// authority makes userinfo@host:port acceptable to net/url without changing what it
// means: userinfo bytes net/url refuses are percent-encoded, and a percent-encoded host is
// decoded (the WHATWG host parser decodes before anything else, so http://%41.com is
// http://a.com and http://%30x7f.1 an IPv4 address). A decoded host that holds a byte
// that could change how the URL splits is invalid, as the WHATWG parser finds too.
func authority(auth string) (string, error) {
	var userinfo string
	hostport := auth
	if i := strings.LastIndexByte(auth, '@'); i >= 0 {
		userinfo, hostport = escapeUserinfo(auth[:i])+"@", auth[i+1:]
	}
	if strings.HasPrefix(hostport, "[") || !strings.Contains(hostport, "%") {
		return userinfo + hostport, nil
	}
	host, port := hostport, ""
	if i := strings.LastIndexByte(hostport, ':'); i >= 0 {
		host, port = hostport[:i], hostport[i:]
	}
	dec, err := url.PathUnescape(host)
	if err != nil || !utf8.ValidString(dec) {
		return "", fmt.Errorf("%w: host %q", ErrInvalid, host)
	}
	for i := 0; i < len(dec); i++ {
		if c := dec[i]; c <= ' ' || c == 0x7f || strings.IndexByte(`#%/:<>?@[\]^|`, c) >= 0 {
			return "", fmt.Errorf("%w: host %q decodes to %q", ErrInvalid, host, dec)
		}
	}
	return userinfo + dec + port, nil
}

// escapeUserinfo percent-encodes the bytes net/url does not accept in userinfo.
func escapeUserinfo(s string) string {
	ok := func(c byte) bool {
		return isUnreserved(c) || strings.IndexByte("!$&'()*+,;=:%@", c) >= 0
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if c := s[i]; ok(c) {
			b.WriteByte(c)
		} else {
			b.WriteByte('%')
			b.WriteByte(upperHex[c>>4])
			b.WriteByte(upperHex[c&15])
		}
	}
	return escapeStrayPercents(b.String())
}

// escapeTail prepares path and query for net/url: stray '%' become %25 (as browsers do,
// instead of rejecting the URL) and controls (which net/url refuses) are encoded.
func escapeTail(s string) string {
	s = escapeStrayPercents(s)
	if strings.IndexFunc(s, func(r rune) bool { return r < ' ' || r == 0x7f }) < 0 {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' || c == 0x7f {
			b.WriteByte('%')
			b.WriteByte(upperHex[c>>4])
			b.WriteByte(upperHex[c&15])
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}

// escapeStrayPercents encodes a '%' not followed by two hex digits as %25.
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
	path := removeDotSegments(normalizeEscapes(u.EscapedPath(), pathSafe))
	if path == "" {
		path = "/"
	}
	b.WriteString(path)
	if q := u.RawQuery; q != "" {
		b.WriteByte('?')
		b.WriteString(normalizeEscapes(q, querySafe))
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
	name := normalizeEscapes(url.User(u.Username()).String(), userinfoSafe)
	pw, _ := u.Password()
	if pw == "" {
		return name
	}
	// Escaped as a username, so a ':' in the password stays encoded.
	return name + ":" + normalizeEscapes(url.User(pw).String(), userinfoSafe)
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
	// IDNA mapping comes first: it lowercases and folds full-width digits and dots, so
	// that "０Ｘｃ０．０２５０．０１" is recognised as the IPv4 address it spells.
	ascii, err := profile.ToASCII(strings.ToLower(h))
	if err != nil {
		return "", fmt.Errorf("%w: host %q: %v", ErrInvalid, h, err)
	}
	if endsInNumber(ascii) {
		ip, err := parseIPv4(ascii)
		if err != nil {
			return "", fmt.Errorf("%w: host %q: %v", ErrInvalid, h, err)
		}
		return ip, nil
	}
	ascii = strings.TrimSuffix(ascii, ".")
	if ascii == "" {
		return "", fmt.Errorf("%w: empty host", ErrInvalid)
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

// endsInNumber is the WHATWG "ends in a number checker": a host whose last label (after
// one trailing dot) is all digits, or 0x followed by hex digits, must be an IPv4 address
// and is invalid if it is not one ("1.2.3.08", "foo.09", "10000000000").
func endsInNumber(h string) bool {
	parts := strings.Split(h, ".")
	if parts[len(parts)-1] == "" {
		if len(parts) == 1 {
			return false
		}
		parts = parts[:len(parts)-1]
	}
	last := parts[len(parts)-1]
	if last != "" && strings.Trim(last, "0123456789") == "" {
		return true
	}
	// The WHATWG IPv4 number parser fails only on a digit outside the radix, never on
	// size, so 0x followed by any number of hex digits counts.
	if len(last) >= 2 && (last[:2] == "0x" || last[:2] == "0X") {
		return strings.Trim(last[2:], "0123456789abcdefABCDEF") == ""
	}
	return false
}

// parseIPv4 reads a host that ends in a number the way the WHATWG URL standard does: 1 to
// 4 parts, each decimal, octal (leading 0) or hex (0x), so "127.000.000.001" and "0x7f.1"
// are 127.0.0.1.
func parseIPv4(h string) (string, error) {
	parts := strings.Split(h, ".")
	if parts[len(parts)-1] == "" && len(parts) > 1 {
		parts = parts[:len(parts)-1]
	}
	if len(parts) > 4 {
		return "", errors.New("too many IPv4 parts")
	}
	nums := make([]uint64, len(parts))
	for i, p := range parts {
		n, ok := parseIPv4Number(p)
		if !ok {
			return "", fmt.Errorf("bad IPv4 part %q", p)
		}
		nums[i] = n
	}
	for _, n := range nums[:len(nums)-1] {
		if n > 255 {
			return "", errors.New("IPv4 part over 255")
		}
	}
	if nums[len(nums)-1] >= 1<<(8*(5-len(nums))) {
		return "", errors.New("IPv4 address out of range")
	}
	v := nums[len(nums)-1]
	for i, n := range nums[:len(nums)-1] {
		v += n << (8 * (3 - i))
	}
	return fmt.Sprintf("%d.%d.%d.%d", v>>24, v>>16&255, v>>8&255, v&255), nil
}

// parseIPv4Number is the WHATWG IPv4 number parser; values above 2^32 are reported as
// failures (they can never make a valid address).
func parseIPv4Number(p string) (uint64, bool) {
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
		case base == 16 && c >= 'A' && c <= 'F':
			d = uint64(c-'A') + 10
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
