package itest

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/devstack/warccheck"
	"github.com/trawl/trawl/services/archiver/internal/warc"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/digestindex"
)

const cssHead = "Content-Type: text/css\r\n"

func (s *stack) redis() *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: s.rs.Addr()})
	s.t.Cleanup(func() { rdb.Close() })
	return rdb
}

// checked reads the stack's archive back with the independent checker.
func (s *stack) checked() *warccheck.Archive {
	s.t.Helper()
	a, err := warccheck.Check(s.dir)
	if err != nil {
		s.t.Fatalf("the archive does not read back:\n%v", err)
	}
	return a
}

// wantRevisitOf fails unless url's only capture is an identical-payload revisit of
// orig (URI, date, and record id when want is a record of this set).
func wantRevisitOf(t *testing.T, caps map[string][]*warccheck.Record, url, origURI string, origDate time.Time, origID string) {
	t.Helper()
	rs := caps[url]
	if len(rs) != 1 || rs[0].Get("WARC-Type") != "revisit" {
		t.Errorf("%s: %d captures (first %q), want one revisit", url, len(rs), typeOf(rs))
		return
	}
	r := rs[0]
	if r.Get("WARC-Profile") != warc.ProfileIdenticalPayload || r.Get("WARC-Refers-To-Target-URI") != origURI ||
		r.Get("WARC-Refers-To-Date") != warc.Date(origDate) || r.Get("WARC-Refers-To") != origID {
		t.Errorf("%s: revisit refers to %q at %q (record %q), want %q at %q (record %q)", url,
			r.Get("WARC-Refers-To-Target-URI"), r.Get("WARC-Refers-To-Date"), r.Get("WARC-Refers-To"), origURI, warc.Date(origDate), origID)
	}
}

func typeOf(rs []*warccheck.Record) string {
	if len(rs) == 0 {
		return ""
	}
	return rs[0].Get("WARC-Type")
}

// A payload already archived under another URL is a revisit of that capture, whether the
// original is in the same batch or was stored by an earlier one, and the same URL again
// is served by the same index; the bytes saved are counted for the crawl.
func TestDedupAcrossURLs(t *testing.T) {
	s := newStack(t, nil)
	stop := s.start()
	css := []byte("body { margin: 0 }\n/* one stylesheet served from many paths */\n")
	first := exchange("http://a.example/static/site.css", 200, cssHead, css, false)
	t0 := time.Date(2026, 3, 4, 5, 6, 7, 890e6, time.UTC)
	first.Meta.FetchedAt = t0.UnixMilli()
	s.publish(first, "d1")
	s.publish(exchange("http://mirror.example/site.css", 200, cssHead, css, false), "d2") // same batch
	s.waitArchived()
	s.publish(exchange("http://a.example/site.css?v=2", 200, cssHead, css, false), "d3") // later batch
	s.publish(exchange("http://a.example/static/site.css", 200, cssHead, css, false), "d4")
	s.publish(exchange("http://a.example/other.css", 200, cssHead, []byte("p { color: red }"), false), "d5")
	// Empty bodies are all alike, but a revisit of one would save nothing.
	s.publish(exchange("http://a.example/empty1", 200, cssHead, nil, false), "d6")
	s.publish(exchange("http://a.example/empty2", 200, cssHead, nil, false), "d7")
	s.waitArchived()
	stop()

	a := s.checked()
	caps := capturesByURL(a)
	orig := caps["http://a.example/static/site.css"]
	if len(orig) != 2 || orig[0].Get("WARC-Type") != "response" {
		t.Fatalf("the first capture of the stylesheet is no response (%d captures)", len(orig))
	}
	id := orig[0].Get("WARC-Record-ID")
	for _, u := range []string{"http://mirror.example/site.css", "http://a.example/site.css?v=2"} {
		wantRevisitOf(t, caps, u, "http://a.example/static/site.css", t0, id)
	}
	wantRevisitOf(t, map[string][]*warccheck.Record{"same URL": orig[1:]}, "same URL", "http://a.example/static/site.css", t0, id)
	for _, u := range []string{"http://a.example/other.css", "http://a.example/empty1", "http://a.example/empty2"} {
		if got := typeOf(caps[u]); got != "response" {
			t.Errorf("%s: %s, want a response (another payload, or an empty one)", u, got)
		}
	}
	if n, err := warccheck.ResolveRevisits(a); err != nil || n != 3 {
		t.Errorf("replay resolution: %d revisits resolved, want 3: %v", n, err)
	}
	st, err := s.redis().HGetAll(context.Background(), digestindex.Stats("trawl")).Result()
	if err != nil || st[digestindex.StatRevisits] != "3" || st[digestindex.StatSavedBytes] != strconv.Itoa(3*len(css)) {
		t.Errorf("dedup counters %v (%v), want 3 revisits and %d octets saved", st, err, 3*len(css))
	}
}

