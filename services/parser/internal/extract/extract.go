//go:generate go run gen_fixtures.go

// Package extract pulls links, title, description, language and visible text out of an
// HTML page with golang.org/x/net/html's streaming tokenizer. No tree is built, and every
// quantity that depends on the input (bytes read, tokens, links, text) is capped, so a
// hostile page costs at most a bounded amount of time and memory.
package extract

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"sync"

	"golang.org/x/net/html"

	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/urlnorm"
)

// ErrPageURL marks a page whose own URL cannot serve as a base: text and title are still
// extracted, links are not.
var ErrPageURL = errors.New("extract: page URL is not a usable base")

// Limits bound the work done for one page. A zero field takes its DefaultLimits value; a
// negative MaxTextBytes keeps no text at all.
type Limits struct {
	MaxBytes       int // body bytes tokenised; the rest is ignored
	MaxTokens      int // tokens read before giving up on the rest of the page
	MaxLinks       int // distinct links kept (the rest are counted, not kept)
	MaxTextBytes   int // visible text
	MaxAnchorBytes int // anchor text of one link
	MaxMetaBytes   int // title, description, rel, lang
}

// DefaultLimits suit pages up to the pipeline's 8 MiB message size.
func DefaultLimits() Limits {
	return Limits{
		MaxBytes:       8 << 20,
		MaxTokens:      1 << 20,
		MaxLinks:       5000,
		MaxTextBytes:   256 << 10,
		MaxAnchorBytes: 256,
		MaxMetaBytes:   1024,
	}
}

// Options configure Extract.
type Options struct {
	Limits
	// RobotsAgent is the crawler's product token (lowercase): <meta name="<agent>"> and
	// "X-Robots-Tag: <agent>: …" apply to it as well as the generic robots forms.
	RobotsAgent string
	// Embeds finds the page's requisites too (Result.Embeds). Off, no attribute of an
	// element that is not a link is read, so the common case costs nothing more.
	Embeds bool
}

// Input is one fetched page.
type Input struct {
	URL         string              // the page's (normalised) URL: the base for relative links
	Body        []byte              // raw body as received
	ContentType string              // full Content-Type value; its charset parameter is honoured
	Header      map[string][]string // response header (X-Robots-Tag, Link)
}

// Dropped counts link candidates that were not kept.
type Dropped struct {
	Scheme   int // not http(s): javascript:, mailto:, data:, tel:, ftp: …
	Invalid  int // unparsable or unusable (no host, bad port, over-long)
	Fragment int // "#…" only: a place in the page itself
	Limit    int // beyond MaxLinks
}

// Result is what was found in a page.
type Result struct {
	// Links are the distinct outlinks in document order. NoFollow is set for a link whose
	// own rel says nofollow and for every link when the page says nofollow.
	Links       []crawlmsg.Link
	Title       string
	Description string
	Lang        string
	Text        string // visible text, white space collapsed, capped at MaxTextBytes
	Canonical   string // from <link rel=canonical>, else from a Link response header
	NoIndex     bool   // meta robots or X-Robots-Tag noindex/none
	NoFollow    bool   // meta robots or X-Robots-Tag nofollow/none
	BaseURL     string // the base links were resolved against
	Charset     string // encoding the body was read as
	Dropped     Dropped
	// StoppedAt is "bytes" or "tokens" when the input limit cut processing short (the
	// rest of the page was not seen), "" when the whole body was read.
	StoppedAt   string
	TextCapped  bool // visible text reached MaxTextBytes
	LinksCapped bool // distinct links reached MaxLinks

	// Embeds are the page's requisites (Options.Embeds), distinct, in document order:
	// images (src and every srcset candidate), scripts, stylesheets, icons, preloads and
	// manifests (<link>), media and their posters and tracks, objects, frames, and what
	// CSS in <style> and style attributes loads. Tag is the element ("css" for a style
	// sheet's references, "style" for inline CSS), Rel a <link>'s relation.
	Embeds        []crawlmsg.Link
	EmbedsDropped Dropped // requisite references not kept (data: URLs are common)
	EmbedsCapped  bool    // distinct requisites reached MaxLinks
}

