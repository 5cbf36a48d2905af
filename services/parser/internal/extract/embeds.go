package extract

import (
	"bytes"
	"errors"
	"net/url"
	"strings"

	"golang.org/x/net/html"

	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/urlnorm"
)

// A page's requisites (Options.Embeds): what a browser loads to show it. Frames are among
// them, as in Heritrix, and stay links too (Result.Links): whether a frame is followed as
// a page or fetched as a requisite is the scope's decision, not the markup's.

// requisiteRels are the link relations whose target a browser loads with the page.
// prefetch is not one: it names what a later navigation may need.
var requisiteRels = []string{"stylesheet", "icon", "apple-touch-icon", "apple-touch-icon-precomposed",
	"mask-icon", "preload", "modulepreload", "manifest"}

// legacyBackground are the elements whose background attribute names an image.
var legacyBackground = map[string]bool{"body": true, "table": true, "tr": true, "td": true, "th": true}

// embedSet collects requisite references before resolution, each once.
type embedSet struct {
	refs  []rawLink
	byRef map[string]bool
}

func (e *embedSet) init(hint int) {
	e.refs = make([]rawLink, 0, hint)
	e.byRef = make(map[string]bool, hint)
}

// add records one reference found in a tag's attribute (or CSS); dropped counts what is
// not fetchable (data:, javascript:, a fragment alone) and what passes max.
func (e *embedSet) add(d *Dropped, href, tag, rel string, max int) bool {
	href = strings.TrimSpace(href)
	switch {
	case href == "":
		return true
	case href[0] == '#':
		d.Fragment++
		return true
	case len(href) > urlnorm.MaxLength:
		d.Invalid++
		return true
	case hasOtherScheme(href):
		d.Scheme++
		return true
	}
	if e.byRef == nil {
		e.init(8)
	}
	if e.byRef[href] {
		return true
	}
	if len(e.refs) >= max {
		d.Limit++
		return false
	}
	e.byRef[href] = true
	e.refs = append(e.refs, rawLink{href: href, tag: tag, rel: rel})
	return true
}

// resolve returns the references as normalised absolute URLs against base, each once.
func (e *embedSet) resolve(d *Dropped, base *url.URL) []crawlmsg.Link {
	if len(e.refs) == 0 {
		return nil
	}
	seen := make(map[string]bool, len(e.refs))
	out := make([]crawlmsg.Link, 0, len(e.refs))
	for _, r := range e.refs {
		u, err := urlnorm.Resolve(base, r.href)
		if err != nil {
			if errors.Is(err, urlnorm.ErrScheme) {
				d.Scheme++
			} else {
				d.Invalid++
			}
			continue
		}
		if seen[u] {
			continue
		}
		seen[u] = true
		out = append(out, crawlmsg.Link{URL: u, Tag: r.tag, Rel: r.rel})
	}
	return out
}

// embed records a requisite of the page.
func (p *parser) embed(href, tag, rel string) {
	if !p.embeds.add(&p.res.EmbedsDropped, href, tag, rel, p.opt.MaxLinks) {
		p.res.EmbedsCapped = true
	}
}

// embedSrcset records every candidate of a srcset (HTML's "parse a srcset attribute"):
// a browser picks one by the screen it has, and a replay may be asked for any.
func (p *parser) embedSrcset(v, tag string) {
	for _, u := range srcsetURLs(v) {
		p.embed(u, tag, "")
	}
}

// embedCSS records the references of CSS text (a <style> element or a style attribute).
func (p *parser) embedCSS(css []byte, tag string) {
	refs, more := cssRefs(css, p.opt.MaxLinks)
	for _, r := range refs {
		p.embed(r, tag, "")
	}
	if more {
		p.res.EmbedsCapped = true
	}
}

