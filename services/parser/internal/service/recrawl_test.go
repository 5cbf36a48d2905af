package service

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/trawl/trawl/services/parser/internal/scope"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/policy"
	"github.com/trawl/trawl/shared/recrawl"
	"github.com/trawl/trawl/shared/topology"
)

// TestJudgeRecrawl: the parser's verdict on a recrawled page and the schedule it writes.
func TestJudgeRecrawl(t *testing.T) {
	p := newProcessor(t, scope.Config{})
	p.recrawl = &recrawlPolicy{Settings: recrawl.Settings{Min: 10 * time.Second, Max: 100 * time.Second, Default: 40 * time.Second, NearDistance: 3}, shards: 4}
	// A text long enough that a date stamp moves few of its shingles.
	var sb strings.Builder
	for i := range 300 {
		fmt.Fprintf(&sb, "word%d ", i)
	}
	words := sb.String()
	html := func(text string) []byte { return []byte("<html><body><p>" + text + "</p></body></html>") }
	fetchedAt := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).UnixMilli()
	page := func(status int, ct string, body []byte, prev *crawlmsg.Recrawl) *crawlmsg.Page {
		return &crawlmsg.Page{Meta: crawlmsg.PageMeta{URL: "http://a.test/p", Host: "a.test", Status: status, ContentType: ct,
			FetchedAt: fetchedAt, Recrawl: prev, Header: map[string][]string{"Etag": {`"e2"`}}}, Body: body}
	}
	// The state a first fetch of the page leaves.
	first, err := p.process(page(200, "text/html", html(words), nil))
	if err != nil {
		t.Fatal(err)
	}
	p.judgeRecrawl(page(200, "text/html", html(words), nil), first)
	if first.verdict != recrawl.First || first.schedule == nil || first.schedule.State.ETag != `"e2"` {
		t.Fatalf("first fetch: verdict %s schedule %+v", first.verdict, first.schedule)
	}
	known := first.schedule.State

	for _, tc := range []struct {
		name      string
		page      *crawlmsg.Page
		verdict   recrawl.Verdict
		interval  time.Duration // 0: no schedule
		unchanged bool          // the document is the unchanged event
	}{
		{"same text", page(200, "text/html", html(words), &known), recrawl.Unchanged, 60 * time.Second, true},
		{"a date stamp changed", page(200, "text/html", html(words+" 2026-01-03"), &known), recrawl.Unchanged, 60 * time.Second, true},
		{"new text", page(200, "text/html", html("an entirely different article about sailing boats and the wind at sea today"), &known), recrawl.Changed, 20 * time.Second, false},
		{"304", page(304, "", nil, &known), recrawl.NotModified, 60 * time.Second, true},
		{"not HTML, same body", page(200, "application/pdf", []byte("%PDF-1"), &crawlmsg.Recrawl{Digest: sha("%PDF-1"), Interval: 40000}), recrawl.Unchanged, 60 * time.Second, false},
		{"not HTML, new body", page(200, "application/pdf", []byte("%PDF-2"), &crawlmsg.Recrawl{Digest: sha("%PDF-1"), Interval: 40000}), recrawl.Changed, 20 * time.Second, false},
		{"first 404", page(404, "text/html", []byte("gone"), &known), recrawl.Gone, 40 * time.Second, false},
		{"second 404", page(404, "text/html", []byte("gone"), &crawlmsg.Recrawl{Digest: known.Digest, Interval: 40000, Gone: 1}), recrawl.Gone, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := p.process(tc.page)
			if err != nil {
				t.Fatal(err)
			}
			p.judgeRecrawl(tc.page, o)
			if o.verdict != tc.verdict {
				t.Fatalf("verdict %s, want %s", o.verdict, tc.verdict)
			}
			if tc.interval == 0 {
				if o.schedule != nil {
					t.Fatalf("schedule %+v, want the URL forgotten", o.schedule)
				}
				return
			}
			if o.schedule == nil || time.Duration(o.schedule.State.Interval)*time.Millisecond != tc.interval {
				t.Fatalf("schedule %+v, want interval %s", o.schedule, tc.interval)
			}
			if tc.unchanged != (o.document != nil && o.document.Unchanged) {
				t.Fatalf("document %+v, want unchanged=%v", o.document, tc.unchanged)
			}
			if tc.verdict == recrawl.NotModified && (o.document.TextDigest != known.Digest || o.document.Text != "") {
				t.Fatalf("304 event %+v: want the last fingerprint and no content", o.document)
			}
			m, err := p.scheduleMsg(o, "sched:x")
			if err != nil || m.Subject != topology.ScheduleSubject(topology.ShardOf("a.test", 4), "http://a.test/p") {
				t.Fatalf("schedule message %v, %v", m, err)
			}
		})
	}
}

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// TestJudgeRecrawlBoundedByRules: a live rule's recrawl_min / recrawl_max bound the
// interval of the URLs it matches, and the process-wide bounds the others'.
func TestJudgeRecrawlBoundedByRules(t *testing.T) {
	d := func(v time.Duration) *policy.Duration { p := policy.Duration(v); return &p }
	var rules []policy.Stored
	for scope, r := range map[string]policy.Rule{
		"host:fast.test":            {RecrawlMax: d(15 * time.Second)},
		"host:slow.test":            {RecrawlMin: d(300 * time.Second)},
		"http://fast.test/archive/": {RecrawlMin: d(50 * time.Second), RecrawlMax: d(80 * time.Second)},
	} {
		sc, err := policy.ParseScope(scope)
		if err != nil {
			t.Fatal(err)
		}
		r.Scope = sc
		rules = append(rules, policy.Stored{Rule: r, Origin: policy.Origin{Version: 1}})
	}
	set, err := policy.Compile(rules, 1)
	if err != nil {
		t.Fatal(err)
	}
	p := newProcessor(t, scope.Config{})
	p.recrawl = &recrawlPolicy{Settings: recrawl.Settings{Min: 10 * time.Second, Max: 100 * time.Second, Default: 40 * time.Second, NearDistance: 3}, shards: 1}
	p.rules = func() *policy.Set { return set }
	prev := &crawlmsg.Recrawl{Digest: sha("%PDF-1"), Interval: 40000}
	for _, tc := range []struct {
		url      string
		body     string // the same body: unchanged (×1.5); another: changed (÷2)
		interval time.Duration
	}{
		{"http://other.test/a.pdf", "%PDF-1", 60 * time.Second},
		{"http://fast.test/a.pdf", "%PDF-1", 15 * time.Second},
		{"http://slow.test/a.pdf", "%PDF-2", 300 * time.Second},
		{"http://fast.test/archive/a.pdf", "%PDF-1", 60 * time.Second},
		{"http://fast.test/archive/b.pdf", "%PDF-2", 50 * time.Second},
	} {
		t.Run(tc.url, func(t *testing.T) {
			page := &crawlmsg.Page{Meta: crawlmsg.PageMeta{URL: tc.url, Status: 200, ContentType: "application/pdf",
				FetchedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).UnixMilli(), Recrawl: prev}, Body: []byte(tc.body)}
			o, err := p.process(page)
			if err != nil {
				t.Fatal(err)
			}
			p.judgeRecrawl(page, o)
			if o.schedule == nil || time.Duration(o.schedule.State.Interval)*time.Millisecond != tc.interval {
				t.Fatalf("schedule %+v, want interval %s", o.schedule, tc.interval)
			}
		})
	}
}
