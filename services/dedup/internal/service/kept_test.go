package service

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/trawl/trawl/shared/crawlmsg"
)

func TestKeptRoundTrip(t *testing.T) {
	prio := 0.8
	for _, tc := range []struct {
		name   string
		source string
		d      crawlmsg.Discovered
	}{
		{"link", "http://a.test/", crawlmsg.Discovered{URL: "http://b.test/x", Depth: 3, Via: crawlmsg.ViaLink}},
		{"seed, no source", "", crawlmsg.Discovered{URL: "http://b.test/", Via: crawlmsg.ViaSeed}},
		{"redirect", "http://a.test/old", crawlmsg.Discovered{URL: "http://a.test/new", Depth: 2, Via: crawlmsg.ViaRedirect, Hops: 4}},
		{"requisite", "http://a.test/", crawlmsg.Discovered{URL: "http://a.test/s.css", Depth: 1, Kind: crawlmsg.KindEmbed, Embeds: 2}},
		{"sitemap entry", "http://a.test/sitemap.xml", crawlmsg.Discovered{URL: "http://a.test/p", Via: crawlmsg.ViaSitemap, Lastmod: 1_700_000_000, Priority: &prio}},
		{"sitemap", "http://a.test/robots.txt", crawlmsg.Discovered{URL: "http://a.test/sitemap.xml", Kind: crawlmsg.KindSitemap, Under: "http://a.test/"}},
		{"recrawl", "", crawlmsg.Discovered{URL: "http://a.test/p", Recrawl: &crawlmsg.Recrawl{ETag: `"x"`, LastModified: "Mon"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := appendKept(nil, tc.source, tc.d)
			src, d, err := parseKept(b)
			if err != nil {
				t.Fatal(err)
			}
			if src != tc.source || !reflect.DeepEqual(d, tc.d) {
				t.Errorf("got %q %+v, want %q %+v", src, d, tc.source, tc.d)
			}
			for n := range b {
				if _, _, err := parseKept(b[:n]); err == nil {
					t.Fatalf("entry cut at %d of %d: no error", n, len(b))
				} else if !errors.Is(err, errKeptShort) && tc.d.Recrawl == nil && tc.d.Priority == nil {
					t.Fatalf("entry cut at %d: %v, want errKeptShort", n, err)
				}
			}
		})
	}
}

// BenchmarkKept and BenchmarkKeptJSON compare the entry's encoding with JSON, which it
// replaces because it is built for every URL that goes to Redis.
func BenchmarkKept(b *testing.B) {
	d := crawlmsg.Discovered{URL: "http://host-017.bench.test/p/1234?q=5", Depth: 3, Via: crawlmsg.ViaLink}
	buf := make([]byte, 0, 256)
	for b.Loop() {
		buf = appendKept(buf[:0], "http://host-017.bench.test/p/77", d)
	}
}

func BenchmarkKeptJSON(b *testing.B) {
	d := crawlmsg.Discovered{URL: "http://host-017.bench.test/p/1234?q=5", Depth: 3, Via: crawlmsg.ViaLink}
	for b.Loop() {
		if _, err := json.Marshal(crawlmsg.LinkGroup{Source: "http://host-017.bench.test/p/77", URLs: []crawlmsg.Discovered{d}}); err != nil {
			b.Fatal(err)
		}
	}
}
