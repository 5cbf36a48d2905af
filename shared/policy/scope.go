package policy

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"golang.org/x/net/publicsuffix"

	"github.com/trawl/trawl/shared/urlnorm"
)

// SURT (Sort-friendly URI Reordering Transform) as Heritrix and the WARC tools write it:
// "http://(com,example,www,)/path", the host's labels reversed, each followed by a comma,
// a non-default port after them (":8080"), ")" closing the authority, then the path and
// query as they are. A prefix that stops before ")" is open: "http://(com,example," is
// example.com and every name under it. Like Heritrix's SurtPrefixSet, which forces
// prefixes to http for comparison, Trawl writes every prefix with "http://" and matches
// http and https URLs alike: a site's rule rarely depends on the scheme, and two spellings
// of one rule would make "most specific wins" depend on which one the operator typed.
//
// No Go module on the proxy keeps a SURT transform (the maintained ones are Python and
// Java), and the part Trawl needs is this file: a host's labels reversed, a port and a
// path prefix, matched per host (matcher) rather than by string comparison over a sorted
// list.

const surtHead = "http://("

var errScope = errors.New("policy: bad scope")

func parseScope(s string) (Scope, error) {
	s = strings.TrimSpace(s)
	kind, val, ok := strings.Cut(s, ":")
	if !ok || val == "" {
		return Scope{}, fmt.Errorf("%w %q: want host:NAME, domain:NAME, surt:PREFIX, cidr:PREFIX or an http(s) URL prefix", errScope, s)
	}
	var (
		sc  Scope
		err error
	)
	switch Kind(strings.ToLower(kind)) {
	case KindHost:
		sc, err = hostScope(val)
	case KindDomain:
		sc, err = domainScope(val)
	case KindAddr:
		sc, err = addrScope(val)
	case KindPrefix:
		sc, err = surtScope(val)
	default:
		switch strings.ToLower(kind) {
		case "http", "https":
			sc, err = urlScope(s)
		default:
			return Scope{}, fmt.Errorf("%w %q: unknown kind %q (host, domain, surt, cidr, or an http(s) URL)", errScope, s, kind)
		}
	}
	if err != nil {
		return Scope{}, fmt.Errorf("%w %q: %v", errScope, s, err)
	}
	return sc, nil
}

// canonHost is a host name as Trawl keys hosts (urlnorm.Host of a normalised URL):
// lowercase IDNA A-labels, IP addresses in their canonical form, no port, no brackets.
func canonHost(name string) (string, error) {
	name = strings.TrimSuffix(name, ".")
	if name == "" {
		return "", errors.New("empty host name")
	}
	if strings.ContainsAny(name, "/?#@ \t") {
		return "", fmt.Errorf("%q is not a host name", name)
	}
	if a, err := netip.ParseAddr(strings.Trim(name, "[]")); err == nil {
		return a.Unmap().String(), nil
	}
	if strings.Contains(name, ":") {
		return "", fmt.Errorf("%q: a host scope has no port (use a URL prefix for one port)", name)
	}
	u, err := urlnorm.Normalize("http://" + name + "/")
	if err != nil {
		return "", fmt.Errorf("%q is not a host name: %v", name, err)
	}
	h, err := urlnorm.Host(u)
	if err != nil {
		return "", fmt.Errorf("%q is not a host name: %v", name, err)
	}
	return h, nil
}

func hostScope(name string) (Scope, error) {
	h, err := canonHost(name)
	if err != nil {
		return Scope{}, err
	}
	return Scope{Kind: KindHost, Value: h}, nil
}

func domainScope(name string) (Scope, error) {
	h, err := canonHost(name)
	if err != nil {
		return Scope{}, err
	}
	if _, err := netip.ParseAddr(h); err == nil {
		return Scope{}, fmt.Errorf("%s is an address, not a domain (use host: or cidr:)", h)
	}
	if ps, _ := publicsuffix.PublicSuffix(h); ps == h {
		return Scope{}, fmt.Errorf("%s is a public suffix (every site under it would share the rule); name a registrable domain or a name under one", h)
	}
	return Scope{Kind: KindDomain, Value: h}, nil
}

