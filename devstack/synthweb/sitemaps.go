package synthweb

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// The sitemaps host (Config.Sitemaps): its robots.txt names a sitemap index of two
// sitemaps, the second gzipped, and disallows /hidden/. The sitemaps list pages no page
// links to (/s/0 … /s/<sitemapPages-1>), pages robots.txt disallows, and a page of another
// host, which a sitemap may not list (sitemaps.org's location rule). The home page links
// to nothing; each listed page links home.
const (
	sitemapPages  = 10
	sitemapIndex  = "/maps/index.xml"
	sitemapPlain  = "/maps/pages-a.xml"
	sitemapGzip   = "/maps/pages-b.xml.gz"
	sitemapHidden = "/hidden/"
	gzipType      = "application/gzip"
	xmlType       = "application/xml"
	sitemapNS     = "http://www.sitemaps.org/schemas/sitemap/0.9"
)

func (m *model) sitemapsRobots(h int) robotsFile {
	return robotsFile{
		status: http.StatusOK,
		groups: []robotsGroup{{
			comment: "Pages listed in the sitemaps but not to be crawled.",
			agents:  []string{"*"},
			rules:   []robotsRule{{pattern: sitemapHidden}},
		}},
		sitemaps: []string{m.url(h, sitemapIndex)},
	}
}

func renderSitemapLines(urls []string) string {
	var b strings.Builder
	for _, u := range urls {
		b.WriteString("\nSitemap: " + u + "\n")
	}
	return b.String()
}

// sitemapEntries are the <url> entries of one of the two sitemaps: half of the pages
// each, one disallowed page each, and in the plain one a URL of another host.
func (m *model) sitemapEntries(h int, part int) []string {
	var locs []string
	for n := part; n < sitemapPages; n += 2 {
		locs = append(locs, m.url(h, "/s/"+strconv.Itoa(n)))
	}
	locs = append(locs, m.url(h, sitemapHidden+strconv.Itoa(part)))
	if part == 0 {
		locs = append(locs, m.offSitemapURL())
	}
	return locs
}

// offSitemapURL is the URL of another host that the plain sitemap lists: the location
// rule forbids it, and no page links to it.
func (m *model) offSitemapURL() string { return m.url(0, "/listed-by-another-hosts-sitemap") }

func urlsetXML(locs []string) string {
	var b strings.Builder
	b.WriteString(`<?xml version="1.0" encoding="UTF-8"?>` + "\n<urlset xmlns=\"" + sitemapNS + "\">\n")
	for i, l := range locs {
		fmt.Fprintf(&b, "  <url><loc>%s</loc><lastmod>2026-11-%02dT10:00:00Z</lastmod><priority>0.%d</priority></url>\n", l, 1+i, 1+i%9)
	}
	b.WriteString("</urlset>\n")
	return b.String()
}

func (m *model) sitemapsHost(h int, path string) resource {
	switch {
	case path == "/":
		return resource{status: http.StatusOK, contentType: htmlType, title: "A site told by its sitemaps", textSeed: uint64(h)}
	case path == sitemapIndex:
		body := `<?xml version="1.0" encoding="UTF-8"?>` + "\n<sitemapindex xmlns=\"" + sitemapNS + "\">\n" +
			"  <sitemap><loc>" + m.url(h, sitemapPlain) + "</loc></sitemap>\n" +
			"  <sitemap><loc>" + m.url(h, sitemapGzip) + "</loc><lastmod>2026-11-20</lastmod></sitemap>\n" +
			"</sitemapindex>\n"
		return resource{status: http.StatusOK, contentType: xmlType, body: body}
	case path == sitemapPlain:
		return resource{status: http.StatusOK, contentType: xmlType, body: urlsetXML(m.sitemapEntries(h, 0))}
	case path == sitemapGzip:
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		zw.Write([]byte(urlsetXML(m.sitemapEntries(h, 1))))
		zw.Close()
		// A gzip file, not a gzip-encoded response: the crawler gets the compressed octets.
		return resource{status: http.StatusOK, contentType: gzipType, body: b.String()}
	}
	for _, dir := range []string{"/s/", sitemapHidden} {
		if rest, ok := strings.CutPrefix(path, dir); ok {
			if n, ok := parseNum(rest); ok && n < sitemapPages {
				g := newGen(m, h, path, m.pageRand(h, uint64(n)))
				g.add(h, "/", "home")
				return resource{status: http.StatusOK, contentType: htmlType, title: "Listed page " + rest, links: g.links, textSeed: uint64(h)<<20 | uint64(n)}
			}
		}
	}
	return notFound()
}

// SitemapOnly lists, for a web with Config.Sitemaps, the URLs a crawl that reads sitemaps
// must fetch although no page links to them (the sitemaps themselves and the pages they
// list), and those it must never request (listed but disallowed by robots.txt, or listed
// by a sitemap of another host). Both are nil without the sitemaps host.
func (w *Web) SitemapOnly() (fetch, never []string) {
	m := w.m
	h, ok := m.special[KindSitemaps]
	if !ok {
		return nil, nil
	}
	fetch = []string{m.url(h, sitemapIndex), m.url(h, sitemapPlain), m.url(h, sitemapGzip)}
	for n := range sitemapPages {
		fetch = append(fetch, m.url(h, "/s/"+strconv.Itoa(n)))
	}
	never = []string{m.url(h, sitemapHidden+"0"), m.url(h, sitemapHidden+"1"), m.offSitemapURL()}
	return fetch, never
}
