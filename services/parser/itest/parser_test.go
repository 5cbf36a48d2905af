package itest

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/devstack/inproc"
	"github.com/trawl/trawl/devstack/natsembed"
	"github.com/trawl/trawl/devstack/redisproc"
	"github.com/trawl/trawl/devstack/scrape"
	"github.com/trawl/trawl/services/parser/internal/config"
	"github.com/trawl/trawl/services/parser/internal/service"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/testwait"
	"github.com/trawl/trawl/shared/topology"
)

const waitFor = 20 * time.Second

// stack is one embedded NATS and one redis-server with a parser built on them, and client
// connections to both.
type stack struct {
	t   *testing.T
	ns  *natsembed.Server
	rs  *redisproc.Server
	svc *service.Service
	nc  *nats.Conn
	js  jetstream.JetStream
	rdb *redis.Client
}

func newStack(t *testing.T, env map[string]string) *stack {
	t.Helper()
	return newStackWith(t, env, redisproc.Options{})
}

func newStackWith(t *testing.T, env map[string]string, ropts redisproc.Options) *stack {
	t.Helper()
	return newStackOn(t, natsembed.StartT(t), redisproc.StartT(t, ropts), env)
}

// newStackOn builds the parser on servers already running (a test that publishes before
// the parser exists).
func newStackOn(t *testing.T, ns *natsembed.Server, rs *redisproc.Server, env map[string]string) *stack {
	t.Helper()
	cfg := stackConfig(t, ns, rs, env)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	svc, err := service.New(ctx, cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	nc, js := connectJS(t, ns)
	opt, err := redis.ParseURL(rs.URL())
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { rdb.Close() })
	return &stack{t: t, ns: ns, rs: rs, svc: svc, nc: nc, js: js, rdb: rdb}
}

// stackConfig is the parser's configuration on the servers, env over the tests' defaults.
func stackConfig(t *testing.T, ns *natsembed.Server, rs *redisproc.Server, env map[string]string) config.Config {
	t.Helper()
	vars := map[string]string{
		"TRAWL_NATS_URL":  ns.URL(),
		"TRAWL_REDIS_URL": rs.URL(),
		"TRAWL_HTTP_ADDR": "127.0.0.1:0",
		"TRAWL_ACK_WAIT":  "1s",
		// Acks at once: the 1s level's settling window is longer than this ack wait.
		"TRAWL_FSYNC":       "always",
		"TRAWL_MAX_DEPTH":   "3",
		"TRAWL_SCOPE":       "host",
		"TRAWL_PARSE_BATCH": "4",
	}
	return inproc.Config(t, config.Load, vars, env)
}

// run starts the service's consume loop; the test ends by cancelling it and requiring a
// clean, prompt exit (graceful shutdown).
func (s *stack) run() {
	s.t.Helper()
	inproc.Start(s.t, slog.New(slog.DiscardHandler), func(context.Context) (*service.Service, error) { return s.svc, nil })
}

func (s *stack) publishPage(meta crawlmsg.PageMeta, body string) uint64 {
	s.t.Helper()
	m, err := crawlmsg.PageMsg(topology.SubjectPages, &crawlmsg.Page{Meta: meta, Body: []byte(body)})
	if err != nil {
		s.t.Fatal(err)
	}
	return s.publish(m)
}

func (s *stack) publish(m *nats.Msg) uint64 {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	ack, err := s.js.PublishMsg(ctx, m)
	if err != nil {
		s.t.Fatal(err)
	}
	return ack.Sequence
}

// waitSettled waits until the parser has acked or terminated every page message.
func (s *stack) waitSettled() {
	s.t.Helper()
	natsembed.WaitSettled(s.t, s.js, topology.StreamPages, topology.ConsumerParser, waitFor)
}

type docMsg struct {
	id  string
	doc crawlmsg.Document
}

// docs reads every document stored so far with an ordered consumer of its own.
func (s *stack) docs() []docMsg {
	s.t.Helper()
	var out []docMsg
	for _, m := range s.readAll(topology.StreamDocs) {
		var d crawlmsg.Document
		if err := crawlmsg.Unmarshal(m.Data(), &d); err != nil {
			s.t.Fatalf("document: %v", err)
		}
		out = append(out, docMsg{id: m.Headers().Get(nats.MsgIdHdr), doc: d})
	}
	return out
}

func (s *stack) streamMsgs(stream string) uint64 {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	st, err := s.js.Stream(ctx, stream)
	if err != nil {
		s.t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		s.t.Fatal(err)
	}
	return info.State.Msgs
}

