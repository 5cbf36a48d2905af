package synthweb

import (
	"html"
	"math/rand/v2"
	"strings"
)

// gen collects the links of one page, writing each target in a randomly
// chosen but deterministic spelling so the crawler's link parser and URL
// normaliser are exercised. Targets are computed directly; a test checks
// that resolving every href with net/url yields the same target.
type gen struct {
	m       *model
	h       int
	self    string // path of the page itself
	dir     string // directory relative hrefs resolve against
	hasBase bool
	rng     *rand.Rand
	links   []link
}

func newGen(m *model, h int, self string, rng *rand.Rand) *gen {
	return &gen{m: m, h: h, self: self, dir: self[:strings.LastIndex(self, "/")+1], rng: rng}
}

// setBase records that the page has a <base> resolving to dir.
func (g *gen) setBase(dir string) { g.dir, g.hasBase = dir, true }

func (g *gen) add(th int, pathQuery, text string) { g.addRel(th, pathQuery, text, "") }

func (g *gen) addRel(th int, pathQuery, text, rel string) {
	hostport := strings.TrimPrefix(g.m.hosts[th].Origin, "http://")
	var forms []string
	forms = append(forms,
		"http://"+hostport+pathQuery,
		"HTTP://"+hostport+pathQuery, // schemes are case-insensitive
		"//"+hostport+pathQuery,      // scheme-relative
	)
	if th == g.h {
		forms = append(forms, pathQuery, dotSegment(pathQuery))
		if rel, ok := relativeTo(g.dir, pathQuery); ok {
			forms = append(forms, rel, "./"+rel)
		}
		if up, ok := upTo(g.dir, pathQuery); ok {
			forms = append(forms, up)
		}
	}
	href := forms[g.rng.IntN(len(forms))]
	if g.rng.IntN(5) == 0 {
		href += "#sec" + string(rune('1'+g.rng.IntN(9)))
	}
	g.links = append(g.links, link{href: href, text: text, rel: rel, target: g.m.url(th, pathQuery), style: g.rng.IntN(numStyles)})
}

// addCanon adds a link to pathQuery whose session-id-free form is canonPathQuery.
func (g *gen) addCanon(th int, pathQuery, canonPathQuery, text string) {
	g.add(th, pathQuery, text)
	if canonPathQuery != pathQuery {
		g.links[len(g.links)-1].canon = g.m.url(th, canonPathQuery)
	}
}

// raw adds a link written exactly as given. Fragment-only hrefs resolve to
// the document's base URL; non-HTTP schemes have no target.
func (g *gen) raw(href, text, rel, target string) {
	if strings.HasPrefix(href, "#") {
		if g.hasBase {
			target = g.m.url(g.h, g.dir)
		} else {
			target = g.m.url(g.h, g.self)
		}
	}
	g.links = append(g.links, link{href: href, text: text, rel: rel, target: target, style: g.rng.IntN(numStyles)})
}

// relativeTo writes pathQuery relative to dir when it lies below it.
func relativeTo(dir, pathQuery string) (string, bool) {
	rel, ok := strings.CutPrefix(pathQuery, dir)
	if !ok || rel == "" || strings.HasPrefix(rel, "?") {
		return "", false
	}
	// A colon before the first slash would read as a scheme.
	if seg, _, _ := strings.Cut(rel, "/"); strings.Contains(seg, ":") {
		return "", false
	}
	return rel, true
}

// upTo writes pathQuery as "../" steps from dir to their nearest common
// ancestor (at least one step) followed by the remaining path.
func upTo(dir, pathQuery string) (string, bool) {
	anc, steps := dir, 0
	for anc != "/" {
		anc = anc[:strings.LastIndex(strings.TrimSuffix(anc, "/"), "/")+1]
		steps++
		if strings.HasPrefix(pathQuery, anc) {
			return strings.Repeat("../", steps) + pathQuery[len(anc):], true
		}
	}
	return "", false
}

// dotSegment spells a path with a "x/../" detour that normalises away.
func dotSegment(pathQuery string) string {
	p, q, hasQ := strings.Cut(pathQuery, "?")
	i := strings.LastIndex(p, "/")
	p = p[:i+1] + "x/../" + p[i+1:]
	if hasQ {
		p += "?" + q
	}
	return p
}

