package extract

import (
	"reflect"
	"testing"

	"github.com/trawl/trawl/shared/crawlmsg"
)

func embed(url, tag string) crawlmsg.Link { return crawlmsg.Link{URL: url, Tag: tag} }

func TestExtractEmbeds(t *testing.T) {
	const assets = "http://example.com/assets/"
	tests := []struct {
		name    string
		fixture string
		body    string
		embeds  bool
		want    []crawlmsg.Link
		links   []crawlmsg.Link
		dropped Dropped
	}{
		{
			name:    "every kind of requisite, resolved against <base>",
			fixture: "embeds.html",
			embeds:  true,
			want: []crawlmsg.Link{
				{URL: assets + "site.css", Tag: "link", Rel: "stylesheet"},
				{URL: assets + "contrast.css", Tag: "link", Rel: "alternate stylesheet"},
				{URL: "http://example.com/favicon.ico", Tag: "link", Rel: "shortcut icon"},
				{URL: assets + "touch.png", Tag: "link", Rel: "apple-touch-icon"},
				{URL: assets + "hero.jpg", Tag: "link", Rel: "preload"},
				embed(assets+"hero-1x.jpg", "link"),
				embed(assets+"hero-2x.jpg", "link"),
				{URL: assets + "app.mjs", Tag: "link", Rel: "modulepreload"},
				{URL: "http://example.com/site.webmanifest", Tag: "link", Rel: "manifest"},
				// An inline script's text is not read: what it writes is not markup.
				embed(assets+"app.js", "script"),
				// <style>: @import, url() with spaces and quotes, image-set(); not a comment.
				embed(assets+"print.css", "style"),
				embed(assets+"bg.png", "style"),
				embed(assets+"logo-1x.png", "style"),
				embed(assets+"logo-2x.png", "style"),
				embed(assets+"paper.gif", "body"),
				embed(assets+"heading.png", "style"),
				embed(assets+"thumb.jpg", "img"),
				// Every srcset candidate; a comma inside a URL does not end it.
				embed(assets+"small.jpg", "img"),
				embed(assets+"large,1.jpg", "img"),
				embed(assets+"huge.jpg", "img"),
				embed(assets+"photo.avif", "source"),
				embed(assets+"photo.jpg", "img"),
				embed(assets+"clip.mp4", "video"),
				embed(assets+"clip-poster.jpg", "video"),
				embed(assets+"clip.webm", "source"),
				embed(assets+"clip.vtt", "track"),
				embed(assets+"sound.ogg", "audio"),
				embed(assets+"movie.swf", "object"),
				embed(assets+"widget.svg", "embed"),
				// Only an image input loads its src.
				embed(assets+"go.png", "input"),
				embed(assets+"vector.png", "img"),
				embed(assets+"legacy.png", "img"),
				// A frame is a requisite and stays a link.
				embed("https://video.example.net/embed/42", "iframe"),
				embed(assets+"table.gif", "table"),
				embed(assets+"cell.png", "style"),
				// Fallback images are what a page without scripts shows.
				embed("http://example.com/pixel.gif", "img"),
			},
			links: []crawlmsg.Link{
				{URL: "http://example.com/page/2", Rel: "next", Tag: "link"},
				a("http://example.com/gallery/", "A thumbnail"),
				{URL: "https://video.example.net/embed/42", Tag: "iframe"},
			},
			// data: and javascript: URLs, and a fragment alone.
			dropped: Dropped{Scheme: 2, Fragment: 1},
		},
		{
			name:    "off: no requisite is read, links are as ever",
			fixture: "embeds.html",
			links: []crawlmsg.Link{
				{URL: "http://example.com/page/2", Rel: "next", Tag: "link"},
				a("http://example.com/gallery/", "A thumbnail"),
				{URL: "https://video.example.net/embed/42", Tag: "iframe"},
			},
		},
		{
			name:   "a <style> left open at the end still counts",
			body:   `<style>a { background: url(open.png)`,
			embeds: true,
			want:   []crawlmsg.Link{embed("http://example.com/dir/open.png", "style")},
		},
		{
			name:   "the same resource twice is one requisite",
			body:   `<img src="a.png"><img src="./a.png"><script src="a.png"></script>`,
			embeds: true,
			want:   []crawlmsg.Link{embed("http://example.com/dir/a.png", "img")},
		},
		{
			name:   "an image link's alt text is still its anchor text",
			body:   `<a href="/big.jpg"><img alt="Big picture" src="/small.jpg"></a>`,
			embeds: true,
			want:   []crawlmsg.Link{embed("http://example.com/small.jpg", "img")},
			links:  []crawlmsg.Link{a("http://example.com/big.jpg", "Big picture")},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := []byte(tt.body)
			if tt.fixture != "" {
				body = fixture(t, tt.fixture)
			}
			res, err := Extract(Input{URL: pageURL, Body: body, ContentType: "text/html"}, Options{Embeds: tt.embeds})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(res.Embeds, tt.want) {
				t.Errorf("embeds:\n got %v\nwant %v", res.Embeds, tt.want)
			}
			if tt.links != nil && !reflect.DeepEqual(res.Links, tt.links) {
				t.Errorf("links:\n got %v\nwant %v", res.Links, tt.links)
			}
			if res.EmbedsDropped != tt.dropped {
				t.Errorf("dropped %+v, want %+v", res.EmbedsDropped, tt.dropped)
			}
		})
	}
}

