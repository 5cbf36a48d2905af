package extract

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/trawl/trawl/shared/crawlmsg"
)

const pageURL = "http://example.com/dir/page.html"

func fixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func a(url, text string) crawlmsg.Link { return crawlmsg.Link{URL: url, Text: text, Tag: "a"} }

func TestExtractLinks(t *testing.T) {
	tests := []struct {
		fixture string
		header  map[string][]string
		want    []crawlmsg.Link
		dropped Dropped
	}{
		{
			fixture: "a_href.html",
			want: []crawlmsg.Link{
				// White space collapsed; the repeat of /one keeps the first text.
				a("http://example.com/one", "the first page"),
				{URL: "http://example.com/dir/two.html", Text: "Second bold page", Rel: "next", Tag: "a"},
				// An image link's anchor text is the image's alt.
				a("http://example.com/img", "Picture of a cat"),
				// An unclosed <a> is closed by the next one.
				a("http://example.com/unclosed", "opened"),
				a("http://example.com/after", "after"),
				// Anchor text is capped at MaxAnchorBytes (256), on a rune boundary.
				a("http://example.com/long", strings.Join(strings.Fields("aaaaaaaaaa bbbbbbbbbb cccccccccc dddddddddd eeeeeeeeee ffffffffff gggggggggg hhhhhhhhhh iiiiiiiiii jjjjjjjjjj kkkkkkkkkk llllllllll mmmmmmmmmm nnnnnnnnnn oooooooooo pppppppppp qqqqqqqqqq rrrrrrrrrr ssssssssss tttttttttt uuuuuuuuuu vvvvvvvvvv wwwwwwwwww"), " ")+" xxx"),
			},
		},
		{
			fixture: "area_href.html",
			want: []crawlmsg.Link{
				{URL: "http://example.com/north", Text: "North region", Tag: "area"},
				{URL: "http://example.com/dir/south.html", Text: "South", Rel: "nofollow", Tag: "area", NoFollow: true},
			},
		},
		{
			fixture: "frames.html",
			want: []crawlmsg.Link{
				{URL: "http://example.com/dir/nav.html", Tag: "frame"},
				{URL: "http://example.com/content/main.html", Tag: "frame"},
				// <noframes> content is tokenised, not skipped as raw text.
				a("http://example.com/noframes-index", "index"),
			},
		},
		{
			fixture: "iframe.html",
			// Markup inside <iframe> is raw text, not links.
			want: []crawlmsg.Link{
				{URL: "https://video.example.net/embed/42", Tag: "iframe"},
				{URL: "http://example.com/dir/widget.html", Tag: "iframe"},
			},
		},
		{
			fixture: "link_rel.html",
			// Stylesheets, icons, preloads and unknown rels are not pages; canonical is
			// Result.Canonical, not an outlink.
			want: []crawlmsg.Link{
				{URL: "http://example.com/de/page.html", Rel: "alternate", Tag: "link"},
				{URL: "http://example.com/feed.xml", Rel: "alternate", Tag: "link"},
				{URL: "http://example.com/dir/page2.html", Rel: "next", Tag: "link"},
				{URL: "http://example.com/dir/page0.html", Rel: "prev", Tag: "link"},
				{URL: "http://example.com/print.html", Rel: "alternate nofollow", Tag: "link", NoFollow: true},
			},
		},
		{
			fixture: "base_href.html",
			// The first <base href> counts, itself resolved against the page URL.
			want: []crawlmsg.Link{
				a("http://example.com/other/dir/rel.html", "relative to base"),
				a("http://example.com/other/up.html", "dot dot"),
				a("http://example.com/root.html", "root"),
				a("https://abs.example.org/x", "absolute"),
			},
		},
		{
			fixture: "base_late.html",
			// <base> applies to the whole document, links before it included.
			want: []crawlmsg.Link{
				a("https://cdn.example.org/root/early.html", "before the base element"),
				a("https://cdn.example.org/root/late.html", "after the base element"),
			},
		},
		{
			fixture: "nofollow.html",
			want: []crawlmsg.Link{
				{URL: "http://example.com/a", Text: "plain", Rel: "nofollow", Tag: "a", NoFollow: true},
				{URL: "http://example.com/b", Text: "mixed case", Rel: "nofollow", Tag: "a", NoFollow: true},
				{URL: "http://example.com/c", Text: "in a list", Rel: "external nofollow noopener", Tag: "a", NoFollow: true},
				{URL: "http://example.com/d", Text: "not the token", Rel: "nofollowers", Tag: "a"},
				{URL: "http://example.com/e", Text: "ugc only", Rel: "ugc", Tag: "a"},
				// A URL linked both ways is followable: nofollow belongs to one link.
				{URL: "http://example.com/f", Text: "first nofollow", Rel: "nofollow", Tag: "a"},
				a("http://example.com/g", "followable"),
			},
		},
		{
			fixture: "meta_refresh.html",
			want:    []crawlmsg.Link{{URL: "http://example.com/next/page.html", Rel: "refresh", Tag: "meta"}},
		},
		{
			fixture: "meta_robots_nofollow.html",
			want: []crawlmsg.Link{
				{URL: "http://example.com/x", Text: "x", Tag: "a", NoFollow: true},
				{URL: "http://example.com/y", Text: "y", Rel: "next", Tag: "a", NoFollow: true},
			},
		},
		{
			fixture: "plain.html",
			header:  map[string][]string{"X-Robots-Tag": {"noarchive", "nofollow"}},
			want:    []crawlmsg.Link{{URL: "http://example.com/x", Text: "x", Tag: "a", NoFollow: true}},
		},
		{
			fixture: "schemes.html",
			want:    []crawlmsg.Link{a("https://example.com/ok", "kept")},
			// javascript ×3, mailto, data, tel, ftp, news; bad port, no host, space in host;
			// "#section" and "".
			dropped: Dropped{Scheme: 8, Invalid: 3, Fragment: 1},
		},
		{
			fixture: "relative.html",
			want: []crawlmsg.Link{
				a("http://example.com/up.html", "parent"),
				a("http://example.com/dir/same.html", "same dir"),
				a("http://example.com/dir/sibling.html", "sibling"),
				a("http://other.example.org/x", "protocol relative"),
				a("http://example.com/dir/page.html?q=1", "query only"),
				a("http://example.com/dir/page.html", "fragment dropped"),
				a("http://example.com/a/c", "dot segments"),
				a("http://example.com/too-high", "above root"),
				a("http://example.com/dir/g", "http colon relative"),
				a("http://example.com/spaced.html", "white space"),
				a("http://example.com/caf%C3%A9?x=~", "escapes"),
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.fixture, func(t *testing.T) {
			res, err := Extract(Input{URL: pageURL, Body: fixture(t, tt.fixture), ContentType: "text/html", Header: tt.header}, Options{RobotsAgent: "trawl"})
			if err != nil {
				t.Fatalf("Extract: %v", err)
			}
			if !reflect.DeepEqual(res.Links, tt.want) {
				t.Errorf("links:\n got %s\nwant %s", dump(res.Links), dump(tt.want))
			}
			if res.Dropped != tt.dropped {
				t.Errorf("dropped = %+v, want %+v", res.Dropped, tt.dropped)
			}
		})
	}
}

func dump(ls []crawlmsg.Link) string {
	var b strings.Builder
	for _, l := range ls {
		fmt.Fprintf(&b, "\n  %+v", l)
	}
	return b.String()
}

func TestExtractPageDirectives(t *testing.T) {
	tests := []struct {
		name               string
		fixture            string
		agent              string
		header             map[string][]string
		noIndex, noFollow  bool
		canonical, baseURL string
	}{
		{name: "plain", fixture: "plain.html"},
		{name: "meta nofollow", fixture: "meta_robots_nofollow.html", noFollow: true},
		{name: "meta noindex", fixture: "meta_robots_noindex.html", noIndex: true},
		{name: "meta none", fixture: "meta_robots_none.html", noIndex: true, noFollow: true},
		// <meta name=trawl> applies to us, <meta name=googlebot> does not.
		{name: "meta agent", fixture: "meta_robots_agent.html", agent: "trawl", noFollow: true},
		{name: "meta other agent", fixture: "meta_robots_agent.html", agent: "otherbot"},
		{name: "x-robots-tag", fixture: "plain.html", header: map[string][]string{"X-Robots-Tag": {"noindex, nofollow"}}, noIndex: true, noFollow: true},
		{name: "x-robots-tag lowercase key", fixture: "plain.html", header: map[string][]string{"x-robots-tag": {"none"}}, noIndex: true, noFollow: true},
		{name: "x-robots-tag for us", fixture: "plain.html", agent: "trawl", header: map[string][]string{"X-Robots-Tag": {"Trawl: noindex"}}, noIndex: true},
		{name: "x-robots-tag for another bot", fixture: "plain.html", agent: "trawl", header: map[string][]string{"X-Robots-Tag": {"googlebot: noindex, nofollow"}}},
		{name: "x-robots-tag valued directive", fixture: "plain.html", header: map[string][]string{"X-Robots-Tag": {"unavailable_after: 25 Jun 2010 15:00:00 PST, noindex"}}, noIndex: true},
		{name: "canonical from link element", fixture: "link_rel.html", canonical: "http://example.com/canonical-page"},
		{name: "canonical against base", fixture: "base_href.html", canonical: "http://example.com/other/dir/canon.html", baseURL: "http://example.com/other/dir/"},
		{
			name: "canonical from Link header", fixture: "plain.html",
			header:    map[string][]string{"Link": {`</style.css>; rel=preload, <https://example.com/canon?a=1,2>; rel="canonical"`}},
			canonical: "https://example.com/canon?a=1,2",
		},
		{
			name: "relative Link header resolves against the page", fixture: "plain.html",
			header:    map[string][]string{"Link": {`<other.html>; rel="alternate canonical"`}},
			canonical: "http://example.com/dir/other.html",
		},
		{
			name: "link element wins over Link header", fixture: "link_rel.html",
			header:    map[string][]string{"Link": {`<https://example.com/from-header>; rel=canonical`}},
			canonical: "http://example.com/canonical-page",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := Extract(Input{URL: pageURL, Body: fixture(t, tt.fixture), Header: tt.header}, Options{RobotsAgent: tt.agent})
			if err != nil {
				t.Fatal(err)
			}
			if res.NoIndex != tt.noIndex || res.NoFollow != tt.noFollow {
				t.Errorf("noindex, nofollow = %v, %v; want %v, %v", res.NoIndex, res.NoFollow, tt.noIndex, tt.noFollow)
			}
			if res.Canonical != tt.canonical {
				t.Errorf("canonical = %q, want %q", res.Canonical, tt.canonical)
			}
			if want := cmpOr(tt.baseURL, pageURL); res.BaseURL != want {
				t.Errorf("base = %q, want %q", res.BaseURL, want)
			}
			for _, l := range res.Links {
				if res.NoFollow && !l.NoFollow {
					t.Errorf("page is nofollow but link %s is not", l.URL)
				}
			}
		})
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func TestExtractText(t *testing.T) {
	res, err := Extract(Input{URL: pageURL, Body: fixture(t, "text.html")}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if want := "The Title & more"; res.Title != want {
		t.Errorf("title = %q, want %q", res.Title, want)
	}
	if want := "A short description."; res.Description != want {
		t.Errorf("description = %q, want %q", res.Description, want)
	}
	if res.Lang != "en-GB" {
		t.Errorf("lang = %q", res.Lang)
	}
	// Block elements separate words, inline ones do not; entities are decoded.
	if want := "Heading First paragraph with boldtext and spaces. Second line one two chart label Café <tag>"; res.Text != want {
		t.Errorf("text:\n got %q\nwant %q", res.Text, want)
	}
	for _, hidden := range []string{"hiddenScript", "hidden script", "hidden noscript", "hidden template", "hidden-style", "svg tooltip", "Title"} {
		if strings.Contains(res.Text, hidden) {
			t.Errorf("text contains %q", hidden)
		}
	}
	// Links in <noscript> are real; the one inside <script> is not.
	if want := []crawlmsg.Link{a("http://example.com/from-noscript", "noscript link")}; !reflect.DeepEqual(res.Links, want) {
		t.Errorf("links = %s", dump(res.Links))
	}
}

func TestExtractTextCap(t *testing.T) {
	body := []byte("<p>" + strings.Repeat("héllo wörld ", 1000) + "</p><a href=/after>after the cap</a>")
	for _, capBytes := range []int{1, 2, 7, 100, 1001} {
		t.Run(fmt.Sprint(capBytes), func(t *testing.T) {
			res, err := Extract(Input{URL: pageURL, Body: body}, Options{Limits: Limits{MaxTextBytes: capBytes}})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Text) > capBytes || !utf8.ValidString(res.Text) || !res.TextCapped {
				t.Errorf("text of %d bytes (valid %v, capped %v) over cap %d", len(res.Text), utf8.ValidString(res.Text), res.TextCapped, capBytes)
			}
			if len(res.Links) != 1 {
				t.Errorf("links after the text cap were lost: %v", res.Links)
			}
		})
	}
	res, _ := Extract(Input{URL: pageURL, Body: body}, Options{Limits: Limits{MaxTextBytes: -1}})
	if res.Text != "" {
		t.Errorf("negative MaxTextBytes kept %d bytes of text", len(res.Text))
	}
}

func TestExtractCharsets(t *testing.T) {
	tests := []struct {
		fixture, contentType, charset, title, link, text string
	}{
		{"charset_windows1252.html", "text/html", "windows-1252", "Café – crème brûlée", "http://example.com/men%C3%BC", "menü"},
		{"charset_shiftjis_header.html", "text/html; charset=Shift_JIS", "shift_jis", "日本語のページ", "http://example.com/%E6%97%A5%E6%9C%AC", "日本"},
		{"charset_shiftjis_meta.html", "text/html", "shift_jis", "日本語のページ", "http://example.com/%E6%97%A5%E6%9C%AC", "日本"},
		{"charset_gbk.html", "", "gbk", "中文网页", "http://example.com/%E4%B8%AD%E6%96%87", "中文"},
		{"charset_utf16le.html", "text/html", "utf-16le", "Ünïcödé UTF-16LE", "http://example.com/stra%C3%9Fe", "straße"},
		// The byte order mark outranks a (wrong) Content-Type charset.
		{"charset_utf16be.html", "text/html; charset=iso-8859-1", "utf-16be", "Ünïcödé UTF-16BE", "http://example.com/stra%C3%9Fe", "straße"},
		// Undeclared UTF-8 whose first non-ASCII byte is past the 1024-byte prescan.
		{"charset_utf8_late.html", "text/html", "utf-8", "Grüße aus Köln", "http://example.com/k%C3%B6ln", "köln"},
	}
	for _, tt := range tests {
		t.Run(tt.fixture, func(t *testing.T) {
			res, err := Extract(Input{URL: pageURL, Body: fixture(t, tt.fixture), ContentType: tt.contentType}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if res.Charset != tt.charset {
				t.Errorf("charset = %q, want %q", res.Charset, tt.charset)
			}
			if res.Title != tt.title {
				t.Errorf("title = %q, want %q", res.Title, tt.title)
			}
			want := []crawlmsg.Link{a(tt.link, tt.text)}
			if !reflect.DeepEqual(res.Links, want) {
				t.Errorf("links = %s, want %s", dump(res.Links), dump(want))
			}
			if res.Text != tt.text+" "+tt.text {
				t.Errorf("text = %q", res.Text)
			}
		})
	}
}

func TestExtractLimits(t *testing.T) {
	var b strings.Builder
	for i := range 100 {
		fmt.Fprintf(&b, `<a href="/l%d">link %d</a> <a href="mailto:x%d@example.com">m</a>`, i, i, i)
	}
	body := []byte(b.String())

	t.Run("links", func(t *testing.T) {
		res, err := Extract(Input{URL: pageURL, Body: body}, Options{Limits: Limits{MaxLinks: 10}})
		if err != nil {
			t.Fatal(err)
		}
		// Dropped schemes do not use up the link budget.
		if len(res.Links) != 10 || res.Links[9].URL != "http://example.com/l9" || !res.LinksCapped {
			t.Errorf("got %d links (capped %v): %s", len(res.Links), res.LinksCapped, dump(res.Links))
		}
		if res.Dropped.Limit != 90 || res.Dropped.Scheme != 100 {
			t.Errorf("dropped = %+v", res.Dropped)
		}
	})
	t.Run("tokens", func(t *testing.T) {
		// Each link is 3 tokens plus the text between links.
		res, err := Extract(Input{URL: pageURL, Body: body}, Options{Limits: Limits{MaxTokens: 40}})
		if err != nil {
			t.Fatal(err)
		}
		if res.StoppedAt != "tokens" || len(res.Links) == 0 || len(res.Links) > 10 {
			t.Errorf("stopped at %q with %d links", res.StoppedAt, len(res.Links))
		}
	})
	t.Run("bytes", func(t *testing.T) {
		res, err := Extract(Input{URL: pageURL, Body: body}, Options{Limits: Limits{MaxBytes: 200}})
		if err != nil {
			t.Fatal(err)
		}
		if res.StoppedAt != "bytes" || len(res.Links) == 0 || len(res.Links) > 4 {
			t.Errorf("stopped at %q with %d links", res.StoppedAt, len(res.Links))
		}
	})
}

func TestExtractBadPageURL(t *testing.T) {
	res, err := Extract(Input{URL: "not a url", Body: fixture(t, "plain.html")}, Options{})
	if !errors.Is(err, ErrPageURL) {
		t.Fatalf("err = %v, want ErrPageURL", err)
	}
	// What does not need a base is still extracted.
	if res.Title != "Plain" || res.Text != "Hello x" || len(res.Links) != 0 {
		t.Errorf("result = %+v", res)
	}
}

func TestRefreshURL(t *testing.T) {
	tests := map[string]string{
		"5; url=/next":          "/next",
		"0;URL='/quoted' x":     "/quoted",
		`3, url="/dq"`:          "/dq",
		"1; /bare":              "/bare",
		" 2.5 ; url = /spaced ": "/spaced",
		"10":                    "",
		"":                      "",
		"url=/no-time":          "",
		"0; urlfoo":             "urlfoo",
	}
	for in, want := range tests {
		t.Run(in, func(t *testing.T) {
			if got := refreshURL(in); got != want {
				t.Errorf("refreshURL(%q) = %q, want %q", in, got, want)
			}
		})
	}
}

func TestExtractUnclosedAnchorAtEOF(t *testing.T) {
	res, err := Extract(Input{URL: pageURL, Body: []byte(`<p><a href="/cut">text cut by the size cap`)}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if want := []crawlmsg.Link{a("http://example.com/cut", "text cut by the size cap")}; !reflect.DeepEqual(res.Links, want) {
		t.Errorf("links = %s", dump(res.Links))
	}
}
