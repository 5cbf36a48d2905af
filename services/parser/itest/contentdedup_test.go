package itest

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/trawl/trawl/devstack/redisproc"
	"github.com/trawl/trawl/services/parser/internal/simhash"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/testwait"
)

// Pages of the content-dedup tests. The exact copy has other markup, title, scripts and
// styles, but the same visible text; the near copy has one word changed; the soft 404s
// are too short for a near-duplicate lookup but still exact duplicates of each other.
func contentDupPages(t *testing.T) (orig, copyPage, near, unrelated string) {
	light := fixtureText(t, "lighthouse.txt")
	text := edited(light, 300, -1, "")
	w := strings.Fields(text)
	orig = `<!DOCTYPE html><html><head><title>Lighthouses</title><style>p{margin:0}</style></head><body><p>` +
		text + `</p><script>track()</script></body></html>`
	copyPage = `<html><head><title>Mirror: lighthouse history</title><script src="/ads.js"></script></head>
<body><div class="content"><!-- mirrored --><h1>` + strings.Join(w[:5], " ") + `</h1>
<p>` + strings.Join(w[5:150], "\n") + `</p><p>` + strings.Join(w[150:], "  ") + `</p></div><noscript>Enable JavaScript</noscript></body></html>`
	near = `<html><body><p>` + edited(light, 300, 148, "beacon") + `</p></body></html>`
	unrelated = `<html><body><article>` + fixtureText(t, "sourdough.txt") + `</article></body></html>`
	return orig, copyPage, near, unrelated
}

const soft404 = `<html><head><title>Not found</title></head><body><p>Sorry, this page does not exist.</p></body></html>`

