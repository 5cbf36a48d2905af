package service

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/trawl/trawl/services/parser/internal/config"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/obs"
)

// TestEncodedBodiesAreNotParsed: a body whose Content-Encoding the fetcher could not decode
// reaches the parser as the octets as received, the header still naming the coding. Read
// as markup or as a sitemap it would give junk links, a junk document and a junk text in
// the duplicate index, so whatever the page's kind it yields nothing and is counted as
// encoded; a header naming no coding (identity, none) leaves the page parsed as ever.
func TestEncodedBodiesAreNotParsed(t *testing.T) {
	page, urlset := readFixture(t, "page.html"), readFixture(t, "sitemap_urlset.xml")
	gzN := func(b []byte, n int) []byte {
		for range n {
			b = gz(t, b)
		}
		return b
	}
	tests := []struct {
		name   string
		header map[string][]string
		// page is the body of a page and of a requisite, sitemap that of a sitemap.
		page, sitemap []byte
		encoded       bool
	}{
		{"br", map[string][]string{"Content-Encoding": {"br"}},
			readFixture(t, "page.html.br"), readFixture(t, "sitemap_urlset.xml.br"), true},
		// The sitemap reader would decompress this one by its magic bytes and list its
		// URLs: only the header says the fetcher did not decode it.
		{"gzip left undecoded", map[string][]string{"Content-Encoding": {"gzip"}},
			gz(t, page), gz(t, urlset), true},
		{"six stacked gzip codings", map[string][]string{"Content-Encoding": {"gzip, gzip, gzip, gzip, gzip, gzip"}},
			gzN(page, 6), gzN(urlset, 6), true},
		// A header that did not come through net/http keeps its spelling; its lines are
		// one list.
		{"br on a second line, key in lower case", map[string][]string{"content-encoding": {"identity", "br"}},
			readFixture(t, "page.html.br"), readFixture(t, "sitemap_urlset.xml.br"), true},
		{"identity", map[string][]string{"Content-Encoding": {"identity"}}, page, urlset, false},
		{"no header", nil, page, urlset, false},
	}
	kinds := []struct {
		name   string
		meta   crawlmsg.PageMeta
		metric string // the counter of pages of this kind, by result
		parsed string // its result for a page read
	}{
		{"page", crawlmsg.PageMeta{URL: "http://example.com/dir/index.html", ContentType: "text/html"},
			"trawl_parser_pages_total", "parsed"},
		{"requisite", crawlmsg.PageMeta{URL: "http://example.com/dir/frame.html", ContentType: "text/html", Kind: crawlmsg.KindEmbed, Embeds: 1},
			"trawl_parser_requisite_pages_total", "read"},
		{"sitemap", crawlmsg.PageMeta{URL: "https://a.example/shop/sitemap.xml", ContentType: "application/xml", Kind: crawlmsg.KindSitemap},
			"trawl_parser_sitemaps_total", "urlset"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, k := range kinds {
				t.Run(k.name, func(t *testing.T) {
					p := sitemapProcessor(t, nil)
					p.embeds = &embedSwitch{mode: config.EmbedsOn}
					p.embeds.on.Store(true)
					meta := k.meta
					meta.V, meta.Status, meta.Depth, meta.Header = 1, 200, 1, tt.header
					body := tt.page
					if meta.Kind == crawlmsg.KindSitemap {
						body = tt.sitemap
					}
					o, err := processEncoded(p, &crawlmsg.Page{Meta: meta, Body: body})
					if err != nil {
						t.Fatal(err)
					}
					reg := prometheus.NewRegistry()
					newMetrics(obs.NewMetrics(reg, "parser")).record(o, false)

					want := k.parsed
					if tt.encoded {
						want = resultEncoded
						if o.doc != nil || o.document != nil || o.follow != nil || len(o.follows) > 0 || o.fp.Tokens > 0 || o.render.Reason != "" {
							t.Errorf("an encoded body gave output: document %v, links %+v, fingerprint %+v", o.doc != nil, o.follow, o.fp)
						}
						if !o.skipped {
							t.Errorf("an encoded body is not skipped")
						}
					} else if k.name != "requisite" && o.follow == nil {
						t.Errorf("a body with no coding left gave no links")
					}
					if k.name == "page" && !tt.encoded && o.doc == nil {
						t.Errorf("a page with no coding left gave no document")
					}
					if got := counted(t, reg, k.metric, want); got != 1 {
						t.Errorf("%s{result=%q} = %v, want 1", k.metric, want, got)
					}
				})
			}
		})
	}
}
