package synthweb

import (
	"bytes"
	"compress/gzip"
	"io"
	"strings"
	"testing"
)

// The sitemaps host is added only when asked for, its robots.txt names the index, the
// index names both sitemaps, the second is a gzip file, and what SitemapOnly says must be
// fetched is listed by them while no page links to it.
func TestSitemapsHost(t *testing.T) {
	cfg := Config{Hosts: 2, PagesPerHost: 4, BaseIP: "127.0.6.1"}
	plain := startWeb(t, cfg)
	if f, n := plain.SitemapOnly(); f != nil || n != nil || len(plain.Hosts()) != 2 {
		t.Fatalf("a web without Sitemaps has %d hosts and sitemap URLs %v %v", len(plain.Hosts()), f, n)
	}

	cfg.BaseIP, cfg.Sitemaps = "127.0.6.11", true
	w := startWeb(t, cfg)
	h := hostOfKind(t, w, KindSitemaps)
	if len(w.Hosts()) != 3 || w.Seeds()[2] != h.Origin+"/" {
		t.Fatalf("hosts %+v: want the sitemaps host third and a seed", w.Hosts())
	}
	robots := get(t, h.Origin+"/robots.txt").body
	if !strings.Contains(robots, "\nSitemap: "+h.Origin+sitemapIndex+"\n") || !strings.Contains(robots, "Disallow: "+sitemapHidden) {
		t.Fatalf("robots.txt:\n%s", robots)
	}
	index := get(t, h.Origin+sitemapIndex)
	if index.status != 200 || !strings.Contains(index.body, "<loc>"+h.Origin+sitemapPlain+"</loc>") || !strings.Contains(index.body, "<loc>"+h.Origin+sitemapGzip+"</loc>") {
		t.Fatalf("index: %d\n%s", index.status, index.body)
	}
	gz := get(t, h.Origin+sitemapGzip)
	if gz.header.Get("Content-Type") != gzipType || gz.header.Get("Content-Encoding") != "" {
		t.Fatalf("gzipped sitemap served as %q, encoding %q", gz.header.Get("Content-Type"), gz.header.Get("Content-Encoding"))
	}
	zr, err := gzip.NewReader(bytes.NewReader([]byte(gz.body)))
	if err != nil {
		t.Fatal(err)
	}
	unzipped, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	listed := get(t, h.Origin+sitemapPlain).body + string(unzipped)
	fetch, never := w.SitemapOnly()
	for _, u := range fetch[3:] {
		if !strings.Contains(listed, "<loc>"+u+"</loc>") {
			t.Errorf("%s is not listed by the sitemaps", u)
		}
		if r := get(t, u); r.status != 200 {
			t.Errorf("%s: status %d", u, r.status)
		}
	}
	for _, u := range never {
		if !strings.Contains(listed, "<loc>"+u+"</loc>") {
			t.Errorf("%s (never to be fetched) is not listed by the sitemaps", u)
		}
	}
	exp := w.Expected(20)
	for _, u := range append(fetch, never...) {
		if exp.Fetch[u] {
			t.Errorf("%s is reachable by links: it would not show that sitemaps are read", u)
		}
	}
}
