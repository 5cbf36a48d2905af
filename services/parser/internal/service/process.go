package service

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/trawl/trawl/services/parser/internal/contentdup"
	"github.com/trawl/trawl/services/parser/internal/extract"
	"github.com/trawl/trawl/services/parser/internal/render"
	"github.com/trawl/trawl/services/parser/internal/scope"
	"github.com/trawl/trawl/services/parser/internal/simhash"
	"github.com/trawl/trawl/shared/contentcoding"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/policy"
	"github.com/trawl/trawl/shared/recrawl"
	"github.com/trawl/trawl/shared/renderconf"
	"github.com/trawl/trawl/shared/urlnorm"
)

// processor turns one raw page into its document and discovered batch. It holds no
// connection, so it is tested without NATS or Redis.
type processor struct {
	extract extract.Options
	filter  *scope.Filter
	maxDoc  int // largest encoded document
	// linkBudget is the most estimated octets of link groups (scope.GroupSize) packed into
	// one crawl.discovered message.
	linkBudget int
	minWords   int // fewest tokens for a near-duplicate lookup
	// maxRedirects is TRAWL_MAX_REDIRECTS: a page reached through more hops does not have
	// its redirect target followed.
	maxRedirects int
	sitemaps     sitemapRules
	embeds       *embedSwitch // page requisites (TRAWL_EMBEDS); nil is off
	log          *slog.Logger
	recrawl      *recrawlPolicy // nil unless TRAWL_RECRAWL=adaptive
	render       *render.Decider
	// rules are the live site policies (the parser's policy.Watcher's Current); nil:
	// none (TRAWL_PARSER_POLICY=false, or a processor under test).
	rules func() *policy.Set
}

// policyFields are the live site policies' fields the parser reads: the scope its links
// are held to and whether a page is rendered. Its Watcher holds only the rules that set
// one of them (policy.OnlyFields).
var policyFields = policy.OnlyFields(append(policy.ScopeFields(), policy.FRender)...)

// currentRules is the rules in force now, nil when there are none.
func (p *processor) currentRules() *policy.Set {
	if p.rules == nil {
		return nil
	}
	return p.rules()
}

// outcome is what one page produced, plus the counts metrics need once it is settled.
type outcome struct {
	skipped bool
	// encoded says the page was skipped because its body is still content-coded
	// (leftEncoded): counted as resultEncoded rather than as an ordinary skip.
	encoded  bool
	document *crawlmsg.Document // nil when skipped; encoded into doc once duplicates are known
	fp       simhash.Fingerprint
	doc      []byte              // encoded Document; nil when skipped
	follow   *crawlmsg.LinkGroup // the links to follow; nil when there are none
	// redirect is what became of a 3xx's Location: redirectFollowed, redirectHops or the
	// scope.Reason that refused it; "" when the page has none.
	redirect string
	parseErr error
	duration time.Duration
	links    int
	emitted  int
	rejected scope.Rejected
	dropped  extract.Dropped
	limits   []string
	trimmed  bool
	dup      contentdup.Kind // set by the duplicate check
	short    bool            // checked for exact duplicates only: too few words for near ones
	// sitemap is set for a page of kind sitemap, which yields URLs and no document; its
	// URLs may need several link groups (follows; follow is the first).
	sitemap *sitemapOutcome
	follows []*crawlmsg.LinkGroup
	// schedule is the page's next recrawl (TRAWL_RECRAWL=adaptive); nil when off or when
	// the URL is forgotten.
	schedule *crawlmsg.RecrawlEntry
	verdict  recrawl.Verdict
	// prevDigest is the URL's digest at its last fetch (adaptive recrawl; "" none).
	prevDigest string
	// changed are the URLs a recrawled sitemap says changed since it was last read
	// (lastmod after its last fetch), whose schedules are brought forward.
	changed []crawlmsg.Discovered
	at      time.Time // the page's fetch time
	// embed holds the page's requisite figures; nil when requisites were not looked for.
	embed *embedCounts
	// render is the page's render decision (every 2xx HTML page); task is set when the
	// page goes to a renderer, and then it has no document of its own (see decideRender).
	render render.Decision // Reason "": no decision (not a 2xx HTML page)
	task   *crawlmsg.RenderTask
	whyRec *renderconf.Why // the decision kept for trawlctl explain; nil: none kept
}

// process never fails on page content: a page that cannot be parsed still yields a
// document with what was extracted (and parseErr set), so it is never redelivered forever.
// The document is left unencoded: the duplicate check of the whole batch fills in its
// duplicate fields first, then encode.
func (p *processor) process(page *crawlmsg.Page) (*outcome, error) {
	o, err := p.processPage(page)
	if err == nil && page.Meta.Location != "" && o.follow == nil && len(o.follows) == 0 {
		o.follow, o.redirect = p.redirect(&page.Meta)
	}
	return o, err
}

