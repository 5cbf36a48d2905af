package itest

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/trawl/trawl/devstack/natsembed"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/topology"
)

func sitemapMeta(url, ctype string) crawlmsg.PageMeta {
	return crawlmsg.PageMeta{URL: url, Host: "site.test", Status: 200, ContentType: ctype, FetchedAt: time.Now().UnixMilli(), Kind: crawlmsg.KindSitemap}
}

func gzipped(t *testing.T, s string) string {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	if _, err := zw.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// A page fetched as a sitemap yields the URLs it lists on crawl.discovered and no
// document: a urlset's pages with Via sitemap, lastmod and priority, an index's children
// as sitemaps; a gzipped one is read whatever its content type; bad XML is counted and
// settled with the URLs before the break.
func TestSitemapPages(t *testing.T) {
	t.Parallel()
	s := newStack(t, nil)
	s.run()

	urlset := `<?xml version="1.0" encoding="UTF-8"?>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">
  <url><loc>http://site.test/only-in-sitemap</loc><lastmod>2026-11-20T08:00:00+01:00</lastmod><priority>0.9</priority></url>
  <url><loc>http://site.test/plain</loc></url>
</urlset>`
	index := `<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">
  <sitemap><loc>http://site.test/maps/a.xml.gz</loc><lastmod>2026-11-21</lastmod></sitemap>
</sitemapindex>`

	s.publishPage(sitemapMeta("http://site.test/sitemap.xml", "application/xml"), urlset)
	s.publishPage(sitemapMeta("http://site.test/index.xml.gz", "application/gzip"), gzipped(t, index))
	s.publishPage(sitemapMeta("http://site.test/broken.xml", "text/xml"), `<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"><url><loc>http://site.test/before-the-break</loc></url><url></loc></url>`)
	s.waitSettled()

	if docs := s.docs(); len(docs) != 0 {
		t.Errorf("%d documents published for sitemaps, want none", len(docs))
	}
	bySource := map[string][]crawlmsg.Discovered{}
	ids := map[string]bool{}
	for _, m := range s.takeDiscovered() {
		if ids[m.id] {
			t.Errorf("message id %s used twice: the duplicate window would drop one", m.id)
		}
		ids[m.id] = true
		for _, g := range m.batch.LinkGroups() {
			bySource[g.Source] = append(bySource[g.Source], g.URLs...)
		}
	}

	got := bySource["http://site.test/sitemap.xml"]
	if len(got) != 2 {
		t.Fatalf("urlset gave %+v, want 2 URLs", got)
	}
	want := time.Date(2026, 11, 20, 7, 0, 0, 0, time.UTC).Unix()
	if d := got[0]; d.URL != "http://site.test/only-in-sitemap" || d.Via != crawlmsg.ViaSitemap || d.Kind != crawlmsg.KindPage ||
		d.Depth != 1 || d.Lastmod != want || d.Priority == nil || *d.Priority != 0.9 {
		t.Errorf("listed page = %+v, want via sitemap, depth 1, lastmod %d, priority 0.9", d, want)
	}
	if d := got[1]; d.URL != "http://site.test/plain" || d.Lastmod != 0 || d.Priority != nil {
		t.Errorf("listed page without dates = %+v", d)
	}

	kids := bySource["http://site.test/index.xml.gz"]
	if len(kids) != 1 || kids[0].URL != "http://site.test/maps/a.xml.gz" || kids[0].Kind != crawlmsg.KindSitemap ||
		kids[0].Depth != 0 || kids[0].Via != crawlmsg.ViaSitemap || kids[0].Lastmod != time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC).Unix() {
		t.Errorf("index gave %+v, want one child sitemap at depth 0", kids)
	}

	if b := bySource["http://site.test/broken.xml"]; len(b) != 1 || b[0].URL != "http://site.test/before-the-break" {
		t.Errorf("broken sitemap gave %+v, want the URL before the break", b)
	}
	for series, want := range map[string]float64{
		`trawl_parser_sitemaps_total{result="urlset"}`:               2,
		`trawl_parser_sitemaps_total{result="sitemapindex"}`:         1,
		`trawl_parser_sitemap_urls_total{kind="page"}`:               3,
		`trawl_parser_sitemap_urls_total{kind="sitemap"}`:            1,
		`trawl_parser_sitemap_errors_total{kind="syntax"}`:           1,
		`trawl_parser_messages_terminated_total{reason="permanent"}`: 0,
	} {
		if got := s.metric(series); got != want {
			t.Errorf("%s = %g, want %g", series, got, want)
		}
	}
}

// A sitemap of more URLs than TRAWL_SITEMAP_MAX_URLS is read to the limit, and its URLs,
// too many for one message, all reach crawl.discovered in several messages of ids of
// their own (one id would have the duplicate window drop all but the first).
func TestSitemapOverItsLimit(t *testing.T) {
	t.Parallel()
	const limit = 20000
	// An AckWait the publish of megabytes fits in, even under the race detector and beside
	// other tests: a redelivery would count the sitemap's URLs twice. Settling waits as long:
	// under the race detector on a loaded 2-core machine the sitemap takes about 20s (2s
	// without it), the common wait.
	const settle = 60 * time.Second
	s := newStack(t, map[string]string{"TRAWL_SITEMAP_MAX_URLS": strconv.Itoa(limit), "TRAWL_ACK_WAIT": settle.String()})
	s.run()
	// URLs of some 250 octets: 20,000 of them pass what one message may carry.
	pad := strings.Repeat("x", 220)
	var big strings.Builder
	big.WriteString(`<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">`)
	for i := range limit + 1 {
		fmt.Fprintf(&big, "<url><loc>http://big.test/p/%d/%s</loc></url>\n", i, pad)
	}
	big.WriteString(`</urlset>`)
	s.publishPage(sitemapMeta("http://big.test/sitemap.xml.gz", "application/x-gzip"), gzipped(t, big.String()))
	natsembed.WaitSettled(t, s.js, topology.StreamPages, topology.ConsumerParser, settle)

	msgs := s.takeDiscovered()
	seen := map[string]bool{}
	n := 0
	for _, m := range msgs {
		for _, g := range m.batch.LinkGroups() {
			for _, d := range g.URLs {
				n++
				seen[d.URL] = true
			}
		}
	}
	if len(msgs) < 2 || n != limit || len(seen) != limit || seen[fmt.Sprintf("http://big.test/p/%d/%s", limit, pad)] {
		t.Errorf("a sitemap of %d URLs gave %d URLs (%d distinct) in %d messages, want the first %d in several", limit+1, n, len(seen), len(msgs), limit)
	}
	for series, want := range map[string]float64{
		`trawl_parser_sitemap_urls_total{kind="page"}`:       limit,
		`trawl_parser_sitemap_truncated_total{limit="urls"}`: 1,
	} {
		if got := s.metric(series); got != want {
			t.Errorf("%s = %g, want %g", series, got, want)
		}
	}
}