// Elements whose content is not visible page text. Script-like content is not text at
// all; fallback content (shown only without scripts, or inert templates) is not page text,
// but the links in it are real and their anchor text is kept.
var (
	scriptLike = map[string]bool{"script": true, "style": true, "title": true, "iframe": true}
	fallback   = map[string]bool{"noscript": true, "noframes": true, "noembed": true, "template": true}
)

// Elements allowed in <head>; any other start tag implicitly ends it, as in the HTML
// parser's "in head" insertion mode.
var headElements = map[string]bool{
	"title": true, "meta": true, "link": true, "base": true, "script": true, "style": true,
	"noscript": true, "template": true, "head": true, "html": true,
}

// Elements whose edges separate words in the rendered text.
var blockElements = map[string]bool{
	"address": true, "article": true, "aside": true, "blockquote": true, "body": true, "br": true,
	"dd": true, "details": true, "dialog": true, "div": true, "dl": true, "dt": true,
	"fieldset": true, "figcaption": true, "figure": true, "footer": true, "form": true,
	"h1": true, "h2": true, "h3": true, "h4": true, "h5": true, "h6": true, "header": true,
	"hr": true, "li": true, "main": true, "nav": true, "ol": true, "option": true, "p": true,
	"pre": true, "section": true, "summary": true, "table": true, "td": true, "th": true,
	"tr": true, "ul": true, "caption": true, "img": true, "input": true, "button": true,
	"select": true, "textarea": true, "iframe": true, "frame": true, "hgroup": true,
}

// Classes of a tag name, from the sets above, so that a tag costs one lookup instead of
// one per set.
const (
	script          = 1 << iota // scriptLike
	fallbackContent             // fallback
	inHead                      // headElements
	block                       // blockElements
)

var tagClasses = func() map[string]uint8 {
	m := map[string]uint8{}
	for set, class := range map[*map[string]bool]uint8{&scriptLike: script, &fallback: fallbackContent, &headElements: inHead, &blockElements: block} {
		for name := range *set {
			m[name] |= class
		}
	}
	return m
}()

// rawLink is a link as found, before resolution: resolution waits for the end of the
// document because <base href> applies to links that precede it too.
type rawLink struct {
	href     string
	text     string
	rel      string
	tag      string
	noFollow bool
}

type parser struct {
	opt   Options
	links []rawLink
	byRef map[string]int // href → index in links, so repeats merge before resolution
	seen  map[string]int // resolved URL → index in Result.Links
	res   Result

	text, anchor, title, desc collapser

	anchorIdx   int  // link the open <a> feeds its text to, or -1
	anchorOwns  bool // the open <a> may set that link's text (it had none)
	inTitle     bool
	titleDone   bool
	inHead      bool
	scriptDepth int // depth inside scriptLike elements
	fallDepth   int // depth inside fallback elements
	foreign     int // depth inside <svg>/<math>, whose <title> is not the page title
	baseHref    string
	baseSeen    bool
	canonical   string
	langSeen    bool
	descSeen    bool
	robots      robots
	robotsAgent string
	nameBuf     [32]byte // the current tag's name (tagName)

	embeds   embedSet
	inStyle  bool   // inside a <style> element (Options.Embeds)
	styleBuf []byte // its text, read for url() and @import at its end
}

// scratch is what one extraction needs only while it runs: the raw links and the maps
// that merge repeats. Kept for the next page (per worker, through a pool) instead of
// allocated and grown again for every page.
type scratch struct {
	links []rawLink
	byRef map[string]int
	seen  map[string]int
}

// scratchKeep is the most links whose table and maps are kept for the next page: clearing
// a map costs its size, and a page of thousands of links is rare.
const scratchKeep = 1024

var scratches = sync.Pool{New: func() any {
	return &scratch{byRef: make(map[string]int), seen: make(map[string]int)}
}}

// put gives the scratch back, emptied; it holds no reference into the page any more.
func (sc *scratch) put() {
	if len(sc.links) > scratchKeep {
		*sc = scratch{byRef: make(map[string]int), seen: make(map[string]int)}
	} else {
		clear(sc.links)
		sc.links = sc.links[:0]
		clear(sc.byRef)
		clear(sc.seen)
	}
	scratches.Put(sc)
}

