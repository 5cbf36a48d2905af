package urlnorm

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
)

// Hosts: the politeness key and origin of a URL, and the host's normal form (IDNA
// A-labels, the WHATWG's legacy IPv4 forms).

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

// HostOf is the lowercased hostname of an absolute URL in this package's normal form
// (scheme://[userinfo@]host[:port]/path…), read without parsing the URL: the parser's
// scope asks it for every link, and the frontier's router reads a queued URL's host by
// the same rule in Lua (hostof, in the scheduler's common.lua), which the frontier checks
// against Host before a URL is queued. "" when the URL has no authority or an unclosed
// IPv6 bracket.
func HostOf(u string) string {
	i := strings.Index(u, "://")
	if i < 0 {
		return ""
	}
	auth := u[i+3:]
	if j := strings.IndexAny(auth, "/?#"); j >= 0 {
		auth = auth[:j]
	}
	if j := strings.LastIndexByte(auth, '@'); j >= 0 {
		auth = auth[j+1:]
	}
	if strings.HasPrefix(auth, "[") {
		j := strings.IndexByte(auth, ']')
		if j < 0 {
			return ""
		}
		auth = auth[1:j]
	} else if j := strings.IndexByte(auth, ':'); j >= 0 {
		auth = auth[:j]
	}
	return strings.ToLower(auth)
}

// Origin returns scheme://host[:port] of a normalised URL (the robots.txt scope).
func Origin(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("%w: %q", ErrInvalid, raw)
	}
	return u.Scheme + "://" + u.Host, nil
}

func normalizeHost(h string) (string, error) {
	if h == "" {
		return "", fmt.Errorf("%w: no host", ErrInvalid)
	}
	if isDottedQuad(h) {
		// Already the form net.IP.String gives; parsing and formatting it again would
		// cost two allocations per link on a web of addresses.
		return h, nil
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

// isDottedQuad reports whether h is an IPv4 address in its normal form: four decimal
// parts of 0..255 without leading zeros.
func isDottedQuad(h string) bool {
	parts, v, digits := 0, 0, 0
	for i := 0; i <= len(h); i++ {
		if i == len(h) || h[i] == '.' {
			if digits == 0 || v > 255 {
				return false
			}
			parts++
			v, digits = 0, 0
			continue
		}
		c := h[i]
		if c < '0' || c > '9' || (digits == 1 && v == 0) || digits == 3 {
			return false
		}
		v = v*10 + int(c-'0')
		digits++
	}
	return parts == 4
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
