package sitemap

import (
	"bytes"
	"compress/gzip"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func prio(p float64) *float64 { return &p }

func unix(s string) int64 {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t.Unix()
}

// The urlset fixture's entries, as both its plain and its gzipped form must give them.
var urlsetEntries = []Entry{
	{Loc: "https://example.com/", Lastmod: unix("2005-01-01T00:00:00Z"), Priority: prio(0.8)},
	{Loc: "https://example.com/catalog?item=12&desc=vacation_hawaii", Lastmod: unix("2004-12-23T18:00:15Z")},
	{Loc: "https://example.com/catalog?item=73&desc=vacation_new_zealand", Lastmod: unix("2004-12-23T17:00:00Z")},
	{Loc: "https://example.com/catalog?item=74", Priority: prio(0.3)},
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name    string
		file    string
		format  Format
		gzip    bool
		entries []Entry
		count   int // checked instead of entries when set
		cut     Limit
		err     error
		bad     [2]int // bad dates, bad priorities
	}{
		{name: "urlset", file: "urlset.xml", format: URLSet, entries: urlsetEntries, bad: [2]int{1, 1}},
		{name: "gzipped urlset", file: "urlset.xml.gz", format: URLSet, gzip: true, entries: urlsetEntries, bad: [2]int{1, 1}},
		{name: "index", file: "index.xml", format: Index, entries: []Entry{
			{Loc: "https://example.com/sitemap1.xml.gz", Lastmod: unix("2004-10-01T18:23:17Z")},
			{Loc: "https://example.com/sitemap2.xml", Lastmod: unix("2005-01-01T00:00:00Z")},
		}},
		{name: "text sitemap", file: "urls.txt", format: Text, entries: []Entry{
			{Loc: "https://example.com/a"}, {Loc: "https://example.com/b"}, {Loc: "https://example.com/c"},
		}},
		{name: "no namespace is read", file: "no_namespace.xml", format: URLSet, entries: []Entry{{Loc: "https://example.com/a"}}},
		{name: "more URLs than the protocol allows", file: "too_many.xml.gz", format: URLSet, gzip: true, count: MaxURLs, cut: LimitURLs},
		{name: "bad XML keeps what came before", file: "bad.xml", format: URLSet, entries: []Entry{{Loc: "https://example.com/first"}}, err: ErrSyntax},
		{name: "wrong namespace", file: "wrong_namespace.xml", format: URLSet, err: ErrNamespace},
		{name: "not a sitemap", file: "rss.xml", err: ErrRoot},
		{name: "corrupt gzip", file: "corrupt.xml.gz", gzip: true, err: ErrGzip},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Parse(fixture(t, tc.file), Options{})
			if tc.err == nil && err != nil || tc.err != nil && !errors.Is(err, tc.err) {
				t.Fatalf("Parse error = %v, want %v", err, tc.err)
			}
			if res.Format != tc.format || res.Gzip != tc.gzip || res.Cut != tc.cut {
				t.Errorf("format %q gzip %v cut %q, want %q %v %q", res.Format, res.Gzip, res.Cut, tc.format, tc.gzip, tc.cut)
			}
			if tc.count > 0 {
				if len(res.Entries) != tc.count {
					t.Fatalf("%d entries, want %d", len(res.Entries), tc.count)
				}
				return
			}
			if len(res.Entries) != len(tc.entries) {
				t.Fatalf("entries %+v, want %+v", res.Entries, tc.entries)
			}
			for i, e := range res.Entries {
				w := tc.entries[i]
				if e.Loc != w.Loc || e.Lastmod != w.Lastmod || (e.Priority == nil) != (w.Priority == nil) || e.Priority != nil && *e.Priority != *w.Priority {
					t.Errorf("entry %d = %+v (priority %v), want %+v (priority %v)", i, e, deref(e.Priority), w, deref(w.Priority))
				}
			}
			if got := [2]int{res.BadDates, res.BadPriorities}; got != tc.bad {
				t.Errorf("bad dates, priorities = %v, want %v", got, tc.bad)
			}
		})
	}
}

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