// Extract parses one page. It always returns a Result with whatever could be extracted;
// the error (ErrPageURL, or a tokenizer read error) says it is incomplete.
func Extract(in Input, opt Options) (res *Result, err error) {
	opt = withDefaults(opt)
	p := &parser{
		opt:         opt,
		text:        newCollapser(opt.MaxTextBytes),
		anchor:      newCollapser(opt.MaxAnchorBytes),
		title:       newCollapser(opt.MaxMetaBytes),
		desc:        newCollapser(opt.MaxMetaBytes),
		anchorIdx:   -1,
		robotsAgent: strings.ToLower(opt.RobotsAgent),
	}
	for _, v := range headerValues(in.Header, "X-Robots-Tag") {
		p.robots.applyHeader(v, p.robotsAgent)
	}

	body := in.Body
	if len(body) > opt.MaxBytes {
		body = body[:opt.MaxBytes]
		p.res.StoppedAt = "bytes"
	}
	// Sizing the text buffer up front saves regrowing it: visible text measured 58–68% of
	// the markup on both the article fixture and the synthetic web's pages.
	p.text.buf = make([]byte, 0, min(opt.MaxTextBytes, len(body)*2/3))
	// The link table and its index keep their size from page to page (scratch), so the
	// body is not scanned to size them.
	sc := scratches.Get().(*scratch)
	defer sc.put()
	p.links, p.byRef, p.seen = sc.links, sc.byRef, sc.seen
	defer func() { sc.links = p.links }()
	r, cs := decode(body, in.ContentType)
	p.res.Charset = cs
	tokErr := p.tokenize(r)
	p.closeAnchor() // an <a> left open at the end of the input still gets its text
	p.endStyle()    // so does a <style> left open

	p.res.TextCapped = p.text.full && opt.MaxTextBytes > 0
	p.res.Text = p.text.take()
	p.res.Title = p.title.take()
	p.res.Description = p.desc.take()
	p.res.NoIndex = p.robots.noIndex
	p.res.NoFollow = p.robots.noFollow

	page, perr := urlnorm.Parse(in.URL)
	if perr != nil {
		return &p.res, errors.Join(fmt.Errorf("%w: %w", ErrPageURL, perr), tokErr)
	}
	p.resolve(page, headerValues(in.Header, "Link"))
	return &p.res, tokErr
}

// withDefaults fills the zero limits of opt from DefaultLimits; a negative MaxTextBytes
// becomes 0 (no text kept).
func withDefaults(opt Options) Options {
	noText := opt.MaxTextBytes < 0
	def := DefaultLimits()
	for _, f := range []struct {
		v *int
		d int
	}{
		{&opt.MaxBytes, def.MaxBytes}, {&opt.MaxTokens, def.MaxTokens}, {&opt.MaxLinks, def.MaxLinks},
		{&opt.MaxTextBytes, def.MaxTextBytes}, {&opt.MaxAnchorBytes, def.MaxAnchorBytes}, {&opt.MaxMetaBytes, def.MaxMetaBytes},
	} {
		if *f.v <= 0 {
			*f.v = f.d
		}
	}
	if noText {
		opt.MaxTextBytes = 0
	}
	return opt
}

func (p *parser) tokenize(r io.Reader) error {
	z := html.NewTokenizer(r)
	for tokens := 0; ; tokens++ {
		if tokens >= p.opt.MaxTokens {
			p.res.StoppedAt = "tokens"
			return nil
		}
		switch z.Next() {
		case html.ErrorToken:
			if err := z.Err(); !errors.Is(err, io.EOF) {
				return fmt.Errorf("extract: tokenize: %w", err)
			}
			return nil
		case html.TextToken:
			p.onText(z.Text())
		case html.StartTagToken:
			p.onStart(z, false)
		case html.SelfClosingTagToken:
			p.onStart(z, true)
		case html.EndTagToken:
			p.onEnd(string(tagName(z, &p.nameBuf)))
		}
	}
}

