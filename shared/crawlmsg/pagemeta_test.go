package crawlmsg

import (
	stdjson "encoding/json"
	"fmt"
	"reflect"
	"testing"

	goccy "github.com/goccy/go-json"
)

// PageMeta is written by hand (pagemeta.go); archivers, parsers and taps read it with JSON
// decoders, so its bytes must be encoding/json's — and goccy/go-json's, the encoder it
// replaced — for every page, odd ones included.
func TestPageMetaAppenderMatchesEncodingJSON(t *testing.T) {
	manyKeys := map[string][]string{}
	for i := range 40 {
		manyKeys[fmt.Sprintf("X-H%02d", 39-i)] = []string{fmt.Sprint(i)}
	}
	tests := []struct {
		name string
		m    PageMeta
	}{
		{"zero", PageMeta{}},
		{"minimal", PageMeta{URL: "http://a.example/", Host: "a.example"}},
		{"common page", PageMeta{URL: "http://a.example/p/1", Host: "a.example", Depth: 2, Status: 200,
			Header:      map[string][]string{"Content-Type": {"text/html; charset=utf-8"}, "Content-Length": {"1234"}, "Date": {"Tue, 24 Nov 2026 04:00:00 GMT"}},
			ContentType: "text/html", Charset: "utf-8", FetchedAt: 1790000000123, DurationMs: 3, Lease: "0-17-9f3a",
			Capture: &Capture{Request: []byte("GET /p/1 HTTP/1.1\r\nHost: a.example\r\n\r\n"), Response: []byte("HTTP/1.1 200 OK\r\n\r\n"), Verbatim: true, IP: "127.0.0.1"}}},
		{"non-ASCII URL", PageMeta{URL: "http://bücher.example/straße?q=ü&x=<y>", Host: "bücher.example", Location: "http://xn--bcher-kva.example/é"}},
		{"invalid UTF-8 and separators", PageMeta{URL: "http://a.example/\xff\xfe?\xe2\x80", Host: "a\u2028b\u2029c",
			Header: map[string][]string{"X-Bin": {"\xc3\x28", "ok\xed\xa0\x80"}, "X-\xff": {"v"}}}},
		{"control characters", PageMeta{URL: "http://a.example/\x00\x01\x1f\x7f", Host: "\b\f\n\r\t",
			Header: map[string][]string{"X-Ctl": {"a\x00b", "\x1b[0m"}}}},
		{"headers with quotes and HTML", PageMeta{URL: "http://a.example/", Header: map[string][]string{
			"Etag": {`W/"abc\"def"`}, "Link": {`<http://a.example/s.css>; rel="stylesheet" & more`}, "Set-Cookie": {"a=1", "b=2"}, "X-Back": {`C:\path\`}}}},
		{"empty fields", PageMeta{URL: "u", Header: map[string][]string{"X-Empty": {""}, "X-None": {}, "X-Nil": nil, "": {"empty name"}},
			Redirects: []string{}, Capture: &Capture{Request: []byte{}, Response: nil}}},
		{"empty header map", PageMeta{URL: "u", Header: map[string][]string{}}},
		{"many header names", PageMeta{URL: "u", Header: manyKeys}},
		{"negative numbers", PageMeta{URL: "u", Depth: -1, Status: -200, FetchedAt: -5, DurationMs: -1 << 62, Hops: -3, Embeds: -2}},
		{"redirect and references", PageMeta{URL: "http://a.example/old", Status: 301, Truncated: true, Redirects: []string{"http://a.example/0", ""},
			Location: "http://a.example/new", Hops: 2, Kind: KindSitemap, Embeds: 1, Under: "http://a.example/",
			BodyRef: &BodyRef{Bucket: "CRAWL_BODIES", Name: "page:0-1-2", Size: 20 << 20},
			Capture: &Capture{Request: []byte("GET / HTTP/1.1\r\n\r\n"), Response: []byte("HTTP/1.1 301 \xe9\r\n\r\n"), RawSize: 9 << 20,
				RawRef: &BodyRef{Bucket: "CRAWL_BODIES", Name: "raw:0-1-2", Size: 9 << 20}}}},
		{"recrawl full", PageMeta{URL: "u", Recrawl: &Recrawl{ETag: `"x"`, LastModified: "Mon, 02 Jan 2006 15:04:05 GMT", Digest: "ab", SimHash: "00ff",
			Interval: 3600000, Gone: 1, Fetches: 4, Changes: 2, NotModified: 1, LastFetch: 1790000000000, Due: 1790003600000}}},
		{"recrawl empty", PageMeta{URL: "u", Recrawl: &Recrawl{}}},
		{"recrawl interval only", PageMeta{URL: "u", Recrawl: &Recrawl{Interval: 7, Due: 9}}},
		{"every field set", everyField(t)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := tc.m
			if r := m.Rendered; r != nil {
				// PageMsg writes the length of the exchanges' list, which the payload carries.
				js, err := exchangesJSON(r)
				if err != nil {
					t.Fatal(err)
				}
				r.ExchangesSize = int64(len(js))
			}
			got, err := Marshal(&m)
			if err != nil {
				t.Fatal(err)
			}
			// A capture's heads travel in the payload; the metadata gives their lengths.
			wire := m
			if wire.Capture != nil {
				wire.Capture = wireCapture(wire.Capture)
			}
			if wire.Rendered != nil {
				wire.Rendered = wireRendered(wire.Rendered)
			}
			want, err := stdjson.Marshal(&wire)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != string(want) {
				t.Fatalf("Marshal wrote\n%s\nencoding/json writes\n%s", got, want)
			}
			old, err := goccy.Marshal(&wire)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != string(old) {
				t.Fatalf("Marshal wrote\n%s\ngoccy/go-json wrote\n%s", got, old)
			}
			msg, err := PageMsg("crawl.pages", &Page{Meta: m, Body: []byte("body")})
			if err != nil {
				t.Fatal(err)
			}
			if h := msg.Header.Get(MetaHeader); h != string(want) {
				t.Fatalf("PageMsg header\n%s\nwant\n%s", h, want)
			}
		})
	}
}

// everyField is a PageMeta with every field, nested ones too, set to a value that is not
// its zero: a field added to the wire type and forgotten by the hand-written encoder makes
// the comparison above fail.
func everyField(t *testing.T) PageMeta {
	t.Helper()
	var m PageMeta
	fill(t, reflect.ValueOf(&m).Elem(), 1)
	return m
}

func fill(t *testing.T, v reflect.Value, n int) {
	t.Helper()
	switch v.Kind() {
	case reflect.String:
		v.SetString(fmt.Sprintf("s%d<&>", n))
	case reflect.Int, reflect.Int64:
		v.SetInt(int64(n))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Float64:
		v.SetFloat(float64(n) + 0.5)
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			v.SetBytes([]byte{0, byte(n), 0xff})
			return
		}
		s := reflect.MakeSlice(v.Type(), 2, 2)
		for i := range 2 {
			fill(t, s.Index(i), n+i)
		}
		v.Set(s)
	case reflect.Map:
		mv := reflect.MakeMap(v.Type())
		for i := range 2 {
			k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
			fill(t, k, n+10+i)
			fill(t, e, n+i)
			mv.SetMapIndex(k, e)
		}
		v.Set(mv)
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		fill(t, p.Elem(), n)
		v.Set(p)
	case reflect.Struct:
		for i := range v.NumField() {
			fill(t, v.Field(i), n+i)
		}
	default:
		t.Fatalf("fill: no rule for %s; teach the test and appendPageMeta the new field", v.Type())
	}
}

func BenchmarkPageMeta(b *testing.B) {
	m := PageMeta{URL: "http://h0001.example/p/7", Host: "h0001.example", Depth: 3, Status: 200,
		Header:      map[string][]string{"Content-Type": {"text/html; charset=utf-8"}, "Content-Length": {"5123"}, "Date": {"Tue, 24 Nov 2026 04:00:00 GMT"}},
		ContentType: "text/html", Charset: "utf-8", FetchedAt: 1790000000123, DurationMs: 3, Lease: "0-17-9f3a",
		Capture: &Capture{Request: []byte("GET /p/7 HTTP/1.1\r\nHost: h0001.example\r\nUser-Agent: TrawlBot/1.0\r\nAccept: text/html\r\nAccept-Encoding: gzip\r\n\r\n"),
			Response: []byte("HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: 5123\r\nDate: Tue, 24 Nov 2026 04:00:00 GMT\r\n\r\n"), Verbatim: true, IP: "127.0.0.1"}}
	b.Run("appender", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = encodeMeta(&m)
		}
	})
	b.Run("goccy", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			d, _ := goccy.Marshal(&m)
			_ = string(d)
		}
	})
}