func TestExtractEmbedsCapped(t *testing.T) {
	res, err := Extract(Input{URL: pageURL, Body: []byte(`<img src=1.png><img src=2.png><img src=3.png>`)},
		Options{Embeds: true, Limits: Limits{MaxLinks: 2}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Embeds) != 2 || !res.EmbedsCapped || res.EmbedsDropped.Limit != 1 {
		t.Fatalf("embeds %v, capped %v, dropped %+v: want two kept, one over the cap", res.Embeds, res.EmbedsCapped, res.EmbedsDropped)
	}
}

func TestExtractCSS(t *testing.T) {
	const css = "http://example.com/css/"
	tests := []struct {
		name        string
		fixture     string
		body        string
		contentType string
		want        []crawlmsg.Link
		charset     string
		dropped     Dropped
	}{
		{
			name:    "imports, fonts, images, escapes, image-set",
			fixture: "site.css",
			want: []crawlmsg.Link{
				embed(css+"reset.css", "css"),
				embed(css+"theme.css", "css"),
				// @namespace's URL names a namespace; a comment's url() is no reference.
				embed("http://example.com/fonts/body.woff2", "css"),
				embed("http://example.com/fonts/body.woff", "css"),
				// A url() inside a string (content: "url(…)") is text.
				embed(css+"img/bg.png", "css"),
				embed(css+"img/icon%201.png", "css"),
				embed(css+"img/escaped.png", "css"),
				embed(css+"img/a-1x.png", "css"),
				embed(css+"img/a-2x.png", "css"),
				// url(img/bad url.png) is a bad url, discarded as a browser does.
				embed("https://cdn.example.net/shared/sprite.png", "css"),
			},
			charset: "utf-8",
			dropped: Dropped{Scheme: 1, Fragment: 1},
		},
		{
			name:    "@charset decides the encoding",
			fixture: "latin1.css",
			want:    []crawlmsg.Link{embed(css+"img/caf%C3%A9.png", "css")},
			charset: "windows-1252",
		},
		{
			name:        "the Content-Type charset wins over @charset",
			body:        "@charset \"iso-8859-1\";\n.x { background: url(img/caf\xc3\xa9.png) }",
			contentType: "text/css; charset=utf-8",
			want:        []crawlmsg.Link{embed(css+"img/caf%C3%A9.png", "css")},
			charset:     "utf-8",
		},
		{
			name:    "unclosed constructs end at the end of the sheet",
			body:    `@import "last.css`,
			want:    []crawlmsg.Link{embed(css+"last.css", "css")},
			charset: "utf-8",
		},
		{
			name:    "an unclosed comment hides the rest",
			body:    `a { background: url(a.png) } /* b { background: url(b.png) }`,
			want:    []crawlmsg.Link{embed(css+"a.png", "css")},
			charset: "utf-8",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := []byte(tt.body)
			if tt.fixture != "" {
				body = fixture(t, tt.fixture)
			}
			ct := tt.contentType
			if ct == "" {
				ct = "text/css"
			}
			res, err := ExtractCSS(CSSInput{URL: css + "site.css", Body: body, ContentType: ct}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(res.Embeds, tt.want) {
				t.Errorf("embeds:\n got %v\nwant %v", res.Embeds, tt.want)
			}
			if res.Charset != tt.charset {
				t.Errorf("charset %q, want %q", res.Charset, tt.charset)
			}
			if res.Dropped != tt.dropped {
				t.Errorf("dropped %+v, want %+v", res.Dropped, tt.dropped)
			}
		})
	}
}

func TestSrcsetURLs(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want []string
	}{
		{"a.png", []string{"a.png"}},
		{"a.png 1x, b.png 2x", []string{"a.png", "b.png"}},
		// As HTML parses it: only white space ends a URL, so a comma inside one is its own.
		{" a.png,b.png ,  c.png 3x", []string{"a.png,b.png", "c.png"}},
		{"a.png, b.png,", []string{"a.png", "b.png"}},
		{"a,b.png 100w, c.png 200w", []string{"a,b.png", "c.png"}},
		{"a.png (junk, more) 1x, b.png", []string{"a.png", "b.png"}},
		{"", nil},
		{" , ,", nil},
	} {
		t.Run(tt.in, func(t *testing.T) {
			if got := srcsetURLs(tt.in); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("srcsetURLs(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}
