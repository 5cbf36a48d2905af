package service

import (
	"bytes"
	"compress/gzip"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/trawl/trawl/services/parser/internal/config"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/envconfig"
)

func sitemapProcessor(t *testing.T, env map[string]string) *processor {
	t.Helper()
	cfg, err := config.Load(envconfig.FromMap(env))
	if err != nil {
		t.Fatal(err)
	}
	scfg, err := cfg.ScopeConfig(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	p := newProcessor(t, scfg)
	if p.sitemaps, err = sitemapRulesOf(cfg, scfg); err != nil {
		t.Fatal(err)
	}
	p.linkBudget = 1 << 20
	return p
}

func gz(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func readFixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func lastmod(day string) int64 {
	tm, err := time.Parse(time.RFC3339, day)
	if err != nil {
		panic(err)
	}
	return tm.Unix()
}

func TestProcessSitemap(t *testing.T) {
	urlset := readFixture(t, "sitemap_urlset.xml")
	index := readFixture(t, "sitemap_index.xml")
	p9 := 0.9
	page := func(u string, mod int64, prio *float64) crawlmsg.Discovered {
		return crawlmsg.Discovered{URL: u, Depth: 1, Via: crawlmsg.ViaSitemap, Lastmod: mod, Priority: prio}
	}
	child := func(u, under string, mod int64) crawlmsg.Discovered {
		return crawlmsg.Discovered{URL: u, Depth: 0, Via: crawlmsg.ViaSitemap, Kind: crawlmsg.KindSitemap, Under: under, Lastmod: mod}
	}
	for _, tc := range []struct {
		name      string
		env       map[string]string
		url       string
		under     string
		status    int
		ctype     string
		body      []byte
		truncated bool
		want      []crawlmsg.Discovered
		result    string
		errKind   string
		cut       string
		rejected  map[string]int
	}{
		{
			name: "urlset: only URLs under its directory (sitemaps.org location)",
			url:  "https://a.example/shop/sitemap.xml", ctype: "application/xml", body: urlset,
			want: []crawlmsg.Discovered{
				page("https://a.example/shop/one", lastmod("2026-11-01T00:00:00Z"), &p9),
				page("https://a.example/shop/two", 0, nil),
			},
			result: "urlset", rejected: map[string]int{"location": 2, "invalid": 1},
		},
		{
			name: "named by robots.txt: anywhere on that host, from another host too",
			url:  "https://cdn.example/maps/a.xml", under: "https://a.example/", ctype: "text/xml", body: urlset,
			want: []crawlmsg.Discovered{
				page("https://a.example/shop/one", lastmod("2026-11-01T00:00:00Z"), &p9),
				page("https://a.example/shop/two", 0, nil),
				page("https://a.example/elsewhere", 0, nil),
			},
			result: "urlset", rejected: map[string]int{"location": 1, "invalid": 1},
		},
		{
			name: "gzipped, whatever the content type says",
			url:  "https://a.example/shop/sitemap.xml.gz", ctype: "application/octet-stream", body: gz(t, urlset),
			want: []crawlmsg.Discovered{
				page("https://a.example/shop/one", lastmod("2026-11-01T00:00:00Z"), &p9),
				page("https://a.example/shop/two", 0, nil),
			},
			result: "urlset", rejected: map[string]int{"location": 2, "invalid": 1},
		},
		{
			name: "scope rules apply to listed pages",
			env:  map[string]string{"TRAWL_EXCLUDE": "/two$"},
			url:  "https://a.example/shop/sitemap.xml", ctype: "application/xml", body: urlset,
			want:   []crawlmsg.Discovered{page("https://a.example/shop/one", lastmod("2026-11-01T00:00:00Z"), &p9)},
			result: "urlset", rejected: map[string]int{"location": 2, "invalid": 1, "exclude": 1},
		},
		{
			name: "index: children are sitemaps at the index's depth, under its directory",
			url:  "https://a.example/shop/index.xml", under: "https://a.example/", ctype: "application/xml", body: index,
			want: []crawlmsg.Discovered{
				child("https://a.example/shop/part-1.xml.gz", "https://a.example/", lastmod("2026-11-02T10:00:00Z")),
				child("https://a.example/shop/sub/part-2.xml", "https://a.example/", 0),
			},
			result: "sitemapindex", rejected: map[string]int{"location": 1},
		},
		{
			name: "index: a child TRAWL_EXCLUDE names is not fetched",
			env:  map[string]string{"TRAWL_EXCLUDE": "/sub/"},
			url:  "https://a.example/shop/index.xml", ctype: "application/xml", body: index,
			want:   []crawlmsg.Discovered{child("https://a.example/shop/part-1.xml.gz", "", lastmod("2026-11-02T10:00:00Z"))},
			result: "sitemapindex", rejected: map[string]int{"location": 1, "exclude": 1},
		},
		{
			name: "index children are not cut by the depth limit",
			env:  map[string]string{"TRAWL_MAX_DEPTH": "0"},
			url:  "https://a.example/shop/index.xml", ctype: "application/xml", body: index,
			want: []crawlmsg.Discovered{
				child("https://a.example/shop/part-1.xml.gz", "", lastmod("2026-11-02T10:00:00Z")),
				child("https://a.example/shop/sub/part-2.xml", "", 0),
			},
			result: "sitemapindex", rejected: map[string]int{"location": 1},
		},
		{
			name: "text sitemap",
			url:  "https://a.example/shop/urls.txt", ctype: "text/plain", body: []byte("https://a.example/shop/one\nhttps://b.example/\n"),
			want:   []crawlmsg.Discovered{page("https://a.example/shop/one", 0, nil)},
			result: "text", rejected: map[string]int{"location": 1},
		},
		{
			name: "bad XML: counted, the URLs before it kept",
			url:  "https://a.example/shop/sitemap.xml", ctype: "application/xml", body: readFixture(t, "sitemap_bad.xml"),
			want:   []crawlmsg.Discovered{page("https://a.example/shop/one", 0, nil)},
			result: "urlset", errKind: "syntax", rejected: map[string]int{},
		},
		{
			name: "not a sitemap at all",
			url:  "https://a.example/sitemap.xml", ctype: "text/html", body: []byte("<html><body><a href=/x>x</a></body></html>"),
			result: "error", errKind: "root", rejected: map[string]int{},
		},
		{
			name: "a body the fetcher cut is read to the cut, not an error",
			url:  "https://a.example/shop/sitemap.xml", ctype: "application/xml", truncated: true,
			body:   urlset[:bytes.Index(urlset, []byte("<url><loc>https://a.example/elsewhere"))+20],
			want:   []crawlmsg.Discovered{page("https://a.example/shop/one", lastmod("2026-11-01T00:00:00Z"), &p9), page("https://a.example/shop/two", 0, nil)},
			result: "urlset", cut: "body", rejected: map[string]int{},
		},
		{
			name: "a gzip file the fetcher cut is read to the cut too",
			url:  "https://a.example/shop/sitemap.xml.gz", ctype: "application/gzip", truncated: true,
			body:   gz(t, urlset)[:len(gz(t, urlset))-40],
			want:   []crawlmsg.Discovered{page("https://a.example/shop/one", lastmod("2026-11-01T00:00:00Z"), &p9), page("https://a.example/shop/two", 0, nil)},
			result: "urlset", cut: "body", rejected: map[string]int{},
		},
		{
			name: "a 404 sitemap gives nothing",
			url:  "https://a.example/sitemap.xml", status: 404, ctype: "text/html", body: []byte("not found"),
			result: "status", rejected: map[string]int{},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := sitemapProcessor(t, tc.env)
			status := tc.status
			if status == 0 {
				status = 200
			}
			o, err := p.process(&crawlmsg.Page{
				Meta: crawlmsg.PageMeta{V: 1, URL: tc.url, Status: status, ContentType: tc.ctype, Kind: crawlmsg.KindSitemap, Under: tc.under, Truncated: tc.truncated},
				Body: tc.body,
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := p.encode(o); err != nil {
				t.Fatal(err)
			}
			if o.document != nil || o.doc != nil || o.skipped {
				t.Fatalf("a sitemap gave a document (skipped %v)", o.skipped)
			}
			so := o.sitemap
			if so == nil {
				t.Fatal("no sitemap outcome")
			}
			var got []crawlmsg.Discovered
			for _, g := range o.follows {
				if g.Source != tc.url {
					t.Errorf("group source %q, want %q", g.Source, tc.url)
				}
				got = append(got, g.URLs...)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("URLs:\n got %+v\nwant %+v", got, tc.want)
			}
			if so.result != tc.result || so.errKind != tc.errKind || so.cut != tc.cut || !reflect.DeepEqual(so.rejected, tc.rejected) {
				t.Errorf("result %q err %q cut %q rejected %v; want %q %q %q %v", so.result, so.errKind, so.cut, so.rejected, tc.result, tc.errKind, tc.cut, tc.rejected)
			}
		})
	}
}

// 50,000 URLs do not fit one message: they go in groups within the link budget.
func TestSitemapSplitsIntoGroups(t *testing.T) {
	p := sitemapProcessor(t, nil)
	p.linkBudget = 4096
	var b strings.Builder
	b.WriteString(`<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">`)
	for i := range 500 {
		b.WriteString("<url><loc>https://a.example/p/" + strconv.Itoa(i) + "</loc><priority>0.5</priority></url>")
	}
	b.WriteString("</urlset>")
	o, err := p.process(&crawlmsg.Page{Meta: crawlmsg.PageMeta{V: 1, URL: "https://a.example/sitemap.xml", Status: 200, Kind: crawlmsg.KindSitemap}, Body: []byte(b.String())})
	if err != nil {
		t.Fatal(err)
	}
	if len(o.follows) < 2 || o.follow != o.follows[0] {
		t.Fatalf("%d groups; want several, follow the first", len(o.follows))
	}
	n := 0
	for i, g := range o.follows {
		n += len(g.URLs)
		data, err := crawlmsg.Marshal(&crawlmsg.DiscoveredBatch{Source: g.Source, URLs: g.URLs})
		if err != nil {
			t.Fatal(err)
		}
		if len(data) > p.linkBudget {
			t.Errorf("group %d encodes to %d octets, over the budget %d", i, len(data), p.linkBudget)
		}
	}
	if n != 500 {
		t.Fatalf("%d URLs in the groups, want 500", n)
	}
}