func (s *stack) readAll(stream string) []jetstream.Msg {
	s.t.Helper()
	n := int(s.streamMsgs(stream))
	if n == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	c, err := s.js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		s.t.Fatal(err)
	}
	var out []jetstream.Msg
	for len(out) < n {
		m, err := c.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			s.t.Fatalf("reading %s: %v after %d of %d", stream, err, len(out), n)
		}
		out = append(out, m)
	}
	return out
}

type discMsg struct {
	id    string
	batch crawlmsg.DiscoveredBatch
}

// takeDiscovered acts as the dedup service: it pulls and acks every batch on crawl.discovered.
func (s *stack) takeDiscovered() []discMsg {
	s.t.Helper()
	var out []discMsg
	natsembed.TakeAll(s.t, s.js, topology.StreamDiscovered, topology.ConsumerDedup, waitFor, func(m jetstream.Msg) {
		var b crawlmsg.DiscoveredBatch
		if err := crawlmsg.Unmarshal(m.Data(), &b); err != nil {
			s.t.Fatalf("discovered batch: %v", err)
		}
		out = append(out, discMsg{id: m.Headers().Get(nats.MsgIdHdr), batch: b})
	})
	return out
}

// metric is the sum of the samples series selects ("name{labels}") from the service's
// /metrics, which must export it.
func (s *stack) metric(series string) float64 {
	s.t.Helper()
	return scrape.Exported(s.t, s.svc.Addr(), series)
}

func htmlMeta(url string, depth int) crawlmsg.PageMeta {
	return crawlmsg.PageMeta{URL: url, Host: "site.test", Depth: depth, Status: 200, ContentType: "text/html", FetchedAt: time.Now().UnixMilli()}
}

const linkPage = `<!DOCTYPE html><html lang="en"><head><title>Home</title>
<meta name="description" content="The home page"></head><body>
<p>Welcome home.</p>
<a href="/about">About</a>
<a href="news/">News</a>
<a href="/about#team">About again</a>
<a href="/login" rel="nofollow">Log in</a>
<a href="https://offsite.test/x">Offsite</a>
<a href="javascript:void(0)">Menu</a>
<iframe src="/frame.html"></iframe>
</body></html>`

