package urlnorm

import (
	"cmp"
	"slices"
	"strings"
)

// Options are normalisations beyond RFC 3986's safe ones. Each may merge URLs that a
// server tells apart, so each is a choice of the operator; the zero Options is Normalize.
type Options struct {
	// StripSessionIDs removes session identifiers that servers put in URLs for clients
	// without cookies, so that every visit of a crawler, which keeps no cookies, does not
	// mint a new URL for every page (the classic session-id crawler trap). Removed:
	//
	//   - query parameters named jsessionid, phpsessid, sessionid, session_id, cfid,
	//     cftoken or aspsessionid<anything> (ASP's ASPSESSIONIDxxxxxxxx), compared
	//     case-insensitively, whatever their value;
	//   - a query parameter named sid only when its value looks like a session token, 16
	//     or more letters and digits (a short sid=7 is often a section or site id, and
	//     Heritrix also strips sid only for 32-character values);
	//   - the same names as path parameters (";jsessionid=…" of Java servlet URL
	//     rewriting), in any path segment.
	//
	// Tracking parameters (utm_*) are not removed: they are not session ids and some sites
	// do vary content by campaign; a scope exclude rule handles them where needed.
	StripSessionIDs bool
	// SortQuery sorts query parameters by name (stably, so repeated names keep their
	// order) and drops empty ones ("a=1&&b=2"), so "?b=2&a=1" and "?a=1&b=2" are one URL.
	SortQuery bool
}

// NormalizeWith returns the normal form of raw with opts applied on top of Normalize.
// Like Normalize it is idempotent: NormalizeWith(NormalizeWith(u, o), o) is
// NormalizeWith(u, o).
func NormalizeWith(raw string, opts Options) (string, error) {
	n, err := Normalize(raw)
	if err != nil || opts == (Options{}) {
		return n, err
	}
	// The normal form has no fragment, and its path and query are canonically escaped:
	// parameter names of unreserved characters appear decoded, so plain comparisons work.
	start := strings.Index(n, "://") + 3
	start += strings.IndexByte(n[start:], '/')
	prefix, rest := n[:start], n[start:]
	path, query, hasQuery := strings.Cut(rest, "?")
	if opts.StripSessionIDs {
		if stripped := stripPathParams(path); stripped != path {
			// "/..;jsessionid=X/a" becomes a dot segment only now.
			path = removeDotSegments(stripped)
		}
		if hasQuery {
			query = stripQueryParams(query)
		}
	}
	if opts.SortQuery && hasQuery {
		query = sortQuery(query)
	}
	if path == "" {
		path = "/"
	}
	if query == "" {
		return prefix + path, nil
	}
	return prefix + path + "?" + query, nil
}

// isSessionParam reports whether name=value is a session id by StripSessionIDs' rules.
func isSessionParam(name, value string) bool {
	name = strings.ToLower(name)
	switch name {
	case "jsessionid", "phpsessid", "sessionid", "session_id", "cfid", "cftoken":
		return true
	case "sid":
		return len(value) >= 16 && strings.Trim(value, "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ") == ""
	}
	return strings.HasPrefix(name, "aspsessionid")
}

// stripPathParams removes session-id parameters from every path segment
// ("/a;jsessionid=X/b;v=1" → "/a/b;v=1").
func stripPathParams(path string) string {
	if !strings.Contains(path, ";") {
		return path
	}
	segs := strings.Split(path, "/")
	for i, seg := range segs {
		if !strings.Contains(seg, ";") {
			continue
		}
		params := strings.Split(seg, ";")
		kept := params[:1]
		for _, p := range params[1:] {
			name, value, _ := strings.Cut(p, "=")
			if !isSessionParam(name, value) {
				kept = append(kept, p)
			}
		}
		segs[i] = strings.Join(kept, ";")
	}
	return strings.Join(segs, "/")
}

// stripQueryParams removes session-id parameters; the others keep their order and
// spelling, so a query without session ids comes back unchanged.
func stripQueryParams(query string) string {
	params := strings.Split(query, "&")
	kept := params[:0]
	for _, p := range params {
		name, value, _ := strings.Cut(p, "=")
		if !isSessionParam(name, value) {
			kept = append(kept, p)
		}
	}
	if len(kept) == len(params) {
		return query
	}
	return strings.Join(kept, "&")
}

func sortQuery(query string) string {
	params := slices.DeleteFunc(strings.Split(query, "&"), func(p string) bool { return p == "" })
	slices.SortStableFunc(params, func(a, b string) int {
		an, _, _ := strings.Cut(a, "=")
		bn, _, _ := strings.Cut(b, "=")
		return cmp.Compare(an, bn)
	})
	return strings.Join(params, "&")
}
