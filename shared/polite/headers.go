package polite

import (
	"bytes"
	"context"
	"net/http"
	"strings"
)

// Headers are request headers a site policy adds for one host (User-Agent, extra headers,
// Cookie, Authorization). They are bound to the host they were resolved for: a request
// under the context to any other host (a redirect target, a robots.txt hop) goes without
// them, so a credential never reaches a host its rule does not name, whatever the caller
// does with the context. A request its host's rule applies to but that another site may
// have started (a page's cross-site subresource, in the renderer) gets WithoutSecrets.
type Headers struct {
	Host   string      // the host name (no port) they may be sent to
	Header http.Header // canonical names; replaces the client's own values of those names
	// Secret names the headers whose values are secrets: a captured request head shows
	// them masked (MaskHead), so an archive never holds them.
	Secret []string
}

// WithoutSecrets is h without its secret headers (Secret): the rule's User-Agent and plain
// headers, for a request that may not carry its credentials. h itself when it has no
// secret (nil stays nil); nil when nothing else is left. h is not changed.
func (h *Headers) WithoutSecrets() *Headers {
	if h == nil || len(h.Secret) == 0 {
		return h
	}
	out := &Headers{Host: h.Host, Header: h.Header.Clone()}
	for _, name := range h.Secret {
		out.Header.Del(name)
	}
	if len(out.Header) == 0 {
		return nil
	}
	return out
}

type headersKey struct{}

// WithHeaders returns ctx carrying h for the requests made under it to h.Host.
func WithHeaders(ctx context.Context, h *Headers) context.Context {
	if h == nil || len(h.Header) == 0 {
		return ctx
	}
	return context.WithValue(ctx, headersKey{}, h)
}

// HeadersFor is ctx's headers when the request goes to host, else nil.
func HeadersFor(ctx context.Context, host string) *Headers {
	h, _ := ctx.Value(headersKey{}).(*Headers)
	if h == nil || !strings.EqualFold(h.Host, host) {
		return nil
	}
	return h
}

// Apply sets h's headers on hdr, replacing its values of those names, except the
// reserved ones. h may be nil.
func (h *Headers) Apply(hdr http.Header) {
	if h == nil {
		return
	}
	for name, vs := range h.Header {
		if !Reserved[name] {
			hdr[name] = vs
		}
	}
}

// Secrets are the names of h's secret headers; nil for a nil h.
func (h *Headers) Secrets() []string {
	if h == nil {
		return nil
	}
	return h.Secret
}

// Reserved are the request headers a policy may not set: the client's framing and its
// content decoding (it asks for its own codings and decodes under its own cap), and the
// validators of a conditional recrawl.
var Reserved = map[string]bool{
	"Host": true, "Content-Length": true, "Transfer-Encoding": true, "Connection": true,
	"Te": true, "Trailer": true, "Upgrade": true, "Keep-Alive": true, "Proxy-Connection": true,
	"Accept-Encoding": true, "If-None-Match": true, "If-Modified-Since": true,
}

// MaskHead returns head (a request head: request line, header lines, blank line) with
// the values of the named headers replaced by "xxxxx".
func MaskHead(head []byte, names []string) []byte {
	if len(names) == 0 || len(head) == 0 {
		return head
	}
	var b bytes.Buffer
	b.Grow(len(head))
	for i, line := range bytes.SplitAfter(head, []byte("\n")) {
		if i > 0 {
			if name, _, ok := bytes.Cut(line, []byte(":")); ok && secretName(string(name), names) {
				b.Write(name)
				b.WriteString(": xxxxx\r\n")
				continue
			}
		}
		b.Write(line)
	}
	return b.Bytes()
}

func secretName(name string, names []string) bool {
	name = strings.TrimSpace(name)
	for _, n := range names {
		if strings.EqualFold(name, n) {
			return true
		}
	}
	return false
}
