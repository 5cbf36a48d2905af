package synthweb

import (
	"html"
	"net/http"
	"strings"
)

// Page requisites (Config.Requisites): every ordinary host's home page embeds a style
// sheet, an icon, a script, an image and an image robots.txt forbids. The sheet @imports a
// second sheet and loads an image and a font by url(); the second sheet loads one more
// image, which is MaxEmbedHops+1 embed hops from the page and so is never fetched.
// Requisites are no links: Expected counts them only when Config.FetchRequisites says
// the crawler fetches them, at the depth of the page (a requisite is no link hop).

// MaxEmbedHops is the crawler's default TRAWL_MAX_EMBED_HOPS, which Expected assumes.
const MaxEmbedHops = 2

const (
	cssType  = "text/css; charset=utf-8"
	jsType   = "text/javascript; charset=utf-8"
	pngType  = "image/png"
	iconType = "image/x-icon"
	fontType = "font/woff2"
)

// Paths of the requisites on an ordinary host.
const (
	sheetPath    = "/static/site.css"
	importPath   = "/static/theme.css"
	scriptPath   = "/static/app.js"
	logoPath     = "/static/logo.png"
	iconPath     = "/favicon.ico"
	bgPath       = "/static/img/bg.png"
	fontPath     = "/static/font.woff2"
	tooDeepPath  = "/static/img/deep.png" // three hops: page, site.css, theme.css
	disallowPath = "/nowhere/pixel.png"   // robots.txt: Disallow: /nowhere/
)

// requisite is one element of a page that loads a resource.
type requisite struct {
	markup string // the element as written
	target string // the normalised absolute URL it loads
}

// withRequisites adds the home page's requisites to res when the web has them.
func (m *model) withRequisites(h int, res resource) resource {
	if !m.cfg.Requisites {
		return res
	}
	tag := func(format, href, path string) requisite {
		return requisite{markup: strings.Replace(format, "%s", html.EscapeString(href), 1), target: m.url(h, path)}
	}
	res.requisites = []requisite{
		tag(`<link rel="stylesheet" href="%s">`, sheetPath, sheetPath),
		tag(`<link rel="icon" href="%s">`, iconPath, iconPath),
		tag(`<script src="%s"></script>`, strings.TrimPrefix(scriptPath, "/"), scriptPath), // relative
		tag(`<img src="%s" alt="">`, m.url(h, logoPath), logoPath),                         // absolute
		tag(`<img src="%s" alt="">`, disallowPath, disallowPath),
	}
	return res
}

// requisiteResource serves the requisites of an ordinary host; ok is false for any other
// path.
func (m *model) requisiteResource(h int, path string) (resource, bool) {
	if !m.cfg.Requisites {
		return resource{}, false
	}
	ok := func(ctype, body string, loads ...string) (resource, bool) {
		r := resource{status: http.StatusOK, contentType: ctype, body: body}
		for _, p := range loads {
			r.requisites = append(r.requisites, requisite{target: m.url(h, p)})
		}
		return r, true
	}
	switch path {
	case sheetPath:
		return ok(cssType, `@import "theme.css";
/* url(/static/img/commented.png) is not loaded */
body { background: #fff url(img/bg.png) no-repeat; }
@font-face { font-family: "Synth"; src: url("/static/font.woff2") format("woff2"); }
`, importPath, bgPath, fontPath)
	case importPath:
		return ok(cssType, "h1 { background-image: url('img/deep.png'); }\n", tooDeepPath)
	case scriptPath:
		return ok(jsType, "document.title += ' (scripted)';\n")
	case logoPath, bgPath, tooDeepPath:
		return ok(pngType, "\x89PNG\r\n\x1a\nsynthetic image "+path+"\n")
	case iconPath:
		return ok(iconType, "\x00\x00\x01\x00synthetic icon\n")
	case fontPath:
		return ok(fontType, "wOF2synthetic font\n")
	}
	return resource{}, false
}

// renderRequisites writes the elements of res's requisites.
func renderRequisites(b *strings.Builder, res resource) {
	for _, r := range res.requisites {
		b.WriteString(r.markup)
		b.WriteByte('\n')
	}
}

// expectRequisites walks the requisites of res, a resource fetched at depth, into exp:
// fetched when the crawler fetches requisites and within MaxEmbedHops, robots.txt obeyed;
// otherwise never requested (listed in unfollowed).
func (m *model) expectRequisites(res resource, hops int, visited map[string]bool, forbidden func(string) bool,
	exp *Expectation, unfollowed *[]string) {
	for _, r := range res.requisites {
		if !m.cfg.FetchRequisites || hops+1 > MaxEmbedHops {
			// Never requested, and neither is anything it would load.
			*unfollowed = append(*unfollowed, r.target)
			if h, pq, ok := m.lookup(r.target); ok {
				m.expectRequisites(m.resource(h, pq), MaxEmbedHops, visited, forbidden, exp, unfollowed)
			}
			continue
		}
		if visited[r.target] {
			continue
		}
		visited[r.target] = true
		if forbidden(r.target) {
			continue
		}
		exp.Fetch[r.target] = true
		if h, pq, ok := m.lookup(r.target); ok {
			m.expectRequisites(m.resource(h, pq), hops+1, visited, forbidden, exp, unfollowed)
		}
	}
}

// Requisites returns the requisite URLs of the web's home pages and of the sheets they
// load, each with the embed hops from its page: what a crawl that fetches requisites
// finds, within MaxEmbedHops or beyond it.
func (w *Web) Requisites() map[string]int {
	out := map[string]int{}
	var walk func(res resource, hops int)
	walk = func(res resource, hops int) {
		for _, r := range res.requisites {
			if _, seen := out[r.target]; seen {
				continue
			}
			out[r.target] = hops + 1
			if h, pq, ok := w.m.lookup(r.target); ok {
				walk(w.m.resource(h, pq), hops+1)
			}
		}
	}
	for _, u := range w.m.seedURLs() {
		if h, pq, ok := w.m.lookup(u); ok {
			walk(w.m.resource(h, pq), 0)
		}
	}
	return out
}
