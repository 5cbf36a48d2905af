package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/trawl/trawl/services/parser/internal/config"
	"github.com/trawl/trawl/services/parser/internal/scope"
	"github.com/trawl/trawl/services/parser/internal/sitemap"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/obs"
	"github.com/trawl/trawl/shared/urlnorm"
)

// sitemapRules are how the URLs a sitemap lists are taken.
type sitemapRules struct {
	// filter is the crawl's scope without the per-page outlink cap and batch size: a
	// sitemap lists up to 50,000 URLs, which travel in as many link groups as they need.
	filter       *scope.Filter
	maxURLLength int
	limits       sitemap.Options
}

// sitemapOutcome is what one page of kind sitemap gave, for metrics and the log.
type sitemapOutcome struct {
	result   string // the format read (urlset, sitemapindex, text), "error", "status" (not 2xx) or resultEncoded
	errKind  string // sitemap.Kind of a parse error, "" when none
	cut      string // the limit reading stopped at: urls, bytes, body (the fetcher's cap)
	listed   int    // entries read
	pages    int    // page URLs emitted
	sitemaps int    // child sitemaps emitted
	rejected map[string]int
}

// processSitemap reads a page fetched as a sitemap: whatever its content type, it yields
// the URLs it lists and no document. The URLs of a urlset are pages one link hop below
// the sitemap (Via sitemap, with lastmod and priority); the children of an index are
// sitemaps at the index's own depth, so a chain of indexes costs no link depth.
//
// Location (sitemaps.org, "Sitemap file location"): a sitemap lists only URLs under its
// own directory, and an index only sitemaps under its directory, except a sitemap that
// robots.txt named (Meta.Under, carried to its index's children): its URLs may be
// anywhere under the origin of that robots.txt, which may be another host's.
func (p *processor) processSitemap(page *crawlmsg.Page) *outcome {
	m := &page.Meta
	so := &sitemapOutcome{rejected: map[string]int{}}
	o := &outcome{sitemap: so}
	if m.Status < 200 || m.Status > 299 {
		so.result = "status"
		return o
	}
	if p.leftEncoded(m, o) {
		so.result = resultEncoded
		return o
	}
	start := time.Now()
	res, err := p.safeParseSitemap(page.Body)
	o.duration = time.Since(start)
	if err != nil && m.Truncated && (errors.Is(err, sitemap.ErrSyntax) || errors.Is(err, sitemap.ErrGzip)) {
		// The fetcher cut the body at TRAWL_MAX_BODY: the XML (or the gzip stream) ends
		// there, not broken.
		err, res.Cut = nil, "body"
	}
	so.result, so.cut, so.listed = string(res.Format), string(res.Cut), len(res.Entries)
	if err != nil {
		so.errKind = sitemap.Kind(err)
		if res.Format == "" {
			so.result = "error"
		}
		level := slog.LevelWarn
		if errors.Is(err, sitemap.ErrRoot) && m.IsHTML() {
			// An HTML page at /sitemap.xml is a common soft 404, not news; still counted.
			level = slog.LevelDebug
		}
		p.log.Log(context.Background(), level, "sitemap unreadable", "url", m.URL, "kind", so.errKind, "entries_kept", len(res.Entries), "err", err)
	}
	if res.Cut != "" {
		p.log.Info("sitemap cut at a limit", "url", m.URL, "limit", res.Cut, "entries", len(res.Entries))
	}
	if len(res.Entries) == 0 {
		return o
	}

	own := directory(m.URL)
	var found []crawlmsg.Discovered
	if res.Format == sitemap.Index {
		for _, e := range res.Entries {
			u, ok := p.sitemapURL(e.Loc, own, so)
			if !ok {
				continue
			}
			if r, ok := p.sitemaps.filter.Sitemap(scope.Page{URL: m.URL, Depth: m.Depth}, u); !ok {
				so.rejected[string(r)]++
				continue
			}
			found = append(found, crawlmsg.Discovered{URL: u, Depth: m.Depth, Via: crawlmsg.ViaSitemap,
				Kind: crawlmsg.KindSitemap, Under: m.Under, Lastmod: e.Lastmod})
		}
		so.sitemaps = len(found)
	} else {
		prefix, base := own, m.URL
		if m.Under != "" {
			prefix, base = m.Under, m.Under
		}
		byURL := make(map[string]sitemap.Entry, len(res.Entries))
		links := make([]crawlmsg.Link, 0, len(res.Entries))
		for _, e := range res.Entries {
			u, ok := p.sitemapURL(e.Loc, prefix, so)
			if !ok {
				continue
			}
			if _, dup := byURL[u]; !dup {
				byURL[u] = e
				links = append(links, crawlmsg.Link{URL: u})
			}
		}
		// Scope, include/exclude, traps and depth as for a link from the page the sitemap
		// speaks for (the robots.txt host when it was cross-submitted).
		var rej scope.Rejected
		found, rej = p.sitemaps.filter.Select(scope.Page{URL: base, Depth: m.Depth, Rules: p.currentRules()}, links)
		for r, n := range rej {
			so.rejected[string(r)] += n
		}
		for i := range found {
			e := byURL[found[i].URL]
			found[i].Via, found[i].Lastmod, found[i].Priority = crawlmsg.ViaSitemap, e.Lastmod, e.Priority
		}
		so.pages = len(found)
	}
	o.follows = groupsOf(m.URL, found, p.linkBudget)
	if len(o.follows) > 0 {
		o.follow = o.follows[0]
	}
	return o
}

