package crawlmsg

import (
	"encoding/base64"
	"fmt"

	json "github.com/goccy/go-json"
)

// Kind says what a URL is fetched for. It travels with the URL from its discovery to its
// page (Discovered, the frontier's queue entry, FetchTask, PageMeta) so that every stage
// treats a requisite or a sitemap as such without guessing from the URL.
type Kind string

const (
	// KindPage is a page proper (the zero value): found by a link, a seed or a redirect,
	// counted in link depth.
	KindPage Kind = ""
	// KindEmbed is a page requisite: an image, stylesheet, script, font, frame or media file
	// a page embeds (Heritrix's "E" hop). It keeps the depth of the page that embeds it and
	// counts Embeds instead, so that a faithful capture does not cost link depth.
	KindEmbed Kind = "embed"
	// KindSitemap is a sitemap or sitemap index (sitemaps.org): read for the URLs it lists,
	// not for links.
	KindSitemap Kind = "sitemap"
)

// Valid reports whether k is a kind this code knows.
func (k Kind) Valid() bool {
	switch k {
	case KindPage, KindEmbed, KindSitemap:
		return true
	}
	return false
}

// Extra is what a queued URL carries beyond its depth, redirect hops and attempt: the
// fields that are zero for almost every URL, so that they cost nothing in the frontier
// unless set. It is kept in the queue entry (frontierkeys.Entry.Ext) as Encode writes it.
type Extra struct {
	Kind   Kind `json:"k,omitempty"`
	Embeds int  `json:"e,omitempty"` // embed hops in a row that led here (caps requisite chains)
	// Recrawl is the state of a URL queued again by its recrawl schedule; nil otherwise.
	Recrawl *Recrawl `json:"r,omitempty"`
	// Under is a sitemap's cross-submission prefix (Discovered.Under).
	Under string `json:"u,omitempty"`
}

// IsZero reports whether x carries nothing (a plain page).
func (x Extra) IsZero() bool { return x == Extra{} }

// Encode is x as a queue entry extension: "" when x is zero, otherwise the base64url
// (unpadded) of its JSON, a token without spaces whatever the fields hold.
func (x Extra) Encode() (string, error) {
	if x.IsZero() {
		return "", nil
	}
	b, err := json.Marshal(x)
	if err != nil {
		return "", fmt.Errorf("crawlmsg: encode extra: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// DecodeExtra reads an extension written by Extra.Encode; "" is the zero Extra.
func DecodeExtra(s string) (Extra, error) {
	var x Extra
	if s == "" {
		return x, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return x, fmt.Errorf("%w: extra %q: %v", ErrMalformed, s, err)
	}
	if err := json.Unmarshal(b, &x); err != nil {
		return x, fmt.Errorf("%w: extra %q: %v", ErrMalformed, s, err)
	}
	if !x.Kind.Valid() || x.Embeds < 0 {
		return x, fmt.Errorf("%w: extra %q: kind %q, embeds %d", ErrMalformed, s, x.Kind, x.Embeds)
	}
	return x, nil
}