const numStyles = 6

// render writes res as HTML. Everything but the markup variety comes from
// res, so the served bytes are a pure function of the seed.
func (m *model) render(res resource) []byte {
	if res.contentType != htmlType || res.verbatim {
		return []byte(res.body)
	}
	rng := rand.New(rand.NewPCG(res.textSeed, 0x5eed))
	var b strings.Builder
	b.Grow(2048 + 120*len(res.links))
	b.WriteString("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>")
	b.WriteString(html.EscapeString(res.title))
	b.WriteString("</title>\n")
	if res.base != "" {
		b.WriteString(`<base href="` + html.EscapeString(res.base) + "\">\n")
	}
	renderRequisites(&b, res)
	b.WriteString("</head>\n<body>\n<h1>")
	b.WriteString(html.EscapeString(res.title))
	b.WriteString("</h1>\n")
	if res.status >= 400 || res.location != "" {
		b.WriteString("</body>\n</html>\n")
		return []byte(b.String())
	}

	// Half the links sit inside running text, the rest in a list, so a
	// parser cannot get away with only reading navigation lists.
	inline := len(res.links) / 2
	paras := 3
	if res.paras > 0 {
		paras = res.paras
	}
	word := 0
	for p := 0; p < paras; p++ {
		b.WriteString("<p>")
		words := 25 + rng.IntN(30)
		for w := 0; w < words; w++ {
			if w > 0 {
				b.WriteByte(' ')
			}
			text := lorem[rng.IntN(len(lorem))]
			if word++; word == res.swapWord {
				text = swapped
			}
			b.WriteString(text)
		}
		// Spread the inline links over the paragraphs.
		for i := p; i < inline; i += paras {
			b.WriteString(" see ")
			writeLink(&b, res.links[i])
			b.WriteString(" then")
		}
		b.WriteString(".</p>\n")
	}
	if inline < len(res.links) {
		b.WriteString("<ul>\n")
		for _, l := range res.links[inline:] {
			b.WriteString("<li>")
			writeLink(&b, l)
			b.WriteString("</li>\n")
		}
		b.WriteString("</ul>\n")
	}
	b.WriteString("</body>\n</html>\n")
	return []byte(b.String())
}

func writeLink(b *strings.Builder, l link) {
	href := html.EscapeString(l.href)
	text := html.EscapeString(l.text)
	rel := ""
	if l.rel != "" {
		rel = ` rel="` + html.EscapeString(l.rel) + `"`
	}
	switch l.style {
	case 1:
		b.WriteString(`<a` + rel + ` href='` + href + `'>` + text + `</a>`)
	case 2:
		if unquotedOK(l.href) {
			b.WriteString(`<a href=` + l.href + rel + `>` + text + `</a>`)
			return
		}
		b.WriteString(`<a href="` + href + `"` + rel + `>` + text + `</a>`)
	case 3:
		if l.rel != "" {
			rel = ` REL="` + html.EscapeString(l.rel) + `"`
		}
		b.WriteString(`<A HREF="` + href + `"` + rel + `>` + text + `</A>`)
	case 4:
		b.WriteString(`<a class="nav" title="` + text + `"` + rel + ` href="` + href + `">` + text + `</a>`)
	case 5:
		b.WriteString("<a\n   href=\"" + href + "\"" + rel + "\n   >" + text + "</a>")
	default:
		b.WriteString(`<a href="` + href + `"` + rel + `>` + text + `</a>`)
	}
}

// unquotedOK reports whether s may be an unquoted attribute value without
// any escaping.
func unquotedOK(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.ContainsRune("/:._#?-", c):
		default:
			return false
		}
	}
	return true
}

var lorem = strings.Fields(`crawl frontier politeness robots fetch parse queue host
delay depth link anchor index shard stream message redis nats dedup bloom
sitemap canonical fragment scheme port path query redirect status header body
charset token agent schedule worker lease retry backoff jitter window budget
harvest spider archive snapshot mirror beacon lantern harbour signal meadow river`)