// sitemapURL normalises a listed URL and applies the location rule and the URL length.
func (p *processor) sitemapURL(loc, prefix string, so *sitemapOutcome) (string, bool) {
	u, err := urlnorm.Normalize(loc)
	switch {
	case err != nil:
		so.rejected["invalid"]++
	case !strings.HasPrefix(u, prefix):
		so.rejected["location"]++
	case p.sitemaps.maxURLLength > 0 && len(u) > p.sitemaps.maxURLLength:
		so.rejected[string(scope.ReasonLength)]++
	default:
		return u, true
	}
	return "", false
}

// directory is a normalised URL up to the last slash of its path: the sitemaps.org
// location a sitemap may list URLs under.
func directory(u string) string {
	rest := u
	if i := strings.Index(rest, "://"); i >= 0 {
		rest = rest[i+3:]
	}
	end := len(u) - len(rest)
	path := rest
	if j := strings.IndexAny(rest, "?#"); j >= 0 {
		path = rest[:j]
	}
	if k := strings.LastIndexByte(path, '/'); k >= 0 {
		return u[:end+k+1]
	}
	return u[:end] + rest + "/"
}

// groupsOf splits a sitemap's URLs into link groups of about budget octets each
// (scope.GroupSize's measure, plus what lastmod and priority add): 50,000 URLs do not fit
// one message.
func groupsOf(source string, urls []crawlmsg.Discovered, budget int) []*crawlmsg.LinkGroup {
	// A Discovered's JSON besides its URL: {"url":"","depth":NN,"via":"sitemap",
	// "lastmod":NNNNNNNNNN,"priority":0.NNN}, plus a comma, with room to spare.
	const perURL = 96
	var out []*crawlmsg.LinkGroup
	size := 0
	for _, d := range urls {
		n := len(d.URL) + perURL
		if len(out) == 0 || (budget > 0 && size+n > budget && len(out[len(out)-1].URLs) > 0) {
			out = append(out, &crawlmsg.LinkGroup{Source: source})
			size = scope.GroupSize(crawlmsg.LinkGroup{Source: source})
		}
		g := out[len(out)-1]
		g.URLs = append(g.URLs, d)
		size += n
	}
	return out
}

