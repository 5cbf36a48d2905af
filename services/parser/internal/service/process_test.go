package service

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"os"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/text/encoding/japanese"

	"github.com/trawl/trawl/services/parser/internal/extract"
	"github.com/trawl/trawl/services/parser/internal/scope"
	"github.com/trawl/trawl/shared/crawlmsg"
)

func newProcessor(t *testing.T, cfg scope.Config) *processor {
	t.Helper()
	if cfg.Mode == "" {
		cfg.Mode = scope.Any
	}
	if cfg.MaxDepth == 0 {
		cfg.MaxDepth = 20
	}
	f, err := scope.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &processor{extract: extract.Options{RobotsAgent: "trawl"}, filter: f, maxDoc: 1 << 20, minWords: 20, maxRedirects: 5,
		log: slog.New(slog.DiscardHandler)}
}

// processEncoded is what HandleBatch does for a page when no duplicate check runs.
func processEncoded(p *processor, page *crawlmsg.Page) (*outcome, error) {
	o, err := p.process(page)
	if err != nil {
		return nil, err
	}
	return o, p.encode(o)
}

func testPage(t *testing.T) *crawlmsg.Page {
	t.Helper()
	body, err := os.ReadFile("testdata/page.html")
	if err != nil {
		t.Fatal(err)
	}
	return &crawlmsg.Page{
		Meta: crawlmsg.PageMeta{V: 1, URL: "http://example.com/dir/index.html", Host: "example.com", Depth: 2,
			Status: 200, ContentType: "text/html", FetchedAt: 1700000000000, Truncated: true},
		Body: body,
	}
}

func TestProcessSkips(t *testing.T) {
	tests := []struct {
		name   string
		status int
		ctype  string
	}{
		{"not html", 200, "application/pdf"},
		{"no content type", 200, ""},
		{"redirect", 301, "text/html"},
		{"not found", 404, "text/html"},
		{"server error", 503, "text/html"},
		{"informational", 199, "text/html"},
	}
	p := newProcessor(t, scope.Config{})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			page := testPage(t)
			page.Meta.Status, page.Meta.ContentType = tt.status, tt.ctype
			o, err := processEncoded(p, page)
			if err != nil {
				t.Fatal(err)
			}
			if !o.skipped || o.doc != nil || o.follow != nil {
				t.Errorf("outcome = %+v, want skipped with no output", o)
			}
		})
	}
}

// TestProcessRedirect: a 3xx page yields no document and its Location as the one URL to
// follow, at the page's depth with one hop more, keeping what it was fetched for; past
// TRAWL_MAX_REDIRECTS hops nothing.
func TestProcessRedirect(t *testing.T) {
	const target = "http://example.com/new?b=2"
	tests := []struct {
		name string
		meta func(*crawlmsg.PageMeta)
		want *crawlmsg.Discovered
	}{
		{"page", func(m *crawlmsg.PageMeta) { m.Hops = 1 },
			&crawlmsg.Discovered{URL: target, Depth: 2, Via: crawlmsg.ViaRedirect, Hops: 2}},
		{"sitemap", func(m *crawlmsg.PageMeta) { m.Kind, m.Under = crawlmsg.KindSitemap, "http://example.com/" },
			&crawlmsg.Discovered{URL: target, Depth: 2, Via: crawlmsg.ViaRedirect, Hops: 1, Kind: crawlmsg.KindSitemap, Under: "http://example.com/"}},
		{"requisite", func(m *crawlmsg.PageMeta) { m.Kind, m.Embeds = crawlmsg.KindEmbed, 1 },
			&crawlmsg.Discovered{URL: target, Depth: 2, Via: crawlmsg.ViaRedirect, Hops: 1, Kind: crawlmsg.KindEmbed, Embeds: 1}},
		{"last hop followed", func(m *crawlmsg.PageMeta) { m.Hops = 4 },
			&crawlmsg.Discovered{URL: target, Depth: 2, Via: crawlmsg.ViaRedirect, Hops: 5}},
		{"past the hop cap", func(m *crawlmsg.PageMeta) { m.Hops = 5 }, nil},
	}
	p := newProcessor(t, scope.Config{})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			page := testPage(t)
			page.Meta.Status, page.Meta.Location = 301, target
			tt.meta(&page.Meta)
			o, err := processEncoded(p, page)
			if err != nil {
				t.Fatal(err)
			}
			if o.doc != nil {
				t.Errorf("a redirect has a document")
			}
			if tt.want == nil {
				if o.follow != nil || o.redirect != redirectHops {
					t.Errorf("follow %+v, counted %q: want none past the cap, counted %q", o.follow, o.redirect, redirectHops)
				}
				return
			}
			if o.follow == nil || o.follow.Source != page.Meta.URL || len(o.follow.URLs) != 1 || !reflect.DeepEqual(o.follow.URLs[0], *tt.want) {
				t.Errorf("follow %+v, want %+v from %s", o.follow, *tt.want, page.Meta.URL)
			}
		})
	}
}

