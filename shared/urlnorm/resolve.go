package urlnorm

import (
	"fmt"
	"net/url"
	"strings"
)

// Resolving: references against a base, RFC 3986 §5 as browsers read it.

// Resolve resolves ref against base (RFC 3986 §5) and normalises the result. base must be
// absolute; ref may be relative. ref is read as a browser reads an href (see the package
// comment): "http:g" against an http base is relative, backslashes are slashes.
func Resolve(base *url.URL, ref string) (string, error) {
	s, err := clean(ref)
	if err != nil {
		return "", err
	}
	if u, ok := resolveFast(base, s); ok {
		return u, nil
	}
	return resolveClean(base, s)
}

// resolveClean is Resolve of a reference clean has prepared, by the general rules.
func resolveClean(base *url.URL, s string) (string, error) {
	if scheme, rest, ok := splitScheme(s); ok {
		// A special scheme equal to the base's, not followed by "//", is relative to the
		// base (WHATWG "special relative or authority state"); any other scheme makes ref
		// absolute.
		if !strings.EqualFold(scheme, base.Scheme) || !isSpecial(scheme) || strings.HasPrefix(slashes(rest), "//") {
			return normalizeGeneral(s)
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