func addrScope(v string) (Scope, error) {
	var p netip.Prefix
	if strings.Contains(v, "/") {
		var err error
		if p, err = netip.ParsePrefix(v); err != nil {
			return Scope{}, err
		}
		if p.Addr().Is4In6() {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
			if p.Bits() < 0 {
				return Scope{}, fmt.Errorf("%s: an IPv4-mapped prefix shorter than ::ffff:0:0/96", v)
			}
		}
	} else {
		a, err := netip.ParseAddr(v)
		if err != nil {
			return Scope{}, err
		}
		a = a.Unmap()
		p = netip.PrefixFrom(a, a.BitLen())
	}
	if p.Addr().Zone() != "" {
		return Scope{}, fmt.Errorf("%s: an address block has no zone", v)
	}
	return Scope{Kind: KindAddr, Value: p.Masked().String()}, nil
}

// urlScope turns a plain URL prefix into its scope, as Heritrix turns a plain URL into
// a SURT prefix: with no path at all ("https://example.com") the prefix stays open and
// covers the name and every name under it (a domain rule); with a path ("/" or longer)
// it is closed at the host. The path is taken as written, not cut at its last slash:
// "https://example.com/private" covers "/private/" and "/privateer".
func urlScope(s string) (Scope, error) {
	scheme, rest, _ := strings.Cut(s, "://")
	scheme = strings.ToLower(scheme)
	if scheme != "http" && scheme != "https" {
		return Scope{}, fmt.Errorf("a URL prefix is http or https")
	}
	rest, _, _ = strings.Cut(rest, "#")
	auth, path := rest, ""
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		auth, path = rest[:i], rest[i:]
	}
	if strings.HasPrefix(path, "?") {
		path = "/" + path
	}
	if i := strings.LastIndex(auth, "@"); i >= 0 {
		return Scope{}, fmt.Errorf("a URL prefix has no user information")
	}
	host, port, err := splitHostPort(auth)
	if err != nil {
		return Scope{}, err
	}
	if port == defaultPort(scheme) {
		port = ""
	}
	h, err := canonHost(host)
	if err != nil {
		return Scope{}, err
	}
	_, isAddr := netip.ParseAddr(h)
	return prefixScope(h, port, path, path == "" && port == "" && isAddr != nil)
}

// surtScope reads "http://(com,example,www,:8080)/path", "http://(com,example," or
// "http://(192.0.2.1)/".
func surtScope(v string) (Scope, error) {
	scheme, rest, ok := strings.Cut(v, "://(")
	scheme = strings.ToLower(scheme)
	if !ok || (scheme != "http" && scheme != "https") {
		return Scope{}, fmt.Errorf("a SURT prefix starts with \"http://(\" (or https)")
	}
	auth, path, closed := strings.Cut(rest, ")")
	auth = strings.ToLower(auth)
	if strings.ContainsAny(auth, "/?#@") {
		return Scope{}, fmt.Errorf("a SURT prefix's authority %q has no user information or path", auth)
	}
	if closed && path != "" && path[0] != '/' {
		return Scope{}, fmt.Errorf("a SURT prefix's path starts with \"/\", not %q", path)
	}
	var port string
	if strings.HasPrefix(auth, "[") {
		end := strings.Index(auth, "]")
		if end < 0 {
			return Scope{}, fmt.Errorf("unclosed [ in %q", auth)
		}
		rest := auth[end+1:]
		auth = auth[1:end]
		if rest != "" && rest[0] != ':' {
			return Scope{}, fmt.Errorf("bad authority %q", rest)
		}
		port = strings.TrimPrefix(rest, ":")
	} else if i := strings.LastIndex(auth, ":"); i >= 0 {
		auth, port = auth[:i], auth[i+1:]
	}
	if port != "" || strings.HasSuffix(auth, ":") {
		if !closed {
			return Scope{}, fmt.Errorf("a SURT prefix with a port is closed with \")\"")
		}
		if port == defaultPort(scheme) {
			port = ""
		} else if err := checkPort(port); err != nil {
			return Scope{}, err
		}
	}
	var host string
	if a, err := netip.ParseAddr(auth); err == nil {
		if !closed {
			return Scope{}, fmt.Errorf("an address in a SURT prefix is closed with \")\"")
		}
		host = a.Unmap().String()
	} else {
		if !strings.HasSuffix(auth, ",") {
			return Scope{}, fmt.Errorf("a SURT prefix's host ends at a label: %q needs a trailing comma", auth)
		}
		labels := strings.Split(strings.TrimSuffix(auth, ","), ",")
		for i, j := 0, len(labels)-1; i < j; i, j = i+1, j-1 {
			labels[i], labels[j] = labels[j], labels[i]
		}
		var err error
		if host, err = canonHost(strings.Join(labels, ".")); err != nil {
			return Scope{}, err
		}
	}
	return prefixScope(host, port, path, !closed)
}