// safeParseSitemap keeps a bug triggered by one hostile sitemap from taking the service
// down: the sitemap is then counted as unreadable.
func (p *processor) safeParseSitemap(body []byte) (res *sitemap.Result, err error) {
	defer func() {
		if r := recover(); r != nil {
			res, err = &sitemap.Result{}, fmt.Errorf("%w: parser panicked: %v", sitemap.ErrSyntax, r)
		}
	}()
	return sitemap.Parse(body, p.sitemaps.limits)
}

// sitemapRulesOf builds the sitemap rules from the configuration and its scope rules.
func sitemapRulesOf(cfg config.Config, scfg scope.Config) (sitemapRules, error) {
	scfg.MaxOutlinks, scfg.MaxBatchBytes = 0, 0
	f, err := scope.New(scfg)
	if err != nil {
		return sitemapRules{}, err
	}
	return sitemapRules{filter: f, maxURLLength: scfg.MaxURLLength, limits: cfg.SitemapLimits()}, nil
}

// sitemapMetrics count what sitemaps gave.
type sitemapMetrics struct {
	read     *prometheus.CounterVec // result: urlset, sitemapindex, text, error, status, encoded
	urls     *prometheus.CounterVec // kind: page, sitemap
	rejected *prometheus.CounterVec // reason
	errors   *prometheus.CounterVec // kind: sitemap.Kinds
	cut      *prometheus.CounterVec // limit: urls, bytes, body
}

func newSitemapMetrics(om *obs.Metrics) *sitemapMetrics {
	m := &sitemapMetrics{
		read:     om.CounterVec("sitemaps_total", "Pages of kind sitemap read, by what they were: urlset, sitemapindex, text, error (unreadable from the start), status (not 2xx), encoded (not read: its body is still content-coded, a Content-Encoding the fetcher could not decode).", "result"),
		urls:     om.CounterVec("sitemap_urls_total", "URLs published from sitemaps: page (listed by a urlset or text sitemap) or sitemap (a sitemap index's child).", "kind"),
		rejected: om.CounterVec("sitemap_urls_rejected_total", "URLs listed by sitemaps and not published: invalid, location (outside the sitemap's directory or its robots.txt host), or a scope rule.", "reason"),
		errors:   om.CounterVec("sitemap_errors_total", "Sitemaps that could not be read to their end: gzip, syntax (malformed XML), root (not urlset or sitemapindex), namespace, encoding. URLs read before the error are kept.", "kind"),
		cut:      om.CounterVec("sitemap_truncated_total", "Sitemaps read only up to a limit: urls (TRAWL_SITEMAP_MAX_URLS), bytes (TRAWL_SITEMAP_MAX_BYTES uncompressed), body (cut by the fetcher at TRAWL_MAX_BODY).", "limit"),
	}
	for _, r := range []string{string(sitemap.URLSet), string(sitemap.Index), string(sitemap.Text), "error", "status", resultEncoded} {
		m.read.WithLabelValues(r)
	}
	for _, k := range []string{"page", "sitemap"} {
		m.urls.WithLabelValues(k)
	}
	for _, k := range sitemap.Kinds {
		m.errors.WithLabelValues(k)
	}
	for _, l := range []string{"urls", "bytes", "body"} {
		m.cut.WithLabelValues(l)
	}
	return m
}

func (m *sitemapMetrics) record(so *sitemapOutcome) {
	m.read.WithLabelValues(so.result).Inc()
	m.urls.WithLabelValues("page").Add(float64(so.pages))
	m.urls.WithLabelValues("sitemap").Add(float64(so.sitemaps))
	for r, n := range so.rejected {
		m.rejected.WithLabelValues(r).Add(float64(n))
	}
	if so.errKind != "" {
		m.errors.WithLabelValues(so.errKind).Inc()
	}
	if so.cut != "" {
		m.cut.WithLabelValues(so.cut).Inc()
	}
}
