package extract

import (
	"strings"
)

// robots holds the page-level directives of <meta name=robots> and X-Robots-Tag.
type robots struct {
	noIndex, noFollow bool
}

// apply reads a comma-separated directive list. Directives are also split on white space
// because "noindex nofollow" is common in the wild and no directive contains a space.
func (r *robots) apply(list string) {
	for _, d := range strings.FieldsFunc(list, func(c rune) bool { return c == ',' || c == ' ' || c == '\t' || c == '\n' || c == '\r' }) {
		switch strings.ToLower(d) {
		case "noindex":
			r.noIndex = true
		case "nofollow":
			r.noFollow = true
		case "none":
			r.noIndex, r.noFollow = true, true
		}
	}
}

// Directives that carry a value after a colon; anything else before the first colon of an
// X-Robots-Tag value names the crawler the value is for.
var valuedDirectives = map[string]bool{
	"unavailable_after": true,
	"max-snippet":       true,
	"max-image-preview": true,
	"max-video-preview": true,
}

// applyHeader reads one X-Robots-Tag value: "noindex, nofollow" applies to every crawler,
// "googlebot: noindex" only to the named one.
func (r *robots) applyHeader(v, agent string) {
	if i := strings.IndexByte(v, ':'); i >= 0 {
		ua := strings.ToLower(strings.TrimSpace(v[:i]))
		if ua != "" && !strings.ContainsAny(ua, ", \t") && !valuedDirectives[ua] {
			if ua != agent {
				return
			}
			v = v[i+1:]
		}
	}
	r.apply(v)
}

// headerValues returns every value of a header, matching the name case-insensitively
// because PageMeta.Header round-trips through JSON from whatever the fetcher stored.
func headerValues(h map[string][]string, name string) []string {
	if v, ok := h[name]; ok {
		return v
	}
	var out []string
	for k, v := range h {
		if strings.EqualFold(k, name) {
			out = append(out, v...)
		}
	}
	return out
}

// relHas reports whether a space-separated rel list contains token (ASCII case-insensitive).
func relHas(rel, token string) bool {
	for _, f := range strings.Fields(rel) {
		if strings.EqualFold(f, token) {
			return true
		}
	}
	return false
}

// refreshURL extracts the target of a <meta http-equiv=refresh> content value following the
// HTML standard's "shared declarative refresh steps": "5; url=/next", "0;URL='/x'",
// "3, /y". It returns "" when the refresh reloads the same page.
func refreshURL(content string) string {
	s := strings.TrimLeft(content, " \t\n\r\f")
	i := 0
	for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '.') {
		i++
	}
	if i == 0 {
		return ""
	}
	s = strings.TrimLeft(s[i:], " \t\n\r\f")
	if s != "" && (s[0] == ';' || s[0] == ',') {
		s = strings.TrimLeft(s[1:], " \t\n\r\f")
	}
	if len(s) >= 3 && strings.EqualFold(s[:3], "url") {
		rest := strings.TrimLeft(s[3:], " \t\n\r\f")
		if rest != "" && rest[0] == '=' {
			s = strings.TrimLeft(rest[1:], " \t\n\r\f")
		}
		// "urlfoo" without '=' is itself the URL, as the standard says.
	}
	if s != "" && (s[0] == '\'' || s[0] == '"') {
		q := s[0]
		s = s[1:]
		if j := strings.IndexByte(s, q); j >= 0 {
			s = s[:j]
		}
	}
	return strings.TrimSpace(s)
}

// linkHeaderCanonical returns the target of the first rel=canonical entry of HTTP Link
// header values (RFC 8288), e.g. `<https://x/a>; rel="canonical"`.
func linkHeaderCanonical(values []string) string {
	for _, v := range values {
		for v != "" {
			lt := strings.IndexByte(v, '<')
			if lt < 0 {
				break
			}
			gt := strings.IndexByte(v[lt:], '>')
			if gt < 0 {
				break
			}
			target := v[lt+1 : lt+gt]
			v = v[lt+gt+1:]
			// Parameters run to the next comma outside quotes.
			end, inQuote := len(v), false
			for i := 0; i < len(v); i++ {
				switch v[i] {
				case '"':
					inQuote = !inQuote
				case ',':
					if !inQuote {
						end = i
						i = len(v)
					}
				}
			}
			params := v[:end]
			if end < len(v) {
				v = v[end+1:]
			} else {
				v = ""
			}
			for _, p := range strings.Split(params, ";") {
				k, val, ok := strings.Cut(p, "=")
				if !ok || !strings.EqualFold(strings.TrimSpace(k), "rel") {
					continue
				}
				if relHas(strings.Trim(strings.TrimSpace(val), `"`), "canonical") {
					return strings.TrimSpace(target)
				}
			}
		}
	}
	return ""
}