func (p *parser) onText(t []byte) {
	if p.inTitle {
		p.title.write(t)
		return
	}
	if p.inStyle {
		// Bounded by the page: the tokenizer never gives more than MaxBytes in all.
		p.styleBuf = append(p.styleBuf, t...)
		return
	}
	if p.scriptDepth > 0 {
		return
	}
	if p.anchorIdx >= 0 && p.anchorOwns {
		p.anchor.write(t)
	}
	if p.fallDepth > 0 {
		return
	}
	if p.inHead {
		// Non-blank text in <head> starts the body, as the HTML parser does.
		if isBlank(t) {
			return
		}
		p.inHead = false
	}
	p.text.write(t)
}

// tagName returns the current start or end tag's name lowercased, as z.TagName does, but
// read from the raw token into buf: TagName copies every name (to replace NUL bytes), an
// allocation per tag. A name holding a NUL, or too long for buf, is left to TagName.
func tagName(z *html.Tokenizer, buf *[32]byte) []byte {
	raw := z.Raw()
	// The tokenizer only makes a tag token of "<" or "</" followed by a letter.
	i := 1
	if len(raw) > 1 && raw[1] == '/' {
		i = 2
	}
	n := 0
	for ; i < len(raw); i++ {
		c := raw[i]
		switch c {
		case ' ', '\n', '\r', '\t', '\f', '/', '>':
			return buf[:n]
		case 0:
			name, _ := z.TagName()
			return name
		}
		if n == len(buf) {
			name, _ := z.TagName()
			return name
		}
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		buf[n] = c
		n++
	}
	return buf[:n]
}

func (p *parser) onStart(z *html.Tokenizer, selfClosing bool) {
	// name must not escape (link tags below are literals), so it stays off the heap.
	name := string(tagName(z, &p.nameBuf))
	class := tagClasses[name]
	if p.inHead && class&inHead == 0 {
		p.inHead = false
	}
	if class&block != 0 {
		p.text.sep()
		p.anchor.sep()
	}
	switch name {
	case "a", "area":
		p.closeAnchor()
		a, _ := attrs(z, "href", "rel", "alt", p.styleAttr())
		if p.opt.Embeds {
			p.embedStyle(a[3])
		}
		if a[0] == "" {
			// A named anchor (<a name=x>) still closes the previous one.
			break
		}
		tag := "a"
		if name == "area" {
			tag = "area"
		}
		idx, fresh := p.addLink(a[0], tag, a[1])
		if tag == "area" {
			if idx >= 0 && fresh {
				c := newCollapser(p.opt.MaxAnchorBytes)
				c.writeString(a[2])
				p.links[idx].text = c.String()
			}
			break
		}
		p.anchorIdx = idx
		p.anchorOwns = idx >= 0 && p.links[idx].text == ""
		p.anchor.reset()
	case "frame", "iframe":
		tag := "frame"
		if name == "iframe" {
			tag = "iframe"
		}
		a, _ := attrs(z, "src")
		p.addLink(a[0], tag, "")
		if p.opt.Embeds {
			// A frame is a requisite too (Heritrix's embed); see embeds.go.
			p.embed(a[0], tag, "")
		}
	case "link":
		a, _ := attrs(z, "href", "rel", "imagesrcset")
		p.onLinkElement(a)
	case "base":
		if !p.baseSeen {
			if a, _ := attrs(z, "href"); a[0] != "" {
				p.baseHref, p.baseSeen = a[0], true
			}
		}
	case "meta":
		a, _ := attrs(z, "name", "content", "http-equiv")
		p.onMeta(a)
	case "html":
		if !p.langSeen {
			a, _ := attrs(z, "lang", "xml:lang")
			lang := a[0]
			if lang == "" {
				lang = a[1]
			}
			if lang = strings.TrimSpace(lang); lang != "" {
				p.langSeen = true
				p.res.Lang = truncateString(lang, 64)
			}
		}
	case "head":
		p.inHead = true
	case "body":
		p.inHead = false
		if p.opt.Embeds {
			p.onEmbedTag(z, name)
		}
	case "title":
		if !p.titleDone && p.foreign == 0 {
			p.inTitle = true
		}
	case "svg", "math":
		if !selfClosing {
			p.foreign++
		}
	case "img":
		if p.opt.Embeds {
			p.onEmbedTag(z, name)
		} else if p.anchorIdx >= 0 && p.anchorOwns {
			a, has := attrs(z, "alt")
			p.imageAlt(a[0], has)
		}
	case "noscript", "noframes":
		// A crawler runs no scripts, so fallback content is where script-built navigation
		// often keeps its plain links: tokenize it instead of treating it as raw text.
		z.NextIsNotRawText()
	case "style":
		if p.opt.Embeds {
			p.inStyle = true
			p.styleBuf = p.styleBuf[:0]
		}
	default:
		if p.opt.Embeds {
			p.onEmbedTag(z, name)
		}
	}
	// HTML ignores the self-closing flag on non-void elements (and the tokenizer still
	// enters raw text mode for <script/>), so it does not end a hidden element here.
	switch {
	case class&script != 0:
		p.scriptDepth++
	case class&fallbackContent != 0:
		p.fallDepth++
	}
}