// A gzip bomb stops at the size limit, with the URLs listed before it kept; the limit is
// the protocol's 50 MB unless set lower, never higher.
func TestParseStopsAtSizeLimit(t *testing.T) {
	for _, tc := range []struct {
		o     Options
		urls  int
		bytes int64
	}{
		{Options{}, MaxURLs, MaxBytes},
		{Options{MaxURLs: 1 << 30, MaxBytes: 1 << 40}, MaxURLs, MaxBytes},
		{Options{MaxURLs: 10, MaxBytes: 1 << 20}, 10, 1 << 20},
	} {
		if n, b := tc.o.limits(); n != tc.urls || b != tc.bytes {
			t.Errorf("%+v: limits %d URLs, %d bytes; want %d, %d", tc.o, n, b, tc.urls, tc.bytes)
		}
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write([]byte(`<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"><url><loc>https://example.com/kept</loc></url><!--`))
	zw.Write(bytes.Repeat([]byte(" "), 2<<20))
	zw.Write([]byte(`--><url><loc>https://example.com/beyond</loc></url></urlset>`))
	zw.Close()
	res, err := Parse(buf.Bytes(), Options{MaxBytes: 1 << 20})
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if res.Cut != LimitBytes || len(res.Entries) != 1 || res.Entries[0].Loc != "https://example.com/kept" {
		t.Fatalf("cut %q, entries %+v; want the first URL and a cut at bytes", res.Cut, res.Entries)
	}
}

func TestParseLastmod(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string // RFC 3339, "" for an error
	}{
		{"1997", "1997-01-01T00:00:00Z"},
		{"1997-07", "1997-07-01T00:00:00Z"},
		{"1997-07-16", "1997-07-16T00:00:00Z"},
		{"1997-07-16T19:20+01:00", "1997-07-16T18:20:00Z"},
		{"1997-07-16T19:20:30+01:00", "1997-07-16T18:20:30Z"},
		{"1997-07-16T19:20:30.45+01:00", "1997-07-16T18:20:30Z"},
		{"1997-07-16T19:20:30Z", "1997-07-16T19:20:30Z"},
		{"1997-07-16T19:20:30", "1997-07-16T19:20:30Z"}, // no zone: UTC
		{"1997-07-16 19:20:30", "1997-07-16T19:20:30Z"},
		{"16/07/1997", ""},
		{"", ""},
		{"1997-13-01", ""},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseLastmod(tc.in)
			if tc.want == "" {
				if err == nil {
					t.Fatalf("ParseLastmod(%q) = %d, want an error", tc.in, got)
				}
				return
			}
			if err != nil || got != unix(tc.want) {
				t.Fatalf("ParseLastmod(%q) = %d, %v; want %s", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestKind(t *testing.T) {
	for _, k := range Kinds {
		found := false
		for _, f := range []string{"corrupt.xml.gz", "bad.xml", "rss.xml", "wrong_namespace.xml"} {
			_, err := Parse(fixture(t, f), Options{})
			if Kind(err) == k {
				found = true
			}
		}
		if !found && k != "encoding" {
			t.Errorf("no fixture gives error kind %q", k)
		}
	}
	if _, err := Parse([]byte("https://example.com/\xff\xfe\n"), Options{}); Kind(err) != "encoding" {
		t.Errorf("a text sitemap of bad UTF-8: kind %q (%v), want encoding", Kind(err), err)
	}
}

// Whatever the bytes, Parse returns; a fuzz seed corpus of the fixtures.
func FuzzParse(f *testing.F) {
	for _, n := range []string{"urlset.xml", "index.xml", "bad.xml", "urls.txt", "urlset.xml.gz"} {
		b, err := os.ReadFile(filepath.Join("testdata", n))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		res, _ := Parse(b, Options{MaxURLs: 100})
		if len(res.Entries) > 100 {
			t.Fatalf("%d entries over the limit", len(res.Entries))
		}
		for _, e := range res.Entries {
			if strings.TrimSpace(e.Loc) != e.Loc || e.Loc == "" {
				t.Fatalf("entry loc %q not trimmed", e.Loc)
			}
		}
	})
}
