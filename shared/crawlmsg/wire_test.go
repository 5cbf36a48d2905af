package crawlmsg

import (
	stdjson "encoding/json"
	"reflect"
	"testing"
)

// The codec behind Marshal and Unmarshal is not encoding/json, but taps and tools read the
// streams with encoding/json: every wire type must encode to the bytes encoding/json
// writes, and decode what it writes to the same value.
func TestWireMatchesEncodingJSON(t *testing.T) {
	tests := []struct {
		name string
		v    any
		new  func() any
	}{
		{"discovered", &DiscoveredBatch{Source: "http://a.example/x?q=<b>&c", URLs: []Discovered{
			{URL: "http://b.example/", Depth: 2, Via: ViaLink}, {URL: "http://c.example/é", Depth: 1, Via: ViaRedirect, Hops: 2}}},
			func() any { return new(DiscoveredBatch) }},
		{"frontier", &FrontierBatch{Source: "http://a.example/", URLs: []Discovered{{URL: "http://b.example/", Depth: 2}}},
			func() any { return new(FrontierBatch) }},
		{"discovered groups", &DiscoveredBatch{Groups: []LinkGroup{{Source: "http://a.example/", URLs: []Discovered{{URL: "http://b.example/", Depth: 2}}},
			{URLs: []Discovered{{URL: "http://c.example/", Via: ViaSeed}}}}},
			func() any { return new(DiscoveredBatch) }},
		{"frontier groups", &FrontierBatch{Groups: []LinkGroup{{Source: "http://a.example/", URLs: []Discovered{{URL: "http://b.example/"}}},
			{Source: "http://x.example/", URLs: []Discovered{{URL: "http://y.example/", Depth: 3}}}}},
			func() any { return new(FrontierBatch) }},
		{"task", &FetchTask{Shard: 3, Host: "a.example", URL: "http://a.example/p?x=1&y=2", Depth: 4, Hops: 1, Attempt: 2, Lease: "3-99-ab12", Deadline: 1790000000123},
			func() any { return new(FetchTask) }},
		{"task batch", &TaskBatch{Tasks: []FetchTask{{Shard: 3, Host: "a.example", URL: "http://a.example/", Lease: "3-1-ab", Deadline: 1790000000123},
			{Shard: 3, Host: "b.example", URL: "http://b.example/?a=1&b=<2>", Depth: 1, Attempt: 1, Lease: "3-2-ab", Deadline: 1790000000123}}},
			func() any { return new(TaskBatch) }},
		{"outcome", &Outcome{Shard: 1, Host: "a.example", URL: "http://a.example/", Lease: "1-2-3", Attempt: 1, Kind: OutcomeFetched,
			Requested: true, Status: 503, StartedAt: 1790000000000, DurationMs: 1234, Bytes: 99, CrawlDelay: 1.5, RetryAfter: 0.25,
			Location: "https://a.example/", Error: `dial "x": <refused>`, Permanent: true},
			func() any { return new(Outcome) }},
		{"page meta", &PageMeta{URL: "http://a.example/", Host: "a.example", Depth: 1, Status: 200,
			Header:      map[string][]string{"Content-Type": {"text/html; charset=utf-8"}, "Set-Cookie": {"a=1", "b=2"}, "X-Empty": {""}},
			ContentType: "text/html", Charset: "utf-8", FetchedAt: 1790000000000, DurationMs: 5, Truncated: true,
			Redirects: []string{"http://a.example/old"}, Location: "http://a.example/new", Hops: 1, Lease: "0-1-2",
			BodyRef: &BodyRef{Bucket: "CRAWL_BODIES", Name: "page:0-1-2", Size: 20 << 20},
			// The wire form: the heads' lengths, their octets in the payload (DecodePage).
			Capture: &Capture{RequestSize: 35, ResponseSize: 28,
				Verbatim: true, IP: "192.0.2.1", RawSize: 9 << 20, RawRef: &BodyRef{Bucket: "CRAWL_BODIES", Name: "raw:0-1-2", Size: 9 << 20}}},
			func() any { return new(PageMeta) }},
		{"document", &Document{URL: "http://a.example/", Host: "a.example", Depth: 1, Status: 200, FetchedAt: 17, ContentType: "text/html",
			Title: "T & <t>", Description: "d\u2028e", Lang: "de", Text: "Grüße \"quoted\" \\ \t tab", Canonical: "http://a.example/c",
			Links:   []Link{{URL: "http://b.example/", Text: "b", Rel: "nofollow", Tag: "a", NoFollow: true}},
			NoIndex: true, NoFollow: true, Digest: "ab", Truncated: true, TextDigest: "cd", SimHash: "00ff",
			DuplicateOf: "http://z.example/", NearDuplicateOf: "http://y.example/", Distance: 3},
			func() any { return new(Document) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Marshal(tc.v)
			if err != nil {
				t.Fatal(err)
			}
			want, err := stdjson.Marshal(tc.v)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != string(want) {
				t.Fatalf("Marshal wrote\n%s\nencoding/json writes\n%s", got, want)
			}
			back := tc.new()
			if err := Unmarshal(want, back); err != nil {
				t.Fatalf("Unmarshal of encoding/json's bytes: %v", err)
			}
			if !reflect.DeepEqual(back, tc.v) {
				t.Fatalf("decoded %+v, want %+v", back, tc.v)
			}
		})
	}
}

// A decoder must never take a service down: whatever the bytes, Unmarshal returns.
func FuzzUnmarshal(f *testing.F) {
	for _, s := range []string{`{"v":1,"url":"http://a/","host":"a","lease":"l"}`, `{"v":1,"urls":[{"url":"x"}]}`, `{`, `[`, `{"v":1e999}`, "\x00"} {
		f.Add([]byte(s))
	}
	for _, s := range []string{`{"v":2,"outcomes":[{"host":"a","lease":"l","kind":"fetched"}]}`, `{"v":2,"outcomes":[null,1]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, v := range []any{new(DiscoveredBatch), new(FetchTask), new(Outcome), new(PageMeta), new(Document)} {
			_ = Unmarshal(data, v)
		}
		_, _, _ = DecodeOutcomes(data)
	})
}