// srcsetURLs splits a srcset value into its candidates' URLs. A URL may hold commas
// (only a trailing one ends it), and a descriptor runs to a comma outside parentheses.
func srcsetURLs(v string) []string {
	var out []string
	i := 0
	for i < len(v) {
		for i < len(v) && (asciiSpace(v[i]) || v[i] == ',') {
			i++
		}
		start := i
		for i < len(v) && !asciiSpace(v[i]) {
			i++
		}
		u := v[start:i]
		if trimmed := strings.TrimRight(u, ","); trimmed != u {
			if trimmed != "" {
				out = append(out, trimmed)
			}
			continue
		}
		if u != "" {
			out = append(out, u)
		}
		for depth := 0; i < len(v); i++ {
			switch v[i] {
			case '(':
				depth++
			case ')':
				if depth > 0 {
					depth--
				}
			case ',':
				if depth == 0 {
					goto next
				}
			}
		}
	next:
	}
	return out
}

// onEmbedTag records the requisites of a start tag that loads one. It reports whether it
// read the tag's attributes (then nothing else may: they are read once).
func (p *parser) onEmbedTag(z *html.Tokenizer, name string) bool {
	switch name {
	case "img":
		a, has := attrs(z, "src", "srcset", "alt", "style")
		p.embed(a[0], "img", "")
		p.embedSrcset(a[1], "img")
		p.imageAlt(a[2], has)
		p.embedStyle(a[3])
	case "image":
		// SVG's <image> (an <image> outside SVG is an <img> to the tree builder).
		a, _ := attrs(z, "href", "xlink:href", "src")
		p.embed(first(a[0], a[1], a[2]), "img", "")
	case "source":
		a, _ := attrs(z, "src", "srcset", "style")
		p.embed(a[0], "source", "")
		p.embedSrcset(a[1], "source")
		p.embedStyle(a[2])
	case "script":
		a, _ := attrs(z, "src")
		p.embed(a[0], "script", "")
	case "video":
		a, _ := attrs(z, "src", "poster", "style")
		p.embed(a[0], "video", "")
		p.embed(a[1], "video", "")
		p.embedStyle(a[2])
	case "audio", "track", "embed":
		a, _ := attrs(z, "src", "style")
		p.embed(a[0], name, "")
		p.embedStyle(a[1])
	case "object":
		a, _ := attrs(z, "data", "style")
		p.embed(a[0], "object", "")
		p.embedStyle(a[1])
	case "input":
		a, _ := attrs(z, "type", "src", "style")
		if strings.EqualFold(strings.TrimSpace(a[0]), "image") {
			p.embed(a[1], "input", "")
		}
		p.embedStyle(a[2])
	case "body", "table", "tr", "td", "th":
		a, _ := attrs(z, "background", "style")
		p.embed(a[0], name, "")
		p.embedStyle(a[1])
	default:
		// Any other element may still load an image through its style attribute; the byte
		// search spares reading the attributes of the great majority that do not.
		if !containsFold(z.Raw(), "url(") {
			return false
		}
		a, _ := attrs(z, "style")
		p.embedStyle(a[0])
	}
	return true
}

// embedStyle records the references of a style attribute's declarations.
func (p *parser) embedStyle(v string) {
	if v != "" && strings.Contains(strings.ToLower(v), "url(") {
		p.embedCSS([]byte(v), "style")
	}
}

// onLinkRequisite records a <link> whose relation makes its target a requisite, and
// reports whether it did.
func (p *parser) onLinkRequisite(href, rel, imagesrcset string) bool {
	for _, r := range requisiteRels {
		if relHas(rel, r) {
			if p.opt.Embeds {
				if rel != "" {
					rel = truncateString(strings.ToLower(rel), 64)
				}
				p.embed(href, "link", rel)
				if imagesrcset != "" {
					p.embedSrcset(imagesrcset, "link")
				}
			}
			return true
		}
	}
	return false
}

func first(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// containsFold reports whether b contains the ASCII string lower (given in lower case),
// ignoring ASCII case.
func containsFold(b []byte, lower string) bool {
	for i := 0; i+len(lower) <= len(b); i++ {
		j := bytes.IndexByte(b[i:], lower[0])
		k := bytes.IndexByte(b[i:], lower[0]-('a'-'A'))
		switch {
		case j < 0 && k < 0:
			return false
		case j < 0 || k >= 0 && k < j:
			j = k
		}
		i += j
		if i+len(lower) > len(b) {
			return false
		}
		if bytes.EqualFold(b[i:i+len(lower)], []byte(lower)) {
			return true
		}
	}
	return false
}