func (p *parser) onEnd(name string) {
	class := tagClasses[name]
	if class&block != 0 {
		p.text.sep()
		p.anchor.sep()
	}
	switch name {
	case "a":
		p.closeAnchor()
	case "style":
		p.endStyle()
	case "title":
		if p.inTitle {
			p.inTitle = false
			p.titleDone = true
		}
	case "head":
		p.inHead = false
	case "svg", "math":
		if p.foreign > 0 {
			p.foreign--
		}
	}
	switch {
	case class&script != 0 && p.scriptDepth > 0:
		p.scriptDepth--
	case class&fallbackContent != 0 && p.fallDepth > 0:
		p.fallDepth--
	}
}

// imageAlt makes an image's alt text the anchor text of the link it is in.
func (p *parser) imageAlt(alt string, has bool) {
	if p.anchorIdx >= 0 && p.anchorOwns && has {
		p.anchor.sep()
		p.anchor.writeString(alt)
		p.anchor.sep()
	}
}

// styleAttr is the name of the style attribute when requisites are wanted, else "" (which
// no attribute has), so that a link's style costs nothing when they are not.
func (p *parser) styleAttr() string {
	if p.opt.Embeds {
		return "style"
	}
	return ""
}

// endStyle reads a <style> element's text for the resources it loads.
func (p *parser) endStyle() {
	if p.inStyle {
		p.inStyle = false
		p.embedCSS(p.styleBuf, "style")
	}
}

func (p *parser) closeAnchor() {
	if p.anchorIdx >= 0 && p.anchorOwns && p.links[p.anchorIdx].text == "" {
		p.links[p.anchorIdx].text = p.anchor.String()
	}
	p.anchorIdx = -1
	p.anchorOwns = false
}

// Link relations that name another page worth following; stylesheets, icons, preloads
// and the like are resources, not pages (requisiteRels, and prefetch, which names what a
// later page may need).
var pageRels = []string{"alternate", "next", "prev", "previous"}
var resourceRels = []string{"prefetch"}

func (p *parser) onLinkElement(a [4]string) {
	href, rel := a[0], a[1]
	if relHas(rel, "canonical") {
		if p.canonical == "" {
			p.canonical = strings.TrimSpace(href)
		}
		return
	}
	if p.onLinkRequisite(href, rel, a[2]) {
		return
	}
	for _, r := range resourceRels {
		if relHas(rel, r) {
			return
		}
	}
	for _, r := range pageRels {
		if relHas(rel, r) {
			p.addLink(href, "link", rel)
			return
		}
	}
}

func (p *parser) onMeta(a [4]string) {
	name, content, equiv := strings.ToLower(strings.TrimSpace(a[0])), a[1], strings.ToLower(strings.TrimSpace(a[2]))
	switch {
	case name == "robots" || (name != "" && name == p.robotsAgent):
		p.robots.apply(content)
	case name == "description":
		if !p.descSeen {
			p.descSeen = true
			p.desc.writeString(content)
		}
	case equiv == "refresh":
		if target := refreshURL(content); target != "" {
			p.addLink(target, "meta", "refresh")
		}
	}
}

