package itest

import (
	"context"
	"testing"
	"time"

	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/testwait"
	"github.com/trawl/trawl/shared/topology"
)

const requisitesPage = `<!DOCTYPE html><html><head><title>Requisites</title>
<link rel="stylesheet" href="/css/site.css">
<script src="https://cdn.test/lib.js"></script>
</head><body><p>Words.</p>
<img src="/img/photo.jpg" srcset="/img/photo-2x.jpg 2x">
<a href="/next">next</a>
</body></html>`

const requisitesSheet = `@import url("theme.css");
body { background: url(../img/bg.png) }`

func embedMeta(url, ctype string, depth, embeds int) crawlmsg.PageMeta {
	m := htmlMeta(url, depth)
	m.ContentType, m.Kind, m.Embeds = ctype, crawlmsg.KindEmbed, embeds
	return m
}

// discoveredBy gathers what crawl.discovered holds, by the page it was found on.
func discoveredBy(msgs []discMsg) map[string][]crawlmsg.Discovered {
	out := map[string][]crawlmsg.Discovered{}
	for _, m := range msgs {
		for _, g := range m.batch.LinkGroups() {
			out[g.Source] = append(out[g.Source], g.URLs...)
		}
	}
	return out
}

// A page's requisites arrive on crawl.discovered as kind embed at the page's own depth, one
// embed hop further, beyond the depth limit and off the crawl's host; a style sheet fetched
// as a requisite gives its @import and url() one hop further still; at the hop cap nothing
// more; an image is never parsed; and no requisite publishes a document.
func TestRequisitesDiscovered(t *testing.T) {
	t.Parallel()
	s := newStack(t, map[string]string{"TRAWL_EMBEDS": "on", "TRAWL_MAX_DEPTH": "0"})
	s.run()

	s.publishPage(htmlMeta("http://site.test/", 0), requisitesPage)
	s.publishPage(embedMeta("http://site.test/css/site.css", "text/css", 0, 1), requisitesSheet)
	s.publishPage(embedMeta("http://site.test/css/theme.css", "text/css", 0, 2), requisitesSheet)
	s.publishPage(embedMeta("http://site.test/img/photo.jpg", "image/jpeg", 0, 1), `<img src="/not-an-image-tag">`)
	s.waitSettled()

	got := discoveredBy(s.takeDiscovered())
	emb := func(u string, hops int) crawlmsg.Discovered {
		return crawlmsg.Discovered{URL: u, Depth: 0, Via: crawlmsg.ViaLink, Kind: crawlmsg.KindEmbed, Embeds: hops}
	}
	want := map[string][]crawlmsg.Discovered{
		// The link to /next is past TRAWL_MAX_DEPTH=0; the requisites are not links.
		"http://site.test/": {emb("http://site.test/css/site.css", 1), emb("https://cdn.test/lib.js", 1),
			emb("http://site.test/img/photo.jpg", 1), emb("http://site.test/img/photo-2x.jpg", 1)},
		"http://site.test/css/site.css": {emb("http://site.test/css/theme.css", 2), emb("http://site.test/img/bg.png", 2)},
	}
	if len(got) != len(want) {
		t.Errorf("discovered from %v, want from the page and the first sheet only", keys(got))
	}
	for src, w := range want {
		if g := got[src]; !equalDiscovered(g, w) {
			t.Errorf("from %s:\n got %+v\nwant %+v", src, g, w)
		}
	}
	docs := s.docs()
	if len(docs) != 1 || docs[0].doc.URL != "http://site.test/" {
		var urls []string
		for _, d := range docs {
			urls = append(urls, d.doc.URL)
		}
		t.Errorf("documents of %v, want the page's alone", urls)
	}
	if v := s.metric(`trawl_parser_embeds_rejected_total{reason="embed_hops"}`); v != 2 {
		t.Errorf("embeds rejected for their hops = %v, want the capped sheet's 2", v)
	}
	if v := s.metric(`trawl_parser_requisite_pages_total{result="read"}`); v != 2 {
		t.Errorf("requisite pages read = %v, want the two sheets", v)
	}
}

func equalDiscovered(a, b []crawlmsg.Discovered) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].URL != b[i].URL || a[i].Depth != b[i].Depth || a[i].Kind != b[i].Kind || a[i].Embeds != b[i].Embeds {
			return false
		}
	}
	return true
}

// TRAWL_EMBEDS=auto finds requisites while the archiver's consumer exists, and only then:
// its creation and deletion count at once, not after the periodic look.
func TestRequisitesFollowTheArchiver(t *testing.T) {
	t.Parallel()
	s := newStack(t, map[string]string{"TRAWL_MAX_DEPTH": "0"}) // auto is the default
	s.run()

	requisites := func(url string) int {
		s.publishPage(htmlMeta(url, 0), requisitesPage)
		s.waitSettled()
		return len(discoveredBy(s.takeDiscovered())[url])
	}
	if n := requisites("http://site.test/before"); n != 0 {
		t.Fatalf("%d requisites discovered with no archiver, want none", n)
	}
	if v := s.metric("trawl_parser_embeds_on"); v != 0 {
		t.Fatalf("trawl_parser_embeds_on = %v with no archiver", v)
	}

	ctx := testwait.Context(t)
	cfgT := topology.StageTimings{AckWait: time.Second, MaxDeliver: -1}
	if _, err := s.js.CreateOrUpdateConsumer(ctx, topology.StreamPages, topology.ArchiverConsumer(cfgT)); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 10*time.Second, "requisites on once the archiver's consumer exists", func() bool {
		return s.metric("trawl_parser_embeds_on") == 1
	})
	if n := requisites("http://site.test/archived"); n != 4 {
		t.Errorf("%d requisites discovered with an archiver, want the page's 4", n)
	}

	if err := s.js.DeleteConsumer(context.WithoutCancel(ctx), topology.StreamPages, topology.ConsumerArchiver); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 10*time.Second, "requisites off once the archiver's consumer is gone", func() bool {
		return s.metric("trawl_parser_embeds_on") == 0
	})
	if n := requisites("http://site.test/after"); n != 0 {
		t.Errorf("%d requisites discovered after the archiver left, want none", n)
	}
}