// With TRAWL_ARCHIVE_REVISITS=false every capture is archived in full and Redis is not
// written.
func TestDedupOff(t *testing.T) {
	s := newStack(t, map[string]string{"TRAWL_ARCHIVE_REVISITS": "false"})
	stop := s.start()
	css := []byte("body { margin: 0 }")
	s.publish(exchange("http://a.example/1.css", 200, cssHead, css, false), "o1")
	s.publish(exchange("http://a.example/2.css", 200, cssHead, css, false), "o2")
	s.waitArchived()
	stop()
	for u, rs := range capturesByURL(s.checked()) {
		if typeOf(rs) != "response" {
			t.Errorf("%s: %s, want a response", u, typeOf(rs))
		}
	}
	if keys, err := s.redis().Keys(context.Background(), "*").Result(); err != nil || len(keys) != 0 {
		t.Errorf("Redis holds %v (%v), want nothing", keys, err)
	}
}

// Crawls naming the same TRAWL_ARCHIVE_DEDUP_INDEX on one Redis share it: a second crawl,
// a new archiver process with its own prefix and directory, writes a revisit of a payload
// the first crawl archived; a crawl with its own index does not.
func TestDedupSharedAcrossCrawls(t *testing.T) {
	one := newStack(t, map[string]string{"TRAWL_REDIS_PREFIX": "crawl1", "TRAWL_ARCHIVE_DEDUP_INDEX": "webarchive"})
	js := []byte("console.log('a script served by every mirror');\n")
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 600e6, time.UTC)
	p := exchange("http://a.example/app.js", 200, "Content-Type: text/javascript\r\n", js, false)
	p.Meta.FetchedAt = t0.UnixMilli()
	stop := one.start()
	one.publish(p, "s1")
	one.waitArchived()
	stop()
	a1 := one.checked()

	crawl := func(prefix, index string) (*stack, *warccheck.Archive) {
		s := newStack(t, map[string]string{"TRAWL_REDIS_URL": one.rs.URL(), "TRAWL_REDIS_PREFIX": prefix, "TRAWL_ARCHIVE_DEDUP_INDEX": index})
		stop := s.start()
		s.publish(exchange("http://b.example/js/app.js", 200, "Content-Type: text/javascript\r\n", js, false), "s2")
		s.waitArchived()
		stop()
		return s, s.checked()
	}
	_, a2 := crawl("crawl2", "webarchive")
	wantRevisitOf(t, capturesByURL(a2), "http://b.example/js/app.js", "http://a.example/app.js", t0, capturesByURL(a1)["http://a.example/app.js"][0].Get("WARC-Record-ID"))
	if n, err := warccheck.ResolveRevisits(a1, a2); err != nil || n != 1 {
		t.Errorf("replay resolution over both crawls: %d resolved, want 1: %v", n, err)
	}
	_, a3 := crawl("crawl3", "")
	if got := typeOf(capturesByURL(a3)["http://b.example/js/app.js"]); got != "response" {
		t.Errorf("a crawl with its own index wrote a %s, want a response", got)
	}
	st, err := one.redis().HGet(context.Background(), digestindex.Stats("crawl2"), digestindex.StatSavedBytes).Result()
	if err != nil || st != strconv.Itoa(len(js)) {
		t.Errorf("crawl2 saved %q octets (%v), want %d", st, err, len(js))
	}
}

