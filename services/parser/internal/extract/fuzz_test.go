package extract

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"unicode/utf8"
)

// fuzzLimits are small, so that the fuzzer reaches every cap quickly.
var fuzzLimits = Limits{MaxBytes: 64 << 10, MaxTokens: 5000, MaxLinks: 20, MaxTextBytes: 512, MaxAnchorBytes: 32, MaxMetaBytes: 64}

// truncationMarks are places where cutting a page leaves a construct open: a tag, an
// attribute value (quoted and not), a comment, a raw-text element, a character reference,
// a <base>, a meta refresh URL, a CDATA section.
var truncationMarks = [][]byte{
	[]byte("<a "), []byte(`href="`), []byte("href='"), []byte("href="), []byte("<!--"), []byte("<script"),
	[]byte("<style"), []byte("<title>"), []byte("&"), []byte("<base"), []byte("url="), []byte("<![CDATA["),
	[]byte("<noscript"), []byte("<meta"), []byte("</"),
}

// truncations returns prefixes of b cut inside each kind of open construct (just after a
// mark and in the middle of what follows), inside a multi-byte character, and at regular
// intervals (at most about perFile in all).
func truncations(b []byte, perFile int) [][]byte {
	cuts := map[int]bool{}
	for _, m := range truncationMarks {
		if i := bytes.Index(b, m); i >= 0 {
			cuts[i+1] = true
			cuts[i+len(m)] = true
			cuts[i+len(m)+3] = true
		}
	}
	for i := 0; i < len(b); i++ {
		if b[i] >= 0xC0 { // first byte of a multi-byte sequence: cut after it
			cuts[i+1] = true
			break
		}
	}
	step := max(1, len(b)/perFile)
	for n := step; n < len(b); n += step {
		cuts[n] = true
	}
	var out [][]byte
	for n := range cuts {
		if n > 0 && n < len(b) {
			out = append(out, b[:n])
		}
	}
	return out
}

func fixtures(tb testing.TB) map[string][]byte {
	tb.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "*.html"))
	if err != nil {
		tb.Fatal(err)
	}
	if len(files) == 0 {
		tb.Fatal("no fixtures")
	}
	out := map[string][]byte{}
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			tb.Fatal(err)
		}
		out[filepath.Base(name)] = b
	}
	return out
}

// extractChecked extracts body under fuzzLimits and fails on a nil result or any broken
// limit or invariant.
func extractChecked(t *testing.T, body []byte, contentType string) *Result {
	t.Helper()
	res, _ := Extract(Input{
		URL:         "http://example.com/a/b.html",
		Body:        body,
		ContentType: contentType,
		Header:      map[string][]string{"Link": {string(body[:min(len(body), 64)])}, "X-Robots-Tag": {contentType}},
	}, Options{Limits: fuzzLimits, RobotsAgent: "trawl", Embeds: true})
	if res == nil {
		t.Fatal("nil result")
	}
	lim := fuzzLimits
	checkEmbeds(t, res)
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
	return res
}

// TestTruncatedFixtures runs every fixture cut inside each kind of open construct (and at
// regular intervals) through the same checks as the fuzzer, on every `go test` run, and
// checks that a cut page yields no link that the whole page lacks.
func TestTruncatedFixtures(t *testing.T) {
	for name, b := range fixtures(t) {
		t.Run(name, func(t *testing.T) {
			whole := map[string]bool{}
			for _, l := range extractChecked(t, b, "text/html").Links {
				whole[l.URL] = true
			}
			cuts := truncations(b, 60)
			if len(cuts) < 10 {
				t.Fatalf("only %d truncations of a %d-byte fixture", len(cuts), len(b))
			}
			for _, cut := range cuts {
				res := extractChecked(t, cut, "text/html")
				if len(whole) >= fuzzLimits.MaxLinks || bytes.Contains(b, []byte("<base")) {
					// The cap decides which links the whole page keeps; a late <base>
					// that is cut off changes what every link resolves against.
					continue
				}
				for _, l := range res.Links {
					// A cut href can be a prefix of a real one ("/abo" of "/about"): only the
					// start of the link must match one of the page's links.
					if !whole[l.URL] && !prefixOfAny(l.URL, whole) {
						t.Errorf("cut at %d bytes: link %s not on the whole page", len(cut), l.URL)
					}
				}
			}
		})
	}
}

// checkEmbeds fails on requisites over the cap, repeated, or not absolute http(s).
func checkEmbeds(t *testing.T, res *Result) {
	t.Helper()
	if len(res.Embeds) > fuzzLimits.MaxLinks {
		t.Fatalf("%d requisites > %d", len(res.Embeds), fuzzLimits.MaxLinks)
	}
	seen := map[string]bool{}
	for _, l := range res.Embeds {
		if seen[l.URL] {
			t.Fatalf("duplicate requisite %s", l.URL)
		}
		seen[l.URL] = true
		if len(l.URL) < 8 || (l.URL[:7] != "http://" && l.URL[:8] != "https://") {
			t.Fatalf("requisite %q is not absolute http(s)", l.URL)
		}
	}
}

// FuzzExtractCSS feeds arbitrary style sheets (seeded with the CSS fixtures and cuts of
// them) and checks that reading one never panics and never exceeds its limits.
func FuzzExtractCSS(f *testing.F) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.css"))
	if err != nil || len(files) == 0 {
		f.Fatalf("no CSS fixtures: %v", err)
	}
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, "text/css")
		for n := 1; n < len(b); n += max(1, len(b)/16) {
			f.Add(b[:n], "text/css; charset=utf-8")
		}
	}
	f.Add([]byte(`a{b:url(\`), "text/css")
	f.Add([]byte(`@import url(`), "text/css; charset=utf-16le")
	f.Add([]byte("\\\n\\"), "")
	f.Add([]byte(`image-set("a" 1x, image-set("b")`), "text/css")
	f.Fuzz(func(t *testing.T, body []byte, contentType string) {
		res, _ := ExtractCSS(CSSInput{URL: "http://example.com/css/a.css", Body: body, ContentType: contentType},
			Options{Limits: fuzzLimits})
		if res == nil {
			t.Fatal("nil result")
		}
		checkEmbeds(t, res)
	})
}

func prefixOfAny(u string, set map[string]bool) bool {
	for s := range set {
		if len(u) <= len(s) && s[:len(u)] == u {
			return true
		}
	}
	return false
}

// FuzzExtract feeds arbitrary bytes (seeded with every fixture and truncations of them
// inside each kind of open construct) and checks that extraction never panics and never
// exceeds its limits.
func FuzzExtract(f *testing.F) {
	for _, b := range fixtures(f) {
		f.Add(b, "text/html")
		for _, cut := range truncations(b, 8) {
			f.Add(cut, "text/html; charset=utf-8")
		}
	}
	f.Add([]byte("\xff\xfe<\x00a\x00 \x00h\x00r\x00e\x00f\x00=\x00/"), "")
	f.Add([]byte(`<a href="/x" rel=nofollow><base href="//h/"><meta http-equiv=refresh content="0;url=`), "text/html; charset=shift_jis")
	f.Add([]byte("<title><svg><title>x</title></svg><noscript><a href=a"), "text/html; charset=gbk")
	f.Add([]byte(`<p>caf\xc3`), "text/html; charset=utf-8")
	f.Add([]byte(`<a href="/x">&amp`), "text/html")
	f.Add([]byte(`<script>document.write("<a href='/y'>`), "text/html")
	f.Fuzz(func(t *testing.T, body []byte, contentType string) {
		extractChecked(t, body, contentType)
	})
}
