package itest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/recrawl"
	"github.com/trawl/trawl/shared/testwait"
	"github.com/trawl/trawl/shared/topology"
)

// TestRecrawlSchedules: in adaptive mode every page's response leaves the URL a schedule
// in CRAWL_RECRAWL; a 304 becomes an unchanged event on crawl.docs; and a recrawled
// sitemap brings forward the schedule of a known URL it says changed since it was last
// read, leaving one that did not change alone.
func TestRecrawlSchedules(t *testing.T) {
	t.Parallel()
	s := newStack(t, map[string]string{"TRAWL_RECRAWL": "adaptive", "TRAWL_RECRAWL_MIN": "1s", "TRAWL_RECRAWL_DEFAULT": "1h", "TRAWL_RECRAWL_MAX": "48h"})
	s.run()
	ctx := testwait.Context(t)
	lookup := func(u string) recrawl.History {
		t.Helper()
		h, err := recrawl.Lookup(ctx, s.js, 0, u)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}

	now := time.Now()
	// Two known URLs, fetched two hours ago and due in a day.
	for _, u := range []string{"http://site.test/changed", "http://site.test/same"} {
		e := &crawlmsg.RecrawlEntry{URL: u, Depth: 1, State: crawlmsg.Recrawl{ETag: `"e"`, Interval: 86_400_000,
			LastFetch: now.Add(-2 * time.Hour).UnixMilli(), Due: now.Add(22 * time.Hour).UnixMilli()}}
		m, err := recrawl.Schedule(0, e, "")
		if err != nil {
			t.Fatal(err)
		}
		s.publish(m)
	}

	page := htmlMeta("http://site.test/new", 1)
	page.Header = map[string][]string{"Etag": {`"n1"`}}
	s.publishPage(page, "<html><body><p>"+strings.Repeat("words of a page ", 40)+"</p></body></html>")
	notMod := htmlMeta("http://site.test/unchanged", 1)
	notMod.Status, notMod.ContentType = 304, ""
	notMod.Recrawl = &crawlmsg.Recrawl{ETag: `"u"`, Digest: "abc", Interval: 3_600_000, LastFetch: now.Add(-time.Hour).UnixMilli()}
	s.publishPage(notMod, "")
	sm := sitemapMeta("http://site.test/sitemap.xml", "application/xml")
	sm.Recrawl = &crawlmsg.Recrawl{Digest: "x", Interval: 3_600_000, LastFetch: now.Add(-time.Hour).UnixMilli()}
	lastmod := func(d time.Duration) string { return now.Add(d).UTC().Format(time.RFC3339) }
	s.publishPage(sm, fmt.Sprintf(`<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">
<url><loc>http://site.test/changed</loc><lastmod>%s</lastmod></url>
<url><loc>http://site.test/same</loc><lastmod>%s</lastmod></url>
</urlset>`, lastmod(-30*time.Minute), lastmod(-3*time.Hour)))
	s.waitSettled()

	if h := lookup("http://site.test/new"); h.Where != "scheduled" || h.State.ETag != `"n1"` || h.State.Interval != 3_600_000 || h.State.Digest == "" {
		t.Errorf("first fetch schedule %+v, want the default interval with its validators and digest", h)
	}
	if h := lookup("http://site.test/unchanged"); h.Where != "scheduled" || h.State.Interval != 5_400_000 || h.State.NotModified != 1 || h.State.Digest != "abc" {
		t.Errorf("304 schedule %+v, want ×1.5 and the last digest kept", h)
	}
	if h := lookup("http://site.test/sitemap.xml"); h.Where != "scheduled" {
		t.Errorf("sitemap schedule %+v, want one: sitemaps are recrawled too", h)
	}
	if h := lookup("http://site.test/same"); h.Where != "scheduled" || h.State.Due != now.Add(22*time.Hour).UnixMilli() {
		t.Errorf("unchanged sitemap entry's schedule %+v, want it left alone", h)
	}
	// The changed one is due at once: the server moves it to its due subject.
	testwait.Eventually(t, 10*time.Second, "the changed URL due", func() bool {
		h := lookup("http://site.test/changed")
		return h.Where == "due" && h.State.ETag == `"e"` && h.State.Due <= time.Now().UnixMilli()
	})

	var unchanged []crawlmsg.Document
	for _, d := range s.docs() {
		if d.doc.Unchanged {
			unchanged = append(unchanged, d.doc)
		}
	}
	if len(unchanged) != 1 || unchanged[0].URL != notMod.URL || unchanged[0].Status != 304 || unchanged[0].TextDigest != "abc" {
		t.Errorf("unchanged events %+v, want the 304's alone", unchanged)
	}
	if n := s.streamMsgs(topology.StreamRecrawl); n != 5 {
		t.Errorf("CRAWL_RECRAWL holds %d messages, want one per URL (5)", n)
	}
}
