package urlnorm

import (
	"fmt"
	"net/url"
	"strings"
	"unicode/utf8"
)

// Reading: what the WHATWG URL parser does to an http(s) URL before net/url sees it.

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

// absolute rebuilds s, an absolute URL of the given scheme (s is scheme:rest), in a form
// net/url parses the way the WHATWG parser reads it.
func absolute(s, scheme, rest string) (string, error) {
	low := strings.ToLower(scheme)
	if !isSpecial(low) {
		return "", fmt.Errorf("%w: %s", ErrScheme, low)
	}
	// Any number of slashes, even none, introduces the authority of a special URL.
	trimmed := strings.TrimLeft(slashes(rest), "/")
	auth, tail := splitAuthority(trimmed)
	fixed, err := authority(auth)
	if err != nil {
		return "", err
	}
	escaped := escapeTail(tail)
	if low == scheme && len(rest) == len(trimmed)+2 && rest[:2] == "//" && rest[2:] == trimmed && fixed == auth && escaped == tail {
		// The common link is in that form already: s itself, without building it again.
		return s, nil
	}
	return low + "://" + fixed + escaped, nil
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
