package cdxj

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	cases := []struct {
		name string
		line string
		want Line
		err  bool
	}{
		{"archiver's", `com,example)/a 20260102030405 {"url":"http://example.com/a","mime":"text/html","status":"200","digest":"sha1:AAAA","length":"120","offset":"3","filename":"f.warc.gz"}`,
			Line{URLKey: "com,example)/a", Date: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), URL: "http://example.com/a", Mime: "text/html", Status: 200, Digest: "sha1:AAAA", Length: 120, Offset: 3, Filename: "f.warc.gz"}, false},
		// Some writers give numbers as JSON numbers, and a revisit's status as "-".
		{"numbers", `com,example)/b 20260102030405 {"url":"http://example.com/b","mime":"warc/revisit","status":"-","length":7,"offset":9}`,
			Line{URLKey: "com,example)/b", Date: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), URL: "http://example.com/b", Mime: "warc/revisit", Length: 7, Offset: 9}, false},
		{"short timestamp", `com,example)/c 2026 {"url":"http://example.com/c"}`,
			Line{URLKey: "com,example)/c", Date: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), URL: "http://example.com/c"}, false},
		{"no json", `com,example)/d 20260102030405 - 200`, Line{}, true},
		{"bad timestamp", `com,example)/e 2026-01-02 {"url":"x"}`, Line{}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Parse(c.line)
			if (err != nil) != c.err || err != nil && !errors.Is(err, ErrSyntax) {
				t.Fatalf("err %v, want error %v", err, c.err)
			}
			if got != c.want {
				t.Errorf("got %+v\nwant %+v", got, c.want)
			}
		})
	}
}

// Each skips blank and header lines and reports malformed ones with their line number.
func TestEach(t *testing.T) {
	in := "!meta header\n\ncom,a)/ 20260102030405 {\"url\":\"http://a/\"}\nnot cdxj\ncom,b)/ 20260102030405 {\"url\":\"http://b/\"}\n"
	var urls []string
	var bad []int
	err := Each(context.Background(), strings.NewReader(in), func(l Line) error { urls = append(urls, l.URL); return nil },
		func(n int, err error) { bad = append(bad, n) })
	if err != nil || strings.Join(urls, " ") != "http://a/ http://b/" || len(bad) != 1 || bad[0] != 4 {
		t.Errorf("urls %v, bad lines %v, err %v", urls, bad, err)
	}
}