func TestPipeline(t *testing.T) {
	t.Parallel()
	s := newStack(t, nil)
	s.run()

	resp, err := http.Get("http://" + s.svc.Addr() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/readyz = %d", resp.StatusCode)
	}

	homeSeq := s.publishPage(htmlMeta("http://site.test/", 0), linkPage)
	// At max depth (3): a document, but no link may go to depth 4.
	deepSeq := s.publishPage(htmlMeta("http://site.test/deep/", 3), linkPage)
	pdf := htmlMeta("http://site.test/file.pdf", 1)
	pdf.ContentType = "application/pdf"
	s.publishPage(pdf, "%PDF-1.4 <a href='/not-parsed'>")
	notFound := htmlMeta("http://site.test/missing", 1)
	notFound.Status = 404
	s.publishPage(notFound, linkPage)
	robotsSeq := s.publishPage(htmlMeta("http://site.test/private/", 1),
		`<html><head><meta name="robots" content="noindex,nofollow"><title>Private</title></head><body><a href="/secret">s</a></body></html>`)
	// A page whose own URL is unusable cannot resolve links; it is still acked, with a
	// document of what could be extracted.
	badURL := htmlMeta("http://site.test:99x/", 0)
	s.publishPage(badURL, `<title>Bad base</title><a href="/x">x</a>`)
	// The home page as a server sent it in a coding the fetcher cannot decode, header
	// kept: octets, not markup. Acked with no document and no links.
	br, err := os.ReadFile("testdata/linkpage.html.br")
	if err != nil {
		t.Fatal(err)
	}
	encoded := htmlMeta("http://site.test/encoded", 0)
	encoded.Header = map[string][]string{"Content-Encoding": {"br"}}
	s.publishPage(encoded, string(br))
	s.waitSettled()

	docs := s.docs()
	byURL := map[string]docMsg{}
	for _, d := range docs {
		byURL[d.doc.URL] = d
	}
	if len(docs) != 4 || len(byURL) != 4 {
		t.Fatalf("got %d documents %v, want home, deep, private and bad URL (none of the encoded page)", len(docs), keys(byURL))
	}
	if b := byURL[badURL.URL].doc; b.Title != "Bad base" || len(b.Links) != 0 {
		t.Errorf("bad-URL document = %+v", b)
	}
	home := byURL["http://site.test/"]
	if !derivedFrom(home.id, "doc", homeSeq) {
		t.Errorf("home document id = %q", home.id)
	}
	d := home.doc
	if d.V != crawlmsg.Version || d.Host != "site.test" || d.Depth != 0 || d.Status != 200 || d.Title != "Home" ||
		d.Description != "The home page" || d.Lang != "en" || !strings.HasPrefix(d.Text, "Welcome home. About News") ||
		len(d.Digest) != 64 || d.NoIndex || d.NoFollow {
		t.Errorf("home document = %+v", d)
	}
	var linkURLs []string
	for _, l := range d.Links {
		linkURLs = append(linkURLs, l.URL)
	}
	wantLinks := []string{"http://site.test/about", "http://site.test/news/", "http://site.test/login", "https://offsite.test/x", "http://site.test/frame.html"}
	if strings.Join(linkURLs, " ") != strings.Join(wantLinks, " ") {
		t.Errorf("home links = %v, want %v", linkURLs, wantLinks)
	}
	if p := byURL["http://site.test/private/"]; !p.doc.NoIndex || !p.doc.NoFollow || !derivedFrom(p.id, "doc", robotsSeq) {
		t.Errorf("private document = %+v (id %s)", p.doc, p.id)
	}
	if !derivedFrom(byURL["http://site.test/deep/"].id, "doc", deepSeq) {
		t.Errorf("deep document id = %q", byURL["http://site.test/deep/"].id)
	}

	// Only the home page has followable links within depth: one batch, depth 1, no
	// nofollow, no offsite (TRAWL_SCOPE=host), nothing from the deep or private pages.
	disc := s.takeDiscovered()
	if len(disc) != 1 {
		t.Fatalf("got %d discovered batches, want 1: %+v", len(disc), disc)
	}
	if !derivedFrom(disc[0].id, "disc", homeSeq) || disc[0].batch.Source != "http://site.test/" {
		t.Errorf("batch id %q source %q", disc[0].id, disc[0].batch.Source)
	}
	var got []string
	for _, u := range disc[0].batch.URLs {
		if u.Depth != 1 || u.Via != crawlmsg.ViaLink {
			t.Errorf("%s: depth %d via %q, want 1 via link", u.URL, u.Depth, u.Via)
		}
		got = append(got, u.URL)
	}
	want := []string{"http://site.test/about", "http://site.test/news/", "http://site.test/frame.html"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("discovered %v, want %v", got, want)
	}

	for series, want := range map[string]float64{
		`trawl_parser_pages_total{result="parsed"}`:                  4,
		`trawl_parser_parse_errors_total`:                            1,
		`trawl_parser_pages_total{result="skipped"}`:                 2,
		`trawl_parser_pages_total{result="encoded"}`:                 1,
		`trawl_parser_links_total`:                                   11, // 5 home + 5 deep + 1 private
		`trawl_parser_links_emitted_total`:                           3,
		`trawl_parser_links_rejected_total{reason="depth"}`:          4,
		`trawl_parser_links_rejected_total{reason="scope"}`:          1,
		`trawl_parser_links_rejected_total{reason="nofollow"}`:       3,
		`trawl_parser_links_dropped_total{reason="scheme"}`:          2,
		`trawl_parser_parse_duration_seconds_count`:                  4,
		`trawl_parser_messages_terminated_total{reason="permanent"}`: 0,
	} {
		if got := s.metric(series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func TestMalformedPagesAreTerminated(t *testing.T) {
	t.Parallel()
	s := newStack(t, nil)
	var terminated atomic.Int32
	sub, err := s.nc.Subscribe(fmt.Sprintf("$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.%s.%s", topology.StreamPages, topology.ConsumerParser),
		func(*nats.Msg) { terminated.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := s.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	s.run()

	// No Trawl-Meta header at all.
	noMeta := nats.NewMsg(topology.SubjectPages)
	noMeta.Data = []byte("<html><a href=/x>x</a></html>")
	s.publish(noMeta)
	// A header that is not JSON, and one from a future schema version.
	badJSON := nats.NewMsg(topology.SubjectPages)
	badJSON.Header.Set(crawlmsg.MetaHeader, "{not json")
	s.publish(badJSON)
	future := nats.NewMsg(topology.SubjectPages)
	future.Header.Set(crawlmsg.MetaHeader, `{"v":3,"url":"http://site.test/v3","status":200,"content_type":"text/html"}`)
	s.publish(future)
	// The service keeps going: a good page after the bad ones is parsed.
	s.publishPage(htmlMeta("http://site.test/after", 0), `<title>After</title><a href="/next">n</a>`)

	s.waitSettled()
	testwait.EventuallyState(t, waitFor, "three termination advisories", func() (bool, string) {
		return terminated.Load() == 3, fmt.Sprint(terminated.Load())
	})
	docs := s.docs()
	if len(docs) != 1 || docs[0].doc.Title != "After" {
		t.Fatalf("documents = %+v, want only the good page", docs)
	}
	if got := s.metric(`trawl_parser_messages_terminated_total{reason="permanent"}`); got != 3 {
		t.Errorf("terminated metric = %v, want 3", got)
	}
	if disc := s.takeDiscovered(); len(disc) != 1 || disc[0].batch.URLs[0].URL != "http://site.test/next" {
		t.Errorf("discovered = %+v", disc)
	}
}

func TestRedeliveryPublishesOnce(t *testing.T) {
	t.Parallel()
	s := newStack(t, nil)
	// The consume loop is not started: the test takes the page from the parser's durable
	// itself, so it can let JetStream redeliver it and hand both deliveries to the
	// service's batch handler, as the loop would after a crash between publish and ack.
	seq := s.publishPage(htmlMeta("http://site.test/", 0), linkPage)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	cons, err := s.js.Consumer(ctx, topology.StreamPages, topology.ConsumerParser)
	if err != nil {
		t.Fatal(err)
	}
	for delivery := uint64(1); delivery <= 2; delivery++ {
		// The first delivery is never acked, so after AckWait (1s) it comes back.
		m, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
		if err != nil {
			t.Fatalf("delivery %d: %v", delivery, err)
		}
		md, err := m.Metadata()
		if err != nil {
			t.Fatal(err)
		}
		if md.NumDelivered != delivery || md.Sequence.Stream != seq {
			t.Fatalf("got delivery %d of seq %d, want delivery %d of %d", md.NumDelivered, md.Sequence.Stream, delivery, seq)
		}
		if errs := s.svc.HandleBatch(ctx, []jetstream.Msg{m}); errs[0] != nil {
			t.Fatalf("delivery %d: %v", delivery, errs[0])
		}
		if delivery == 2 {
			if err := m.DoubleAck(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n := s.streamMsgs(topology.StreamDocs); n != 1 {
		t.Errorf("%d documents after a redelivery, want 1", n)
	}
	if disc := s.takeDiscovered(); len(disc) != 1 {
		t.Errorf("%d discovered batches after a redelivery, want 1", len(disc))
	}

	// The same content as a new message is a new page version: it is not deduplicated.
	s.publishPage(htmlMeta("http://site.test/", 0), linkPage)
	m, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if errs := s.svc.HandleBatch(ctx, []jetstream.Msg{m}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	if n := s.streamMsgs(topology.StreamDocs); n != 2 {
		t.Errorf("%d documents after a second page message, want 2", n)
	}
	// Neither the redelivery nor the new version of the page is a duplicate of itself.
	for _, d := range s.docs() {
		if d.doc.DuplicateOf != "" || d.doc.NearDuplicateOf != "" || d.doc.TextDigest == "" {
			t.Errorf("document %s: duplicate_of %q near_duplicate_of %q text digest %q", d.id, d.doc.DuplicateOf, d.doc.NearDuplicateOf, d.doc.TextDigest)
		}
	}
	s.svc.Close()
}

func TestSurvivesNATSRestart(t *testing.T) {
	t.Parallel()
	s := newStack(t, nil)
	s.run()
	s.publishPage(htmlMeta("http://site.test/before", 0), `<title>Before</title>`)
	s.waitSettled()

	if err := s.ns.Restart(); err != nil {
		t.Fatal(err)
	}
	// JetStream takes a moment to come back; the Nats-Msg-Id makes retried publishes safe.
	testwait.EventuallyState(t, waitFor, "a publish after the restart", func() (bool, string) {
		m, err := crawlmsg.PageMsg(topology.SubjectPages, &crawlmsg.Page{Meta: htmlMeta("http://site.test/after", 0), Body: []byte(`<title>After</title>`)})
		if err != nil {
			t.Fatal(err)
		}
		m.Header.Set(nats.MsgIdHdr, "test-after-restart")
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if _, err := s.js.PublishMsg(ctx, m); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	// The parser reconnects by itself and goes on consuming.
	testwait.EventuallyState(t, waitFor, "the document of the page published after the restart", func() (bool, string) {
		n := s.streamMsgs(topology.StreamDocs)
		return n == 2, fmt.Sprint(n, " documents")
	})
	docs := s.docs()
	if docs[1].doc.Title != "After" {
		t.Errorf("documents = %+v", docs)
	}
}

// derivedFrom tells whether an output's Nats-Msg-Id names the pages message at seq
// ("<kind>:CRAWL_PAGES:<seq>:<stored time>", natsx.MsgID).
func derivedFrom(id, kind string, seq uint64) bool {
	return strings.HasPrefix(id, fmt.Sprintf("%s:%s:%d:", kind, topology.StreamPages, seq))
}

// connectJS connects to ns for the test's lifetime, reconnecting through restarts.
func connectJS(t *testing.T, ns *natsembed.Server) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(ns.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}