func TestProcessDocumentAndDiscovered(t *testing.T) {
	p := newProcessor(t, scope.Config{Mode: scope.Host})
	page := testPage(t)
	page.Meta.ContentType = "application/xhtml+xml"
	o, err := processEncoded(p, page)
	if err != nil {
		t.Fatal(err)
	}
	var doc crawlmsg.Document
	if err := crawlmsg.Unmarshal(o.doc, &doc); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(page.Body)
	if doc.URL != page.Meta.URL || doc.Host != "example.com" || doc.Depth != 2 || doc.Status != 200 ||
		doc.FetchedAt != 1700000000000 || doc.ContentType != "application/xhtml+xml" || !doc.Truncated ||
		doc.Digest != hex.EncodeToString(sum[:]) {
		t.Errorf("document metadata = %+v", doc)
	}
	if doc.Title != "Service page" || doc.Description != "A page for the service tests." || doc.Lang != "en" ||
		doc.Canonical != "http://example.com/canonical" || doc.Text != "Some visible text. A B hidden C mail" {
		t.Errorf("document content = %+v", doc)
	}
	if len(doc.Links) != 4 || !doc.Links[2].NoFollow || doc.Links[2].URL != "http://example.com/hidden" {
		t.Errorf("document links = %+v", doc.Links)
	}

	if o.follow == nil {
		t.Fatal("no links to follow")
	}
	batch := *o.follow
	want := []crawlmsg.Discovered{
		{URL: "http://example.com/a", Depth: 3, Via: crawlmsg.ViaLink},
		{URL: "http://example.com/dir/b.html", Depth: 3, Via: crawlmsg.ViaLink},
	}
	if batch.Source != page.Meta.URL || !reflect.DeepEqual(batch.URLs, want) {
		t.Errorf("discovered = %+v", batch)
	}
	if o.links != 4 || o.emitted != 2 || !reflect.DeepEqual(o.rejected, scope.Rejected{scope.ReasonNoFollow: 1, scope.ReasonScope: 1}) || o.dropped.Scheme != 1 {
		t.Errorf("counts: links %d emitted %d rejected %v dropped %+v", o.links, o.emitted, o.rejected, o.dropped)
	}
}

func TestProcessNothingToFollow(t *testing.T) {
	tests := []struct {
		name   string
		depth  int
		header map[string][]string
	}{
		{"beyond max depth", 20, nil},
		{"X-Robots-Tag nofollow", 0, map[string][]string{"X-Robots-Tag": {"nofollow"}}},
	}
	p := newProcessor(t, scope.Config{})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			page := testPage(t)
			page.Meta.Depth, page.Meta.Header = tt.depth, tt.header
			o, err := processEncoded(p, page)
			if err != nil {
				t.Fatal(err)
			}
			if o.doc == nil || o.follow != nil || o.emitted != 0 {
				t.Errorf("doc %v, follow %v, emitted %d: want a document and no batch", o.doc != nil, o.follow, o.emitted)
			}
		})
	}
}

