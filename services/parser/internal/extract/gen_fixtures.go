//go:build ignore

// gen_fixtures writes the testdata pages that cannot be typed as UTF-8 text: the same page
// in legacy and UTF-16 encodings, and the benchmark page. Run with go generate.
package main

import (
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/text/encoding"
	"golang.org/x/text/encoding/charmap"
	"golang.org/x/text/encoding/japanese"
	"golang.org/x/text/encoding/simplifiedchinese"
	"golang.org/x/text/encoding/unicode"
)

// page is a small document whose title, anchor text and link path all need the right
// decoding to come out as written. decl is put in the head (a <meta> declaration or "").
func page(decl, title, word string) string {
	return `<!DOCTYPE html>
<html><head>` + decl + `
<title>` + title + `</title>
</head>
<body>
<p>` + word + `</p>
<a href="/` + word + `">` + word + `</a>
</body></html>
`
}

func main() {
	dir := "testdata"
	write := func(name string, enc encoding.Encoding, s string) {
		b := []byte(s)
		if enc != nil {
			var err error
			if b, err = enc.NewEncoder().Bytes(b); err != nil {
				log.Fatalf("%s: %v", name, err)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			log.Fatal(err)
		}
	}
	write("charset_windows1252.html", charmap.Windows1252,
		page(`<meta charset="windows-1252">`, "Café – crème brûlée", "menü"))
	// Declared only by the HTTP header; the test passes the Content-Type.
	write("charset_shiftjis_header.html", japanese.ShiftJIS, page("", "日本語のページ", "日本"))
	write("charset_shiftjis_meta.html", japanese.ShiftJIS,
		page(`<meta http-equiv="Content-Type" content="text/html; charset=Shift_JIS">`, "日本語のページ", "日本"))
	write("charset_gbk.html", simplifiedchinese.GBK,
		page(`<meta http-equiv="Content-Type" content="text/html; charset=gbk">`, "中文网页", "中文"))
	write("charset_utf16le.html", unicode.UTF16(unicode.LittleEndian, unicode.UseBOM),
		page("", "Ünïcödé UTF-16LE", "straße"))
	write("charset_utf16be.html", unicode.UTF16(unicode.BigEndian, unicode.UseBOM),
		page("", "Ünïcödé UTF-16BE", "straße"))
	// UTF-8 without any declaration whose first non-ASCII byte comes after the 1024 bytes
	// the standard's prescan looks at.
	write("charset_utf8_late.html", nil,
		page("<!-- "+strings.Repeat("padding ", 160)+"-->", "Grüße aus Köln", "köln"))

	write("bench_page.html", nil, benchPage())
}

// benchPage is a realistic ~30 KiB article page: a head full of meta, styles and scripts,
// navigation, an article with inline links, a sidebar and a footer.
func benchPage() string {
	var b strings.Builder
	b.WriteString(`<!DOCTYPE html>
<html lang="en"><head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Distributed crawling at scale — Trawl Engineering Blog</title>
<meta name="description" content="How a polite crawler schedules millions of hosts without overloading any of them.">
<link rel="stylesheet" href="/assets/site.css">
<link rel="icon" href="/favicon.ico">
<link rel="canonical" href="https://blog.example.com/2024/05/distributed-crawling">
<link rel="alternate" type="application/rss+xml" href="/feed.xml">
<style>
body{font-family:system-ui,sans-serif;margin:0;padding:0;color:#222}
header,footer{background:#f4f4f4;padding:1rem}
nav a{margin-right:1rem;text-decoration:none}
article{max-width:42rem;margin:2rem auto;line-height:1.6}
.sidebar{float:right;width:16rem}
</style>
<script async src="/assets/analytics.js"></script>
<script>window.dataLayer=window.dataLayer||[];function gtag(){dataLayer.push(arguments)}gtag('js',new Date());gtag('config','UA-000000-1');</script>
</head>
<body>
<header><a href="/" class="logo">Trawl Blog</a>
<nav>
`)
	for i := range 40 {
		fmt.Fprintf(&b, "<a href=\"/category/topic-%d\">Topic %d</a>\n", i, i)
	}
	b.WriteString("</nav></header>\n<main><article>\n<h1>Distributed crawling at scale</h1>\n")
	words := strings.Fields(`crawler frontier politeness scheduler fetcher parser robots queue host
delay lease shard bloom filter redis stream message batch depth scope link anchor
document index canonical redirect throughput latency backoff retry budget`)
	for p := range 60 {
		b.WriteString("<p>")
		for w := range 45 {
			word := words[(p*7+w*3)%len(words)]
			if w%15 == 7 {
				fmt.Fprintf(&b, `<a href="/2024/%02d/%s-%d">%s</a> `, p%12+1, word, p*45+w, word)
				continue
			}
			b.WriteString(word)
			b.WriteByte(' ')
		}
		b.WriteString("</p>\n")
	}
	b.WriteString("</article>\n<aside class=\"sidebar\"><h2>Related</h2><ul>\n")
	for i := range 25 {
		fmt.Fprintf(&b, "<li><a href=\"https://other%d.example.org/post/%d\" rel=\"%s\">Related post number %d</a></li>\n",
			i%5, i, []string{"", "nofollow", "external"}[i%3], i)
	}
	b.WriteString("</ul></aside></main>\n<footer><p>&copy; 2024 Trawl.</p>\n")
	for i := range 20 {
		fmt.Fprintf(&b, "<a href=\"/page/%d\">Footer link %d</a> ", i, i)
	}
	b.WriteString("\n<script>document.querySelectorAll('a').forEach(function(a){a.addEventListener('click',function(){})});</script>\n</footer></body></html>\n")
	return b.String()
}
