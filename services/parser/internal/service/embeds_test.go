package service

import (
	"os"
	"reflect"
	"testing"

	"github.com/trawl/trawl/services/parser/internal/config"
	"github.com/trawl/trawl/services/parser/internal/scope"
	"github.com/trawl/trawl/shared/crawlmsg"
)

func TestProcessRequisites(t *testing.T) {
	html, err := os.ReadFile("testdata/requisites.html")
	if err != nil {
		t.Fatal(err)
	}
	css, err := os.ReadFile("testdata/requisite.css")
	if err != nil {
		t.Fatal(err)
	}
	link := func(u string, depth int) crawlmsg.Discovered {
		return crawlmsg.Discovered{URL: "http://example.com" + u, Depth: depth, Via: crawlmsg.ViaLink}
	}
	emb := func(u string, depth, hops int) crawlmsg.Discovered {
		if u[0] == '/' {
			u = "http://example.com" + u
		}
		return crawlmsg.Discovered{URL: u, Depth: depth, Via: crawlmsg.ViaLink, Kind: crawlmsg.KindEmbed, Embeds: hops}
	}
	tests := []struct {
		name     string
		mode     string
		maxDepth int
		meta     crawlmsg.PageMeta
		body     []byte
		want     []crawlmsg.Discovered
		document bool
		skipped  bool
	}{
		{
			name: "a page's requisites keep its depth, after its links",
			mode: config.EmbedsOn, maxDepth: 5,
			meta: crawlmsg.PageMeta{URL: "http://example.com/", Depth: 1, ContentType: "text/html"},
			body: html,
			// The photo and the frame are links too, and go where links go: as links.
			want: []crawlmsg.Discovered{link("/next.html", 2), link("/photo.jpg", 2), link("/frame.html", 2),
				emb("/style.css", 1, 1), emb("https://cdn.example.net/lib.js", 1, 1), emb("/logo.png", 1, 1)},
			document: true,
		},
		{
			name: "at the depth limit what links reach is fetched as a requisite",
			mode: config.EmbedsOn, maxDepth: 1,
			meta: crawlmsg.PageMeta{URL: "http://example.com/", Depth: 1, ContentType: "text/html"},
			body: html,
			want: []crawlmsg.Discovered{emb("/style.css", 1, 1), emb("https://cdn.example.net/lib.js", 1, 1),
				emb("/photo.jpg", 1, 1), emb("/logo.png", 1, 1), emb("/frame.html", 1, 1)},
			document: true,
		},
		{
			name: "off: links only, as ever",
			mode: config.EmbedsOff, maxDepth: 5,
			meta:     crawlmsg.PageMeta{URL: "http://example.com/", Depth: 1, ContentType: "text/html"},
			body:     html,
			want:     []crawlmsg.Discovered{link("/next.html", 2), link("/photo.jpg", 2), link("/frame.html", 2)},
			document: true,
		},
		{
			name: "a frame fetched as a requisite gives its requisites, no links and no document",
			mode: config.EmbedsOn, maxDepth: 5,
			meta: crawlmsg.PageMeta{URL: "http://example.com/", Depth: 1, ContentType: "text/html", Kind: crawlmsg.KindEmbed, Embeds: 1},
			body: html,
			want: []crawlmsg.Discovered{emb("/style.css", 1, 2), emb("https://cdn.example.net/lib.js", 1, 2),
				emb("/photo.jpg", 1, 2), emb("/logo.png", 1, 2), emb("/frame.html", 1, 2)},
		},
		{
			name: "a style sheet's imports and images, one embed hop further",
			mode: config.EmbedsOn, maxDepth: 5,
			meta: crawlmsg.PageMeta{URL: "http://example.com/css/site.css", Depth: 3, ContentType: "text/css", Kind: crawlmsg.KindEmbed, Embeds: 1},
			body: css,
			want: []crawlmsg.Discovered{emb("/css/more.css", 3, 2), emb("/css/img/bg.png", 3, 2)},
		},
		{
			name: "a style sheet at the end of the chain loads nothing more",
			mode: config.EmbedsOn, maxDepth: 5,
			meta: crawlmsg.PageMeta{URL: "http://example.com/css/more.css", ContentType: "text/css", Kind: crawlmsg.KindEmbed, Embeds: 2},
			body: css,
		},
		{
			name: "a style sheet reached by a link is read too",
			mode: config.EmbedsOn, maxDepth: 5,
			meta: crawlmsg.PageMeta{URL: "http://example.com/css/site.css", Depth: 2, ContentType: "text/css"},
			body: css,
			want: []crawlmsg.Discovered{emb("/css/more.css", 2, 1), emb("/css/img/bg.png", 2, 1)},
		},
		{
			name: "off: a style sheet is not read",
			mode: config.EmbedsOff, maxDepth: 5,
			meta:    crawlmsg.PageMeta{URL: "http://example.com/css/site.css", ContentType: "text/css", Kind: crawlmsg.KindEmbed, Embeds: 1},
			body:    css,
			skipped: true,
		},
		{
			name: "an image is never parsed, whatever it holds",
			mode: config.EmbedsOn, maxDepth: 5,
			meta:    crawlmsg.PageMeta{URL: "http://example.com/logo.png", ContentType: "image/png", Kind: crawlmsg.KindEmbed, Embeds: 1},
			body:    html,
			skipped: true,
		},
		{
			name: "a requisite that failed gives nothing",
			mode: config.EmbedsOn, maxDepth: 5,
			meta:    crawlmsg.PageMeta{URL: "http://example.com/gone.css", ContentType: "text/css", Kind: crawlmsg.KindEmbed, Embeds: 1},
			body:    css,
			skipped: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newProcessor(t, scope.Config{MaxDepth: tt.maxDepth, MaxEmbedHops: 2})
			p.embeds = &embedSwitch{mode: tt.mode}
			p.embeds.on.Store(tt.mode == config.EmbedsOn)
			meta := tt.meta
			meta.V, meta.Status = 1, 200
			if meta.URL == "http://example.com/gone.css" {
				meta.Status = 404
			}
			o, err := processEncoded(p, &crawlmsg.Page{Meta: meta, Body: tt.body})
			if err != nil {
				t.Fatal(err)
			}
			var got []crawlmsg.Discovered
			if o.follow != nil {
				got = o.follow.URLs
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("discovered:\n got %+v\nwant %+v", got, tt.want)
			}
			if (o.doc != nil) != tt.document {
				t.Errorf("document published: %v, want %v", o.doc != nil, tt.document)
			}
			if o.skipped != tt.skipped {
				t.Errorf("skipped %v, want %v", o.skipped, tt.skipped)
			}
		})
	}
}