func TestProcessCharsetFromMeta(t *testing.T) {
	body, err := japanese.ShiftJIS.NewEncoder().String(`<title>日本語</title><a href="/日本">x</a>`)
	if err != nil {
		t.Fatal(err)
	}
	p := newProcessor(t, scope.Config{})
	for _, meta := range []crawlmsg.PageMeta{
		{URL: "http://example.jp/", Status: 200, ContentType: "text/html", Charset: "shift_jis"},
		{URL: "http://example.jp/", Status: 200, ContentType: "text/html", Header: map[string][]string{"content-type": {"text/html; charset=Shift_JIS"}}},
	} {
		o, err := processEncoded(p, &crawlmsg.Page{Meta: meta, Body: []byte(body)})
		if err != nil {
			t.Fatal(err)
		}
		var doc crawlmsg.Document
		if err := crawlmsg.Unmarshal(o.doc, &doc); err != nil {
			t.Fatal(err)
		}
		if doc.Title != "日本語" || len(doc.Links) != 1 || doc.Links[0].URL != "http://example.jp/%E6%97%A5%E6%9C%AC" {
			t.Errorf("charset from %+v: title %q links %+v", meta, doc.Title, doc.Links)
		}
	}
}

func TestEncodeDocumentFits(t *testing.T) {
	mk := func() *crawlmsg.Document {
		d := &crawlmsg.Document{URL: "http://example.com/", Text: strings.Repeat("wörd ", 2000)}
		for i := range 500 {
			d.Links = append(d.Links, crawlmsg.Link{URL: "http://example.com/" + strings.Repeat("x", 50) + string(rune('a'+i%26)), Tag: "a"})
		}
		return d
	}
	full, trimmed, err := encodeDocument(mk(), 0)
	if err != nil || trimmed {
		t.Fatalf("unlimited: trimmed %v, err %v", trimmed, err)
	}
	for _, max := range []int{len(full), len(full) - 1, 20000, 5000, 300} {
		b, trimmed, err := encodeDocument(mk(), max)
		if err != nil {
			t.Fatalf("max %d: %v", max, err)
		}
		if len(b) > max || trimmed != (max < len(full)) {
			t.Errorf("max %d: %d bytes, trimmed %v", max, len(b), trimmed)
		}
		var d crawlmsg.Document
		if err := crawlmsg.Unmarshal(b, &d); err != nil {
			t.Errorf("max %d: %v", max, err)
		}
	}
	if _, _, err := encodeDocument(mk(), 10); err == nil {
		t.Error("a limit below the fixed fields was accepted")
	}
}

func TestProcessParseErrorStillYieldsDocument(t *testing.T) {
	p := newProcessor(t, scope.Config{})
	page := testPage(t)
	page.Meta.URL, page.Meta.Host = "http://example.com:99x/", ""
	o, err := processEncoded(p, page)
	if err != nil {
		t.Fatal(err)
	}
	if o.parseErr == nil || o.doc == nil || o.follow != nil {
		t.Fatalf("parseErr %v, doc %v, follow %v: want an error and a document without links", o.parseErr, o.doc != nil, o.follow)
	}
	var doc crawlmsg.Document
	if err := crawlmsg.Unmarshal(o.doc, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Title != "Service page" || doc.URL != page.Meta.URL || len(doc.Links) != 0 {
		t.Errorf("document = %+v", doc)
	}
}

// TestPublishFailedRedeliversPagesWithOutputs: a failed publish sends back every page
// whose outputs it lost, a redirect's target included, and acks those that had none.
func TestPublishFailedRedeliversPagesWithOutputs(t *testing.T) {
	b := &parsedBatch{
		outs: []*outcome{
			{},              // parsed: a document
			{skipped: true}, // nothing to publish
			{skipped: true, follow: &crawlmsg.LinkGroup{Source: "http://a.test/old"}}, // a redirect
			{skipped: true, schedule: &crawlmsg.RecrawlEntry{}},                       // a schedule
			nil, // failed before
		},
		errs: make([]error, 5),
	}
	b.publishFailed(errors.New("nats down"))
	for i, want := range []bool{true, false, true, true, false} {
		if got := b.errs[i] != nil; got != want {
			t.Errorf("page %d: redelivered %v, want %v", i, got, want)
		}
	}
}