// What became of a 3xx's target (trawl_parser_redirects_total), besides the scope.Reason
// that refused it.
const (
	redirectFollowed = "followed"
	redirectHops     = "hops" // past TRAWL_MAX_REDIRECTS
)

// redirect is the target of a 3xx to crawl, or nil past TRAWL_MAX_REDIRECTS hops or when
// the scope refuses it (scope.Filter.Redirect: held as a link of the redirecting URL), and
// what became of it. It is crawled like any discovered URL (deduplicated, scheduled
// politely) at the same depth: a redirect is not a link hop. It goes out from here rather
// than from the fetcher so that it travels in the page: whatever brings the page back
// after a crash (a redelivery, the scheduler's page log) brings it back too.
func (p *processor) redirect(m *crawlmsg.PageMeta) (*crawlmsg.LinkGroup, string) {
	if m.Hops+1 > p.maxRedirects {
		return nil, redirectHops
	}
	from := scope.Page{URL: m.URL, Depth: m.Depth, Embeds: m.Embeds, Rules: p.currentRules()}
	if r, ok := p.filter.Redirect(from, m.Kind, m.Location); !ok {
		// Counted like a refused link; per URL only at debug, as a page's target is one
		// of a crawl's many refused URLs.
		p.log.Debug("redirect target not followed", "url", m.URL, "location", m.Location, "reason", r)
		return nil, string(r)
	}
	return &crawlmsg.LinkGroup{Source: m.URL, URLs: []crawlmsg.Discovered{{
		URL: m.Location, Depth: m.Depth, Via: crawlmsg.ViaRedirect, Hops: m.Hops + 1,
		// A moved stylesheet is still a requisite; a moved sitemap still a sitemap.
		Kind: m.Kind, Embeds: m.Embeds, Under: m.Under,
	}}}, redirectFollowed
}

// processPage is process before the redirect target.
func (p *processor) processPage(page *crawlmsg.Page) (*outcome, error) {
	m := &page.Meta
	if m.Kind == crawlmsg.KindSitemap {
		return p.processSitemap(page), nil
	}
	if o, ok := p.processRequisite(page); ok {
		return o, nil
	}
	if !m.IsHTML() || m.Status < 200 || m.Status > 299 {
		return &outcome{skipped: true}, nil
	}
	o := &outcome{}
	if p.leftEncoded(m, o) {
		return o, nil
	}
	start := time.Now()
	res, err := p.safeExtract(page)
	o.duration = time.Since(start)
	o.parseErr = err
	if err != nil {
		p.log.Warn("page parsed with errors", "url", m.URL, "err", err)
	}
	o.links = len(res.Links)
	o.dropped = res.Dropped
	if res.StoppedAt != "" {
		o.limits = append(o.limits, res.StoppedAt)
	}
	if res.LinksCapped {
		o.limits = append(o.limits, "links")
	}
	if res.TextCapped {
		o.limits = append(o.limits, "text")
	}

	host := m.Host
	if host == "" {
		host, _ = urlnorm.Host(m.URL)
	}
	sum := sha256.Sum256(page.Body)
	// Fingerprinted before encodeDocument may shorten the text to fit a message, so the
	// fingerprint always covers the whole extracted text.
	o.fp = simhash.Of(res.Text)
	doc := &crawlmsg.Document{
		URL:         m.URL,
		Host:        host,
		Depth:       m.Depth,
		Status:      m.Status,
		FetchedAt:   m.FetchedAt,
		ContentType: m.ContentType,
		Title:       res.Title,
		Description: res.Description,
		Lang:        res.Lang,
		Text:        res.Text,
		Canonical:   res.Canonical,
		Links:       res.Links,
		NoIndex:     res.NoIndex,
		NoFollow:    res.NoFollow,
		Digest:      hex.EncodeToString(sum[:]),
		// The document is partial when the fetcher cut the body or the parser stopped
		// before its end; the text and link caps are reported by metrics only.
		Truncated:  m.Truncated || res.StoppedAt != "",
		TextDigest: o.fp.Digest,
	}
	if o.fp.Tokens > 0 {
		doc.SimHash = simhash.Format(o.fp.SimHash)
	}
	o.document = doc

	p.decideRender(page, res.Text, o)

	found, rej := p.filter.Select(scope.Page{URL: m.URL, Depth: m.Depth, NoFollow: res.NoFollow, Rules: p.currentRules()}, res.Links)
	o.rejected = rej
	o.emitted = len(found)
	found = p.addEmbeds(m, res, o, found)
	if len(found) > 0 {
		o.follow = &crawlmsg.LinkGroup{Source: m.URL, URLs: found}
	}
	return o, nil
}