// An index seeded from CDXJ lines makes identical payloads revisits of the captures they
// name: pywb's form (a fixture: bare and prefixed digests; revisits, other statuses and
// other digest algorithms skipped) and the archiver's own, whose original the replay
// check then finds. Forgetting a file's CDXJ makes the payload a full capture again.
func TestDedupSeededFromCDXJ(t *testing.T) {
	ctx := context.Background()
	old := newStack(t, map[string]string{"TRAWL_ARCHIVE_REVISITS": "false"})
	body := []byte("<html><body>archived by an earlier crawl</body></html>")
	t0 := time.Date(2025, 12, 24, 10, 11, 12, 345e6, time.UTC)
	p := exchange("http://old.example/page", 200, "Content-Type: text/html\r\n", body, false)
	p.Meta.FetchedAt = t0.UnixMilli()
	stop := old.start()
	old.publish(p, "e1")
	old.waitArchived()
	stop()
	aOld := old.checked()

	s := newStack(t, nil)
	idx := digestindex.New(s.redis(), "trawl")
	seed := func(path string) digestindex.LoadStats {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		st, err := idx.Seed(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	if st := seed("testdata/seeded.cdxj"); st != (digestindex.LoadStats{Captures: 2, Changed: 2, Skipped: 3, Bad: 1}) {
		t.Errorf("seeding the pywb fixture: %+v", st)
	}
	cdxjs, _ := filepath.Glob(filepath.Join(old.dir, "*.cdxj"))
	if len(cdxjs) != 1 {
		t.Fatalf("CDXJ files of the earlier crawl: %v", cdxjs)
	}
	if st := seed(cdxjs[0]); st.Changed != 1 {
		t.Errorf("seeding the archiver's own CDXJ: %+v", st)
	}

	stop = s.start()
	s.publish(exchange("http://new.example/theme.css", 200, cssHead, []byte("body { color: teal }\n"), false), "f1")
	s.publish(exchange("http://new.example/app.js", 200, "Content-Type: text/javascript\r\n", []byte("console.log('seeded');\n"), false), "f2")
	s.publish(exchange("http://new.example/page", 200, "Content-Type: text/html\r\n", body, false), "f3")
	s.waitArchived()
	stop()
	caps := capturesByURL(s.checked())
	wantRevisitOf(t, caps, "http://new.example/theme.css", "http://old.example/style.css", time.Date(2024, 3, 5, 6, 7, 8, 0, time.UTC), "")
	wantRevisitOf(t, caps, "http://new.example/app.js", "http://old.example/app.js", time.Date(2024, 3, 5, 6, 7, 9, 0, time.UTC), "")
	// The CDXJ timestamp has seconds: the revisit names the second, which replay resolves.
	wantRevisitOf(t, caps, "http://new.example/page", "http://old.example/page", t0.Truncate(time.Second), "")
	if n, err := warccheck.ResolveRevisits(aOld, s.checked()); n != 1 {
		t.Errorf("replay resolution: %d resolved, want the revisit of the earlier crawl's page: %v", n, err)
	}

	f, err := os.Open(cdxjs[0])
	if err != nil {
		t.Fatal(err)
	}
	st, err := idx.ForgetCDXJ(ctx, f)
	f.Close()
	if err != nil || st.Changed != 1 {
		t.Fatalf("forgetting the earlier crawl's file: %+v, %v", st, err)
	}
	stop = s.start()
	s.publish(exchange("http://new.example/page2", 200, "Content-Type: text/html\r\n", body, false), "f4")
	s.waitArchived()
	stop()
	if got := typeOf(capturesByURL(s.checked())["http://new.example/page2"]); got != "response" {
		t.Errorf("after its original's file was forgotten the payload is a %s, want a response", got)
	}
}

// A 304 refers to the URL's previous fetch, which the page's recrawl state dates (the
// digest index, keyed by payload, cannot: a 304 has none).
func TestNotModifiedRefersToPreviousFetch(t *testing.T) {
	s := newStack(t, nil)
	stop := s.start()
	prev := time.Date(2026, 2, 3, 4, 5, 6, 700e6, time.UTC)
	nm := exchange("http://a.example/nm", 304, "ETag: \"v1\"\r\n", nil, false)
	nm.Meta.Recrawl = &crawlmsg.Recrawl{ETag: `"v1"`, LastFetch: prev.UnixMilli()}
	s.publish(nm, "n1")
	s.publish(exchange("http://a.example/nm-first", 304, "ETag: \"v1\"\r\n", nil, false), "n2")
	s.waitArchived()
	stop()
	caps := capturesByURL(s.checked())
	for _, c := range []struct {
		url, uri, date string
	}{
		{"http://a.example/nm", "http://a.example/nm", warc.Date(prev)},
		{"http://a.example/nm-first", "", ""}, // no recrawl state: nothing to refer to
	} {
		rs := caps[c.url]
		if len(rs) != 1 || rs[0].Get("WARC-Profile") != warc.ProfileServerNotModified ||
			rs[0].Get("WARC-Refers-To-Target-URI") != c.uri || rs[0].Get("WARC-Refers-To-Date") != c.date {
			t.Errorf("%s: %d captures (%s), want a server-not-modified revisit referring to %q at %q", c.url, len(rs), typeOf(rs), c.uri, c.date)
		}
	}
}