// prefixScope is the scope of a SURT prefix at host (and port), covering the path
// prefix, open when it covers the names under host too. A prefix that stops at the
// authority is the host or domain rule it equals, so each scope has one spelling.
func prefixScope(host, port, path string, open bool) (Scope, error) {
	if open {
		return domainScope(host)
	}
	if port == "" && (path == "" || path == "/") {
		return Scope{Kind: KindHost, Value: host}, nil
	}
	if path == "" {
		path = "/"
	}
	if strings.ContainsAny(path, " \t\r\n#") {
		return Scope{}, fmt.Errorf("path %q has a space or a fragment", path)
	}
	return Scope{Kind: KindPrefix, Value: surtOf(host, port, path)}, nil
}

// surtOf writes a host, port and path as a SURT ("http://(com,example,:8080)/a").
func surtOf(host, port, path string) string {
	var b strings.Builder
	b.Grow(len(surtHead) + len(host) + len(port) + len(path) + 4)
	b.WriteString(surtHead)
	b.WriteString(surtHost(host))
	if port != "" {
		b.WriteByte(':')
		b.WriteString(port)
	}
	b.WriteByte(')')
	b.WriteString(path)
	return b.String()
}

// surtHost is a host's labels reversed, each followed by a comma; an address is written
// as it is (as Heritrix does), IPv6 in brackets.
func surtHost(host string) string {
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Is6() {
			return "[" + host + "]"
		}
		return host
	}
	labels := strings.Split(host, ".")
	var b strings.Builder
	b.Grow(len(host) + 1)
	for i := len(labels) - 1; i >= 0; i-- {
		b.WriteString(labels[i])
		b.WriteByte(',')
	}
	return b.String()
}

// prefixParts splits a canonical surt scope value back into host, port and path.
func prefixParts(v string) (host, port, path string) {
	auth, path, _ := strings.Cut(strings.TrimPrefix(v, surtHead), ")")
	if strings.HasPrefix(auth, "[") {
		end := strings.Index(auth, "]")
		host, rest := auth[1:end], auth[end+1:]
		return host, strings.TrimPrefix(rest, ":"), path
	}
	if i := strings.LastIndex(auth, ":"); i >= 0 {
		auth, port = auth[:i], auth[i+1:]
	}
	if !strings.HasSuffix(auth, ",") {
		return auth, port, path
	}
	labels := strings.Split(strings.TrimSuffix(auth, ","), ",")
	for i, j := 0, len(labels)-1; i < j; i, j = i+1, j-1 {
		labels[i], labels[j] = labels[j], labels[i]
	}
	return strings.Join(labels, "."), port, path
}

func splitHostPort(auth string) (host, port string, err error) {
	if strings.HasPrefix(auth, "[") {
		end := strings.Index(auth, "]")
		if end < 0 {
			return "", "", fmt.Errorf("unclosed [ in %q", auth)
		}
		host, rest := auth[1:end], auth[end+1:]
		if rest == "" {
			return host, "", nil
		}
		if rest[0] != ':' {
			return "", "", fmt.Errorf("bad authority %q", auth)
		}
		return host, rest[1:], checkPort(rest[1:])
	}
	host, port, ok := strings.Cut(auth, ":")
	if !ok {
		return host, "", nil
	}
	if port == "" {
		return host, "", nil
	}
	return host, port, checkPort(port)
}

func checkPort(p string) error {
	n := 0
	for _, c := range p {
		if c < '0' || c > '9' {
			return fmt.Errorf("port %q is not a number", p)
		}
		n = n*10 + int(c-'0')
		if n > 65535 {
			return fmt.Errorf("port %q is out of range", p)
		}
	}
	if p == "" || p[0] == '0' && len(p) > 1 {
		return fmt.Errorf("port %q is not canonical", p)
	}
	return nil
}

func defaultPort(scheme string) string {
	if scheme == "https" {
		return "443"
	}
	return "80"
}