func TestContentDedup(t *testing.T) {
	t.Parallel()
	s := newStack(t, nil)
	s.run()
	orig, copyPage, near, unrelated := contentDupPages(t)
	// The original first, then the copies, as a crawl would find them. Batches are parsed
	// concurrently (TRAWL_PARSE_INFLIGHT), so which of two pages in flight together is
	// the original is a race; each page waits for the one before it to be parsed.
	pages := []struct {
		meta crawlmsg.PageMeta
		body string
	}{
		{htmlMeta("http://lights.test/history", 1), orig},
		{htmlMeta("http://mirror.test/lighthouses", 2), copyPage},
		{htmlMeta("http://blog.test/lights-edited", 2), near},
		{htmlMeta("http://bake.test/sourdough", 1), unrelated},
		{htmlMeta("http://a.test/missing", 1), soft404},
		{htmlMeta("http://b.test/gone", 1), soft404},
		{htmlMeta("http://blank.test/", 0), `<title>Nothing visible</title><script>app()</script>`},
		// The original fetched again (a new page message for the same URL): not a
		// duplicate of itself.
		{htmlMeta("http://lights.test/history", 1), orig},
	}
	for _, p := range pages {
		s.publishPage(p.meta, p.body)
		s.waitSettled()
	}
	docs := s.docs()
	if len(docs) != 8 {
		t.Fatalf("got %d documents, want 8", len(docs))
	}
	fp := simhash.Of(edited(fixtureText(t, "lighthouse.txt"), 300, -1, ""))
	type flags struct{ dup, near string }
	want := []struct {
		url  string
		want flags
		dist int
	}{
		{"http://lights.test/history", flags{}, 0},
		{"http://mirror.test/lighthouses", flags{dup: "http://lights.test/history"}, 0},
		{"http://blog.test/lights-edited", flags{near: "http://lights.test/history"}, 3},
		{"http://bake.test/sourdough", flags{}, 0},
		{"http://a.test/missing", flags{}, 0},
		{"http://b.test/gone", flags{dup: "http://a.test/missing"}, 0},
		{"http://blank.test/", flags{}, 0},
		{"http://lights.test/history", flags{}, 0},
	}
	for i, w := range want {
		d := docs[i].doc
		if d.URL != w.url || d.DuplicateOf != w.want.dup || d.NearDuplicateOf != w.want.near || d.Distance != w.dist {
			t.Errorf("document %d: %s duplicate_of %q near_duplicate_of %q distance %d; want %s %+v distance %d",
				i, d.URL, d.DuplicateOf, d.NearDuplicateOf, d.Distance, w.url, w.want, w.dist)
		}
	}
	for _, i := range []int{0, 1, 7} {
		if d := docs[i].doc; d.TextDigest != fp.Digest || d.SimHash != simhash.Format(fp.SimHash) {
			t.Errorf("%s: text digest %s simhash %s, want %s %s", d.URL, d.TextDigest, d.SimHash, fp.Digest, simhash.Format(fp.SimHash))
		}
	}
	if docs[0].doc.Digest == docs[1].doc.Digest {
		t.Error("the exact copy has the same body digest: the test's markup should differ")
	}
	if d := docs[6].doc; d.TextDigest != "" || d.SimHash != "" {
		t.Errorf("blank page: text digest %q simhash %q", d.TextDigest, d.SimHash)
	}
	for series, want := range map[string]float64{
		`trawl_parser_duplicates_total{kind="exact"}`:                2,
		`trawl_parser_duplicates_total{kind="near"}`:                 1,
		`trawl_parser_near_dup_skipped_total`:                        2,
		`trawl_parser_dedup_check_failures_total`:                    0,
		`trawl_parser_dedup_buckets_full_total`:                      0,
		`trawl_parser_pages_total{result="parsed"}`:                  8,
		`trawl_parser_messages_terminated_total{reason="permanent"}`: 0,
	} {
		if got := s.metric(series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
	if s.metric(`trawl_parser_dedup_check_duration_seconds_count`) < 1 {
		t.Error("no duplicate check timed")
	}
	// The index names the original under the default prefix.
	ctx := context.Background()
	if first, err := s.rdb.HGet(ctx, "trawl:{content}:exact:"+fp.Digest[:4], fp.Digest[4:20]).Result(); err != nil || first != "http://lights.test/history" {
		t.Errorf("exact key = %q, %v", first, err)
	}
}

func TestContentDedupOff(t *testing.T) {
	t.Parallel()
	// Nothing listens on port 1: with content dedup and the site policies off the parser
	// must not need Redis at all.
	s := newStack(t, map[string]string{"TRAWL_CONTENT_DEDUP": "false", "TRAWL_PARSER_POLICY": "false", "TRAWL_REDIS_URL": "redis://127.0.0.1:1/0"})
	s.run()
	resp, err := http.Get("http://" + s.svc.Addr() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/readyz = %d without Redis and with content dedup off", resp.StatusCode)
	}
	orig, _, _, _ := contentDupPages(t)
	s.publishPage(htmlMeta("http://lights.test/history", 1), orig)
	s.publishPage(htmlMeta("http://mirror.test/history", 1), orig)
	s.waitSettled()
	docs := s.docs()
	if len(docs) != 2 {
		t.Fatalf("got %d documents", len(docs))
	}
	for _, d := range docs {
		if d.doc.DuplicateOf != "" || d.doc.NearDuplicateOf != "" || d.doc.TextDigest == "" || len(d.doc.SimHash) != 16 {
			t.Errorf("%s: %+v: want fingerprints and no flags", d.doc.URL, d.doc)
		}
	}
	if got := s.metric(`trawl_parser_duplicates_total{kind="exact"}`); got != 0 {
		t.Errorf("exact duplicates = %v with content dedup off", got)
	}
}

func TestContentDedupSurvivesRedisOutage(t *testing.T) {
	t.Parallel()
	// AOF with fsync always, so the index survives the restart.
	s := newStackWith(t, nil, redisproc.Options{AppendOnly: true, FsyncAlways: true})
	s.run()
	orig, copyPage, _, _ := contentDupPages(t)
	s.publishPage(htmlMeta("http://lights.test/history", 1), orig)
	s.waitSettled()

	if err := s.rs.Stop(); err != nil {
		t.Fatal(err)
	}
	testwait.EventuallyState(t, waitFor, "/readyz to report Redis down", func() (bool, string) {
		resp, err := http.Get("http://" + s.svc.Addr() + "/readyz")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusServiceUnavailable, resp.Status
	})
	s.publishPage(htmlMeta("http://mirror.test/lighthouses", 2), copyPage)
	if err := s.rs.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	s.waitSettled()
	docs := s.docs()
	if len(docs) != 2 {
		t.Fatalf("got %d documents, want 2", len(docs))
	}
	if d := docs[1].doc; d.URL != "http://mirror.test/lighthouses" || d.DuplicateOf != "http://lights.test/history" {
		t.Errorf("copy after the outage: %s duplicate_of %q", d.URL, d.DuplicateOf)
	}
	if got := s.metric(`trawl_parser_messages_terminated_total{reason="permanent"}`); got != 0 {
		t.Errorf("%v pages terminated during the outage", got)
	}
}
