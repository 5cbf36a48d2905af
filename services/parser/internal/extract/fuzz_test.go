package extract

import (
	"os"
	"path/filepath"
	"testing"
	"unicode/utf8"
)

// FuzzExtract feeds arbitrary bytes (seeded with every fixture and truncations of them)
// and checks that extraction never panics and never exceeds its limits.
func FuzzExtract(f *testing.F) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.html"))
	if err != nil {
		f.Fatal(err)
	}
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, "text/html")
		// Truncated HTML: inside a tag, an attribute value, a comment, a script.
		for _, n := range []int{len(b) / 3, len(b) / 2, len(b) - 7} {
			if n > 0 && n < len(b) {
				f.Add(b[:n], "text/html; charset=utf-8")
			}
		}
	}
	f.Add([]byte("\xff\xfe<\x00a\x00 \x00h\x00r\x00e\x00f\x00=\x00/"), "")
	f.Add([]byte(`<a href="/x" rel=nofollow><base href="//h/"><meta http-equiv=refresh content="0;url=`), "text/html; charset=shift_jis")
	f.Add([]byte("<title><svg><title>x</title></svg><noscript><a href=a"), "text/html; charset=gbk")

	lim := Limits{MaxBytes: 64 << 10, MaxTokens: 5000, MaxLinks: 20, MaxTextBytes: 512, MaxAnchorBytes: 32, MaxMetaBytes: 64}
	f.Fuzz(func(t *testing.T, body []byte, contentType string) {
		res, _ := Extract(Input{
			URL:         "http://example.com/a/b.html",
			Body:        body,
			ContentType: contentType,
			Header:      map[string][]string{"Link": {string(body[:min(len(body), 64)])}, "X-Robots-Tag": {contentType}},
		}, Options{Limits: lim, RobotsAgent: "trawl"})
		if res == nil {
			t.Fatal("nil result")
		}
		if len(res.Links) > lim.MaxLinks {
			t.Fatalf("%d links > %d", len(res.Links), lim.MaxLinks)
		}
		if len(res.Text) > lim.MaxTextBytes || len(res.Title) > lim.MaxMetaBytes || len(res.Description) > lim.MaxMetaBytes {
			t.Fatalf("text %d, title %d, description %d bytes over the caps", len(res.Text), len(res.Title), len(res.Description))
		}
		for _, s := range []string{res.Text, res.Title, res.Description, res.Lang} {
			if !utf8.ValidString(s) {
				t.Fatalf("invalid UTF-8 %q", s)
			}
		}
		seen := map[string]bool{}
		for _, l := range res.Links {
			if len(l.Text) > lim.MaxAnchorBytes {
				t.Fatalf("anchor text of %d bytes", len(l.Text))
			}
			if seen[l.URL] {
				t.Fatalf("duplicate link %s", l.URL)
			}
			seen[l.URL] = true
			if len(l.URL) < 8 || (l.URL[:7] != "http://" && l.URL[:8] != "https://") {
				t.Fatalf("link %q is not absolute http(s)", l.URL)
			}
			if res.NoFollow && !l.NoFollow {
				t.Fatalf("page nofollow but link %s followable", l.URL)
			}
		}
	})
}