// resultEncoded is the result under which the page counters (pages, requisite pages,
// sitemaps) count a page not parsed because its body is still content-coded.
const resultEncoded = "encoded"

// leftEncoded marks o skipped, and reports true, when m's body is still content-coded.
// The fetcher decodes every coding contentcoding can and then drops Content-Encoding; a
// coding it cannot decode (br, one unknown, more than contentcoding.MaxCodings stacked)
// leaves the octets as received and the header naming it. Those octets are no markup:
// parsed, they would give junk links, a junk document, and a junk text in the duplicate
// index. Such a page is acked like any skipped one (a refetch gets the same octets).
func (p *processor) leftEncoded(m *crawlmsg.PageMeta, o *outcome) bool {
	coding := contentcoding.Header(m.Header)
	codings, err := contentcoding.Codings(coding)
	if err == nil && len(codings) == 0 {
		return false
	}
	o.skipped, o.encoded = true, true
	p.log.Debug("page body still content-coded; not parsed", "url", m.URL, "kind", m.Kind, "content_encoding", cutUTF8(coding, 100))
	return true
}

// dupPage is the page as the duplicate index sees it; ok is false when there are no words
// to compare (a blank page would be the "duplicate" of every other blank page).
func (p *processor) dupPage(o *outcome) (contentdup.Page, bool) {
	if o.skipped || o.document == nil || o.fp.Tokens == 0 {
		return contentdup.Page{}, false
	}
	return contentdup.Page{
		URL:     o.document.URL,
		Digest:  o.fp.Digest,
		SimHash: o.fp.SimHash,
		Near:    o.fp.Tokens >= p.minWords,
		// A noindex page is checked but never stands for others: an indexer drops it, and
		// would then have neither it nor its duplicates.
		Store:    !o.document.NoIndex,
		Replaces: o.prevDigest,
	}, true
}

// apply records a verdict of the duplicate index on the outcome and its document.
func (o *outcome) apply(v contentdup.Verdict, near bool) {
	o.dup = v.Kind
	o.short = !near
	switch v.Kind {
	case contentdup.Exact:
		o.document.DuplicateOf = v.Of
	case contentdup.Near:
		o.document.NearDuplicateOf = v.Of
		o.document.Distance = v.Distance
	}
}

// encode marshals the document, trimmed to the largest message.
func (p *processor) encode(o *outcome) error {
	if o.document == nil {
		return nil
	}
	var err error
	o.doc, o.trimmed, err = encodeDocument(o.document, p.maxDoc)
	return err
}

// safeExtract keeps a tokenizer bug triggered by one hostile page from taking the whole
// service down: the page gets an empty extraction and a parse error instead.
func (p *processor) safeExtract(page *crawlmsg.Page) (res *extract.Result, err error) {
	defer func() {
		if r := recover(); r != nil {
			res, err = &extract.Result{}, fmt.Errorf("parser: extract panicked: %v", r)
		}
	}()
	return extract.Extract(extract.Input{
		URL:         page.Meta.URL,
		Body:        page.Body,
		ContentType: contentType(&page.Meta),
		Header:      page.Meta.Header,
	}, p.extractOptionsNow())
}

// contentType rebuilds the Content-Type the charset detection reads: the fetcher stores
// the media type and charset apart.
func contentType(m *crawlmsg.PageMeta) string {
	if m.Charset != "" {
		return m.ContentType + "; charset=" + m.Charset
	}
	for k, v := range m.Header {
		if len(v) > 0 && strings.EqualFold(k, "Content-Type") {
			return v[0]
		}
	}
	return m.ContentType
}

// encodeDocument marshals doc, shedding links and then text until it fits in max bytes:
// a document over the stream's message size would fail to publish on every redelivery.
func encodeDocument(doc *crawlmsg.Document, max int) ([]byte, bool, error) {
	trimmed := false
	for {
		b, err := crawlmsg.Marshal(doc)
		if err != nil {
			return nil, false, fmt.Errorf("parser: encode document: %w", err)
		}
		if max <= 0 || len(b) <= max {
			return b, trimmed, nil
		}
		trimmed = true
		switch {
		case len(doc.Links) > 0:
			doc.Links = doc.Links[:len(doc.Links)/2]
		case len(doc.Text) > 0:
			doc.Text = cutUTF8(doc.Text, len(doc.Text)/2)
		default:
			// Only the fixed fields are left; they are bounded by the extraction limits,
			// so this means max is set absurdly low.
			return nil, false, fmt.Errorf("parser: document of %d bytes cannot fit %d", len(b), max)
		}
	}
}

// cutUTF8 shortens s to at most n bytes without splitting a rune.
func cutUTF8(s string, n int) string {
	if n >= len(s) {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}