// addLink records a link candidate. It returns the index of the (possibly merged) link, or
// -1 when it was dropped, and whether this occurrence created it.
func (p *parser) addLink(href, tag, rel string) (int, bool) {
	href = strings.TrimSpace(href)
	switch {
	case href == "":
		// No target at all (<iframe srcdoc>, <link rel=next href="">): not a link.
		return -1, false
	case href[0] == '#':
		p.res.Dropped.Fragment++
		return -1, false
	case len(href) > urlnorm.MaxLength:
		p.res.Dropped.Invalid++
		return -1, false
	case hasOtherScheme(href):
		// Checked before the link limit so that a page full of mailto: links does not
		// crowd out its real links.
		p.res.Dropped.Scheme++
		return -1, false
	}
	noFollow := relHas(rel, "nofollow")
	if i, ok := p.byRef[href]; ok {
		// Followed if any occurrence is followable: nofollow is a property of one link.
		p.links[i].noFollow = p.links[i].noFollow && noFollow
		return i, false
	}
	if len(p.links) >= p.opt.MaxLinks {
		p.res.LinksCapped = true
		p.res.Dropped.Limit++
		return -1, false
	}
	if rel != "" {
		rel = truncateString(strings.ToLower(rel), 64)
	}
	p.links = append(p.links, rawLink{href: href, tag: tag, rel: rel, noFollow: noFollow})
	p.byRef[href] = len(p.links) - 1
	return len(p.links) - 1, true
}

// hasOtherScheme reports whether ref starts with a scheme other than http or https. Tabs
// and newlines are ignored as URL parsers do ("java\nscript:").
func hasOtherScheme(ref string) bool {
	var scheme []byte
	for i := 0; i < len(ref) && len(scheme) < 32; i++ {
		c := ref[i]
		switch {
		case c == '\t' || c == '\n' || c == '\r':
			continue
		case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			scheme = append(scheme, c|0x20)
		case (c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.') && len(scheme) > 0:
			scheme = append(scheme, c)
		case c == ':' && len(scheme) > 0:
			s := string(scheme)
			return s != "http" && s != "https"
		default:
			return false
		}
	}
	return false
}

// resolve turns the raw links into normalised absolute URLs against the document's base,
// merging those that turn out to be the same URL.
func (p *parser) resolve(page *url.URL, linkHeader []string) {
	base := page
	if p.baseSeen {
		// A base that is not a usable http(s) URL is ignored rather than making every
		// relative link unresolvable.
		if b, err := urlnorm.Resolve(page, p.baseHref); err == nil {
			if bu, err := url.Parse(b); err == nil {
				base = bu
			}
		}
	}
	p.res.BaseURL = base.String()

	if p.canonical != "" {
		if c, err := urlnorm.Resolve(base, p.canonical); err == nil {
			p.res.Canonical = c
		}
	}
	if p.res.Canonical == "" {
		if h := linkHeaderCanonical(linkHeader); h != "" {
			// A Link header is relative to the response's URL, not the document's base.
			if c, err := urlnorm.Resolve(page, h); err == nil {
				p.res.Canonical = c
			}
		}
	}

	seen := p.seen
	out := make([]crawlmsg.Link, 0, len(p.links))
	for _, l := range p.links {
		u, err := urlnorm.Resolve(base, l.href)
		if err != nil {
			if errors.Is(err, urlnorm.ErrScheme) {
				p.res.Dropped.Scheme++
			} else {
				p.res.Dropped.Invalid++
			}
			continue
		}
		if i, ok := seen[u]; ok {
			out[i].NoFollow = out[i].NoFollow && l.noFollow
			if out[i].Text == "" {
				out[i].Text = l.text
			}
			continue
		}
		seen[u] = len(out)
		out = append(out, crawlmsg.Link{URL: u, Text: l.text, Rel: l.rel, Tag: l.tag, NoFollow: l.noFollow})
	}
	if p.robots.noFollow {
		for i := range out {
			out[i].NoFollow = true
		}
	}
	p.res.Links = out
	// Requisites are resolved as links are: <base href> applies to them too.
	p.res.Embeds = p.embeds.resolve(&p.res.EmbedsDropped, base)
}

func isBlank(b []byte) bool {
	for _, c := range b {
		if !asciiSpace(c) {
			return false
		}
	}
	return true
}

func truncateString(s string, n int) string {
	c := newCollapser(n)
	c.writeString(s)
	return c.String()
}
