package itest

import (
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/devstack/natsembed"
	"github.com/trawl/trawl/devstack/redisproc"
	"github.com/trawl/trawl/services/parser/internal/service"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/recrawl"
	"github.com/trawl/trawl/shared/renderconf"
	"github.com/trawl/trawl/shared/testwait"
	"github.com/trawl/trawl/shared/topology"
)

// TestOfflineIsHandleBatch: the offline parser that BenchmarkPages measures produces, for
// one batch, exactly the messages HandleBatch publishes (documents, a render task,
// schedules, a schedule a sitemap brings forward, packed discovered links) and the same
// result per page, and keeps the same render decision for explain; it publishes nothing.
// Each runs on a redis-server of its own, so both see an empty content index.
func TestOfflineIsHandleBatch(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"TRAWL_RECRAWL": "adaptive", "TRAWL_RECRAWL_MIN": "1s", "TRAWL_RECRAWL_DEFAULT": "1h", "TRAWL_RECRAWL_MAX": "48h",
		"TRAWL_RENDER": "auto", "TRAWL_PARSE_BATCH": "16",
	}
	ns, rs := natsembed.StartT(t), redisproc.StartT(t, redisproc.Options{})
	s := newStackOn(t, ns, rs, env)
	ctx := testwait.Context(t)

	now := time.Now()
	// A known URL, due in a day, that the sitemap below says changed since.
	seed := &crawlmsg.RecrawlEntry{URL: "http://site.test/changed", Depth: 1, State: crawlmsg.Recrawl{Interval: 86_400_000,
		LastFetch: now.Add(-2 * time.Hour).UnixMilli(), Due: now.Add(22 * time.Hour).UnixMilli()}}
	sched, err := recrawl.Schedule(0, seed, "")
	if err != nil {
		t.Fatal(err)
	}
	s.publish(sched)

	words := "<p>" + strings.Repeat("words of a page long enough for a near duplicate check ", 20) + "</p>"
	home := htmlMeta("http://site.test/", 0)
	home.Lease = "lease-home"
	s.publishPage(home, linkPage)
	long := htmlMeta("http://site.test/long", 1)
	s.publishPage(long, "<html><body>"+words+`<a href="/other">other</a></body></html>`)
	copied := htmlMeta("http://site.test/copy", 1)
	s.publishPage(copied, "<html><body>"+words+"</body></html>")
	shell := htmlMeta("http://site.test/app", 1)
	shell.Lease = "lease-shell"
	s.publishPage(shell, shellPage)
	notMod := htmlMeta("http://site.test/unchanged", 1)
	notMod.Status, notMod.ContentType = 304, ""
	notMod.Recrawl = &crawlmsg.Recrawl{Digest: "abc", Interval: 3_600_000, LastFetch: now.Add(-time.Hour).UnixMilli()}
	s.publishPage(notMod, "")
	sm := sitemapMeta("http://site.test/sitemap.xml", "application/xml")
	sm.Recrawl = &crawlmsg.Recrawl{Digest: "x", Interval: 3_600_000, LastFetch: now.Add(-time.Hour).UnixMilli()}
	s.publishPage(sm, fmt.Sprintf(`<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">
<url><loc>http://site.test/changed</loc><lastmod>%s</lastmod></url>
<url><loc>http://site.test/fresh</loc></url>
</urlset>`, now.Add(-30*time.Minute).UTC().Format(time.RFC3339)))
	img := crawlmsg.PageMeta{URL: "http://site.test/logo.png", Host: "site.test", Depth: 1, Status: 200, ContentType: "image/png", FetchedAt: now.UnixMilli()}
	s.publishPage(img, "\x89PNG")
	bad := nats.NewMsg(topology.SubjectPages)
	bad.Header.Set(crawlmsg.MetaHeader, "not a page")
	s.publish(bad)
	const pages = 8

	// The batch as the consumer delivers it, and as Offline is given it.
	cons, err := s.js.Consumer(ctx, topology.StreamPages, topology.ConsumerParser)
	if err != nil {
		t.Fatal(err)
	}
	var delivered []jetstream.Msg
	for len(delivered) < pages {
		fb, err := cons.Fetch(pages-len(delivered), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range fb.Messages() {
			delivered = append(delivered, m)
		}
		if err := fb.Error(); err != nil {
			t.Fatalf("fetching the batch: %v after %d of %d pages", err, len(delivered), pages)
		}
	}
	ids := make([]string, pages)
	msgs := make([]*nats.Msg, pages)
	for i, m := range delivered {
		ids[i] = natsx.MsgID(m)
		msgs[i] = &nats.Msg{Subject: m.Subject(), Header: m.Headers(), Data: m.Data()}
	}

	// Everything either publishes on the pipeline's subjects, up to a marker sent after.
	sub, err := s.nc.SubscribeSync("crawl.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	published := func() []*nats.Msg {
		t.Helper()
		const end = "crawl.test-end"
		if err := s.nc.Publish(end, nil); err != nil {
			t.Fatal(err)
		}
		var out []*nats.Msg
		for {
			m, err := sub.NextMsg(waitFor)
			if err != nil {
				t.Fatalf("waiting for the end marker after %d messages: %v", len(out), err)
			}
			switch {
			case m.Subject == end:
				return out
			case strings.HasPrefix(m.Subject, "crawl.recrawl.due."):
				// The server firing a schedule brought forward to now: not the parser's.
			default:
				out = append(out, m)
			}
		}
	}

	// Offline first: it reads the seeded schedule before HandleBatch's output replaces it.
	rs2 := redisproc.StartT(t, redisproc.Options{})
	opt, err := redis.ParseURL(rs2.URL())
	if err != nil {
		t.Fatal(err)
	}
	rdb2 := redis.NewClient(opt)
	t.Cleanup(func() { rdb2.Close() })
	off, err := service.NewOffline(ctx, stackConfig(t, ns, rs2, env), rdb2, s.js, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	offPub, offErrs := off.Batch(ctx, ids, msgs)
	if got := published(); len(got) > 0 {
		t.Fatalf("Offline published %d messages, first on %s", len(got), got[0].Subject)
	}

	errs := s.svc.HandleBatch(ctx, delivered)
	for _, m := range delivered {
		if err := m.Ack(); err != nil {
			t.Fatal(err)
		}
	}
	pub := published()
	// At TRAWL_FSYNC=always each stream's messages go as an atomic batch, with the batch's
	// own headers, the streams side by side: compare the messages, not their wire order.
	for _, m := range pub {
		for k := range m.Header {
			if strings.HasPrefix(k, "Nats-Batch-") {
				delete(m.Header, k)
			}
		}
	}
	byID := func(a, b *nats.Msg) int {
		return strings.Compare(a.Subject+" "+a.Header.Get(nats.MsgIdHdr), b.Subject+" "+b.Header.Get(nats.MsgIdHdr))
	}
	slices.SortStableFunc(pub, byID)
	offPub = slices.Clone(offPub)
	slices.SortStableFunc(offPub, byID)

	for i := range pages {
		if fmt.Sprint(errs[i]) != fmt.Sprint(offErrs[i]) {
			t.Errorf("page %d: HandleBatch result %v, Offline %v", i, errs[i], offErrs[i])
		}
	}
	if errs[pages-1] == nil {
		t.Errorf("the malformed page was accepted")
	}
	subjects := func(ms []*nats.Msg) (out []string) {
		for _, m := range ms {
			out = append(out, m.Subject)
		}
		return out
	}
	t.Logf("HandleBatch published %v", subjects(pub))
	if len(pub) != len(offPub) {
		t.Fatalf("HandleBatch published %d messages %v, Offline %d %v", len(pub), subjects(pub), len(offPub), subjects(offPub))
	}
	for i := range pub {
		a, b := pub[i], offPub[i]
		if a.Subject != b.Subject || string(a.Data) != string(b.Data) || !maps.EqualFunc(a.Header, b.Header, slices.Equal) {
			t.Errorf("message %d: HandleBatch published %s %v %q, Offline %s %v %q", i, a.Subject, a.Header, a.Data, b.Subject, b.Header, b.Data)
		}
	}
	// The content index was consulted: the copy is flagged.
	for _, m := range pub {
		var d crawlmsg.Document
		if m.Subject == topology.SubjectDocs && crawlmsg.Unmarshal(m.Data, &d) == nil && d.URL == copied.URL && d.NearDuplicateOf != long.URL {
			t.Errorf("the copy's document %+v is not flagged a near duplicate of %s", d, long.URL)
		}
	}
	// Every kind of output is there, so the comparison covered them.
	for _, want := range []string{topology.SubjectDocs, topology.SubjectRender, topology.SubjectDiscovered, topology.ScheduleSubject(0, seed.URL), topology.ScheduleSubject(0, notMod.URL)} {
		if !slices.Contains(subjects(pub), want) {
			t.Errorf("no message on %s among %v", want, subjects(pub))
		}
	}

	for _, rdb := range []*redis.Client{s.rdb, rdb2} {
		why, ok, err := renderconf.Lookup(ctx, rdb, "trawl", shell.URL)
		if err != nil || !ok || !why.Render || why.Reason != renderconf.ReasonShell {
			t.Errorf("explain record of the shell = %+v, %t, %v; want its render decision kept", why, ok, err)
		}
	}
}
