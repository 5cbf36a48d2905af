package service

import (
	"reflect"
	"testing"
	"time"

	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/robots"
)

func TestSitemapsOf(t *testing.T) {
	sm := func(u string) crawlmsg.Discovered {
		return crawlmsg.Discovered{URL: u, Via: crawlmsg.ViaSitemap, Kind: crawlmsg.KindSitemap, Under: "https://a.example/"}
	}
	for _, tc := range []struct {
		name       string
		status     int
		body       string
		want       []crawlmsg.Discovered
		fromRobots bool
	}{
		{
			name:       "named by robots.txt, another host's included (cross-submission)",
			status:     200,
			body:       "User-agent: *\nDisallow: /private/\nSitemap: https://a.example/sitemap_index.xml\nsitemap: https://CDN.example/a/sitemap.xml.gz\nSitemap: https://a.example/sitemap_index.xml\n",
			want:       []crawlmsg.Discovered{sm("https://a.example/sitemap_index.xml"), sm("https://cdn.example/a/sitemap.xml.gz")},
			fromRobots: true,
		},
		{
			name:       "a relative Sitemap line is read against robots.txt",
			status:     200,
			body:       "Sitemap: /maps/one.xml\n",
			want:       []crawlmsg.Discovered{sm("https://a.example/maps/one.xml")},
			fromRobots: true,
		},
		{name: "none named: the host's /sitemap.xml", status: 200, body: "User-agent: *\nDisallow:\n", want: []crawlmsg.Discovered{sm("https://a.example/sitemap.xml")}},
		{name: "robots.txt 404: the host's /sitemap.xml", status: 404, want: []crawlmsg.Discovered{sm("https://a.example/sitemap.xml")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := robots.NewEntry("trawl", tc.status, []byte(tc.body), robots.DefaultMaxBytes, time.Now())
			got, from := sitemapsOf("https://a.example", e)
			if !reflect.DeepEqual(got, tc.want) || from != tc.fromRobots {
				t.Fatalf("sitemapsOf = %+v, %v; want %+v, %v", got, from, tc.want, tc.fromRobots)
			}
		})
	}
}
