package itest

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/robots"
	"github.com/trawl/trawl/shared/topology"
)

const (
	robotsTxt = "User-agent: *\nDisallow: /private\nCrawl-delay: 1.5\nSitemap: /sitemap.xml\n"
	pageHTML  = "<html><head><title>t</title></head><body><a href=/x>x</a></body></html>"
)

// TestRobotsSharedAcrossInstances: the first task of an origin fetches robots.txt instead
// of the page and caches it in Redis; a second fetcher process (sharing only Redis and
// NATS) then fetches the page without asking for robots.txt again.
func TestRobotsSharedAcrossInstances(t *testing.T) {
	t.Parallel()
	st := newStack(t)
	s := newSite(t, map[string]http.HandlerFunc{"/robots.txt": text(robotsTxt), "/page": html(pageHTML)})
	cfg := st.config(nil)

	a := st.start(cfg, "a")
	t1 := task(s.URL + "/page")
	t1.Depth, t1.Attempt = 2, 1
	st.publishTask(t1)
	o := st.outcome(t1.Lease)
	if o.Kind != crawlmsg.OutcomeRobots || !o.Requested || o.Status != 200 || o.CrawlDelay != 1.5 || o.StartedAt == 0 ||
		o.URL != t1.URL || o.Host != "127.0.0.1" || o.Attempt != 1 {
		t.Fatalf("first outcome %+v, want robots 200 with crawl-delay 1.5", o)
	}
	if got := s.requests(); !slices.Equal(got, []string{"/robots.txt"}) {
		t.Fatalf("site saw %v, want only /robots.txt", got)
	}
	key := "itest:robots:" + s.URL
	raw, err := st.rdb.Get(context.Background(), key).Bytes()
	if err != nil {
		t.Fatalf("robots entry %s: %v", key, err)
	}
	e, err := robots.UnmarshalEntry(raw)
	if err != nil || e.Class != robots.Parsed || e.Allowed("/private/x") || !e.Allowed("/page") {
		t.Errorf("cached entry %q: %v", raw, err)
	}
	if ttl := st.rdb.TTL(context.Background(), key).Val(); ttl < 23*time.Hour || ttl > 24*time.Hour {
		t.Errorf("robots TTL %v, want ~24h", ttl)
	}
	a.stop(t)

	b := st.start(cfg, "b")
	t2 := task(s.URL + "/page")
	t2.Depth = 2
	st.publishTask(t2)
	o = st.outcome(t2.Lease)
	if o.Kind != crawlmsg.OutcomeFetched || !o.Requested || o.Status != 200 || o.Bytes != int64(len(pageHTML)) || o.CrawlDelay != 1.5 {
		t.Fatalf("second outcome %+v, want fetched 200", o)
	}
	p := st.page(t2.Lease)
	m := p.Meta
	if string(p.Body) != pageHTML || m.URL != t2.URL || m.Host != "127.0.0.1" || m.Depth != 2 || m.Status != 200 ||
		m.ContentType != "text/html" || m.Charset != "utf-8" || m.FetchedAt == 0 || m.Truncated ||
		!strings.HasPrefix(strings.Join(m.Header["Content-Type"], ""), "text/html") {
		t.Errorf("page %+v body %q", m, p.Body)
	}
	if got := s.requests(); !slices.Equal(got, []string{"/robots.txt", "/page"}) {
		t.Errorf("site saw %v, want robots.txt once, then the page", got)
	}
	b.waitMetric(t, `trawl_fetcher_pages_total{class="2xx"}`, 1)
	b.waitMetric(t, `trawl_fetcher_robots_decisions_total{decision="allowed"}`, 1)
	if v := b.metric(t, `trawl_fetcher_robots_fetches_total{result="parsed"}`); v != 0 {
		t.Errorf("second instance fetched robots.txt %v times", v)
	}
}

// TestDisallowedAndRedirects: a disallowed URL is never requested; a redirect is published
// as a page, a discovered target at the same depth with one more hop, and an outcome with
// the Location; at the hop cap no target is published.
func TestDisallowedAndRedirects(t *testing.T) {
	t.Parallel()
	st := newStack(t)
	s := newSite(t, map[string]http.HandlerFunc{
		"/robots.txt": text(robotsTxt),
		"/old": func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "/new/./target?b=2", http.StatusMovedPermanently)
		},
		"/busy": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", "120")
			w.WriteHeader(http.StatusTooManyRequests)
		},
	})
	in := st.start(st.config(nil), "a")

	warm := task(s.URL + "/")
	st.publishTask(warm)
	if o := st.outcome(warm.Lease); o.Kind != crawlmsg.OutcomeRobots {
		t.Fatalf("warm-up outcome %+v", o)
	}

	dis := task(s.URL + "/private/secret?x=1")
	st.publishTask(dis)
	if o := st.outcome(dis.Lease); o.Kind != crawlmsg.OutcomeDisallowed || o.Requested || o.Status != 0 {
		t.Errorf("disallowed outcome %+v", o)
	}

	redir := task(s.URL + "/old")
	redir.Depth, redir.Hops = 3, 1
	st.publishTask(redir)
	o := st.outcome(redir.Lease)
	target := s.URL + "/new/target?b=2"
	if o.Kind != crawlmsg.OutcomeFetched || o.Status != 301 || o.Location != target || !o.Requested {
		t.Errorf("redirect outcome %+v, want fetched 301 to %s", o, target)
	}
	if p := st.page(redir.Lease); p.Meta.Status != 301 || p.Meta.URL != redir.URL || p.Meta.Location != target || p.Meta.Hops != 1 {
		t.Errorf("redirect page %+v", p.Meta)
	}
	// The parser follows a redirect from the page's Location; the fetcher publishes no
	// target of its own. The outcome is published after the page, so by now one would be
	// stored.
	info, err := st.discCons.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.NumPending != 0 || info.NumAckPending != 0 {
		t.Errorf("the fetcher published a redirect target: %d pending on crawl.discovered", info.NumPending+uint64(info.NumAckPending))
	}

	busy := task(s.URL + "/busy")
	st.publishTask(busy)
	if o := st.outcome(busy.Lease); o.Kind != crawlmsg.OutcomeFetched || o.Status != 429 || o.RetryAfter != 120 {
		t.Errorf("429 outcome %+v, want Retry-After 120", o)
	}

	for _, r := range s.requests() {
		if strings.HasPrefix(r, "/private") || strings.HasPrefix(r, "/new") {
			t.Errorf("site saw %s: disallowed URL or redirect target fetched inline", r)
		}
	}
	in.waitMetric(t, `trawl_fetcher_robots_decisions_total{decision="disallowed"}`, 1)
	in.waitMetric(t, `trawl_fetcher_pages_total{class="3xx"}`, 1)
}

// TestRobotsUnavailable: robots.txt answering 503 disallows the origin: the outcome says
// so (with the request made), the verdict is cached briefly, and the page is never asked for.
func TestRobotsUnavailable(t *testing.T) {
	t.Parallel()
	st := newStack(t)
	s := newSite(t, map[string]http.HandlerFunc{
		"/robots.txt": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", "30")
			http.Error(w, "down", http.StatusServiceUnavailable)
		},
		"/page": html(pageHTML),
	})
	in := st.start(st.config(map[string]string{"TRAWL_ROBOTS_ERROR_TTL": "45s"}), "a")

	t1 := task(s.URL + "/page")
	st.publishTask(t1)
	o := st.outcome(t1.Lease)
	if o.Kind != crawlmsg.OutcomeRobotsUnavailable || !o.Requested || o.Status != 503 || o.RetryAfter != 30 {
		t.Fatalf("first outcome %+v, want robots-unavailable 503", o)
	}
	ttl := st.rdb.TTL(context.Background(), "itest:robots:"+s.URL).Val()
	if ttl <= 0 || ttl > 45*time.Second {
		t.Errorf("cached 503 TTL %v, want at most TRAWL_ROBOTS_ERROR_TTL", ttl)
	}

	t2 := task(s.URL + "/page")
	st.publishTask(t2)
	if o := st.outcome(t2.Lease); o.Kind != crawlmsg.OutcomeRobotsUnavailable || o.Requested {
		t.Errorf("second outcome %+v, want robots-unavailable without a request", o)
	}
	if got := s.requests(); !slices.Equal(got, []string{"/robots.txt"}) {
		t.Errorf("site saw %v, want only /robots.txt", got)
	}
	in.waitMetric(t, `trawl_fetcher_robots_fetches_total{result="unreachable"}`, 1)
	in.waitMetric(t, `trawl_fetcher_robots_decisions_total{decision="unavailable"}`, 1)
}

// TestRobotsRedirectAcrossHosts: robots.txt redirected to another host is followed, and the
// rules found there apply to the original origin.
func TestRobotsRedirectAcrossHosts(t *testing.T) {
	t.Parallel()
	st := newStack(t)
	// Another host: the politeness key is the host name without port, so another port of
	// 127.0.0.1 would be the same host.
	other := newSiteOn(t, "127.0.0.2", map[string]http.HandlerFunc{"/rules.txt": text("User-agent: trawl\nDisallow: /nope\n")})
	s := newSite(t, map[string]http.HandlerFunc{
		"/robots.txt": func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, other.URL+"/rules.txt", http.StatusFound)
		},
	})
	st.start(st.config(nil), "a")

	t1 := task(s.URL + "/nope/1")
	st.publishTask(t1)
	if o := st.outcome(t1.Lease); o.Kind != crawlmsg.OutcomeRobots || o.Status != 200 {
		t.Fatalf("robots outcome %+v", o)
	}
	t2 := task(s.URL + "/nope/1")
	st.publishTask(t2)
	if o := st.outcome(t2.Lease); o.Kind != crawlmsg.OutcomeDisallowed {
		t.Errorf("outcome %+v, want disallowed by the redirected robots.txt", o)
	}
	if got := s.requests(); !slices.Equal(got, []string{"/robots.txt"}) {
		t.Errorf("origin saw %v", got)
	}
	if got := other.requests(); !slices.Equal(got, []string{"/rules.txt"}) {
		t.Errorf("redirect target saw %v", got)
	}
}

// TestExpiredTask: a task whose lease ends before a full fetch could finish is answered
// with expired and no request at all, robots.txt included.
func TestExpiredTask(t *testing.T) {
	t.Parallel()
	st := newStack(t)
	s := newSite(t, map[string]http.HandlerFunc{"/robots.txt": text(robotsTxt), "/page": html(pageHTML)})
	in := st.start(st.config(nil), "a")

	tk := task(s.URL + "/page")
	tk.Deadline = time.Now().Add(3 * time.Second).UnixMilli() // < 5s fetch timeout + 2s
	st.publishTask(tk)
	if o := st.outcome(tk.Lease); o.Kind != crawlmsg.OutcomeExpired || o.Requested {
		t.Errorf("outcome %+v, want expired without a request", o)
	}
	if got := s.requests(); len(got) != 0 {
		t.Errorf("site saw %v", got)
	}
	in.waitMetric(t, "trawl_fetcher_tasks_expired_total", 1)
}

// TestMalformedTasks: undecodable tasks are terminated at once and counted, and the fetcher
// goes on serving the tasks behind them.
func TestMalformedTasks(t *testing.T) {
	t.Parallel()
	st := newStack(t)
	s := newSite(t, map[string]http.HandlerFunc{"/robots.txt": text(robotsTxt)})
	in := st.start(st.config(nil), "a")

	for _, raw := range []string{
		"{not json",
		`{"v":2,"shard":0,"host":"h","url":"http://h/","lease":"l","deadline":99999999999999}`,
		`{"v":1,"shard":0,"host":"h","url":"http://h/","deadline":99999999999999}`,
		"",
	} {
		st.publishRaw([]byte(raw))
	}
	in.waitMetric(t, `trawl_fetcher_messages_terminated_total{reason="permanent"}`, 4)

	good := task(s.URL + "/")
	st.publishTask(good)
	if o := st.outcome(good.Lease); o.Kind != crawlmsg.OutcomeRobots {
		t.Errorf("outcome after bad input %+v", o)
	}
	// Terminated and acked tasks leave the work-queue stream.
	stream, err := st.js.Stream(context.Background(), topology.StreamFetch)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(waitFor)
	for {
		si, err := stream.Info(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if si.State.Msgs == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d tasks left on %s", si.State.Msgs, topology.StreamFetch)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestUnsafeAddressBlocked: with the default policy (no TRAWL_ALLOW_CIDRS) a URL on a
// loopback address gets a blocked outcome, and nothing reaches the server.
func TestUnsafeAddressBlocked(t *testing.T) {
	t.Parallel()
	st := newStack(t)
	s := newSite(t, map[string]http.HandlerFunc{"/robots.txt": text(robotsTxt), "/page": html(pageHTML)})
	in := st.start(st.config(map[string]string{"TRAWL_ALLOW_CIDRS": ""}), "strict")

	for _, u := range []string{s.URL + "/page", strings.Replace(s.URL, "127.0.0.1", "[::ffff:127.0.0.1]", 1) + "/page", "ftp://127.0.0.1/x"} {
		tk := task(u)
		st.publishTask(tk)
		if o := st.outcome(tk.Lease); o.Kind != crawlmsg.OutcomeBlocked || o.Requested || !o.Permanent || o.Error == "" {
			t.Errorf("%s: outcome %+v, want blocked", u, o)
		}
	}
	if got := s.requests(); len(got) != 0 {
		t.Errorf("site saw %v", got)
	}
	if n, _ := st.rdb.Exists(context.Background(), "itest:robots:"+s.URL).Result(); n != 0 {
		t.Errorf("a robots verdict was cached for a blocked origin")
	}
	in.waitMetric(t, "trawl_fetcher_blocked_total", 3)
}

// TestNetworkError: a refused connection is an error outcome with the request counted, and
// a failing robots.txt connection caches an unreachable verdict.
func TestNetworkError(t *testing.T) {
	t.Parallel()
	st := newStack(t)
	s := newSite(t, map[string]http.HandlerFunc{"/robots.txt": text(robotsTxt)})
	url := s.URL
	s.Close() // nothing listens there any more
	st.start(st.config(nil), "a")

	tk := task(url + "/page")
	st.publishTask(tk)
	o := st.outcome(tk.Lease)
	if o.Kind != crawlmsg.OutcomeRobotsUnavailable || !o.Requested || o.Error == "" || o.Permanent {
		t.Errorf("outcome %+v, want robots-unavailable after a connection error", o)
	}
	raw, _ := st.rdb.Get(context.Background(), "itest:robots:"+url).Bytes()
	if e, err := robots.UnmarshalEntry(raw); err != nil || e.Class != robots.Unreachable {
		t.Errorf("cached %q (%v), want an unreachable entry", raw, err)
	}
}

// TestGracefulShutdown: a task in hand when the fetcher is told to stop is finished and
// acked, not abandoned to AckWait.
func TestGracefulShutdown(t *testing.T) {
	t.Parallel()
	st := newStack(t)
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	s := newSite(t, map[string]http.HandlerFunc{
		"/robots.txt": text(""),
		"/slow": func(w http.ResponseWriter, r *http.Request) {
			started <- struct{}{}
			<-release
			html(pageHTML)(w, r)
		},
	})
	in := st.start(st.config(nil), "a")
	warm := task(s.URL + "/")
	st.publishTask(warm)
	st.outcome(warm.Lease)

	tk := task(s.URL + "/slow")
	st.publishTask(tk)
	select {
	case <-started:
	case <-time.After(waitFor):
		t.Fatal("request never started")
	}
	in.Cancel() // SIGTERM while the request is in flight
	close(release)
	in.stop(t) // waits for Run to return
	if o := st.outcome(tk.Lease); o.Kind != crawlmsg.OutcomeFetched || o.Status != 200 {
		t.Errorf("outcome %+v, want the in-flight fetch finished", o)
	}
	cons, err := st.js.Consumer(context.Background(), topology.StreamFetch, topology.ConsumerFetcher)
	if err != nil {
		t.Fatal(err)
	}
	info, err := cons.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.NumAckPending != 0 || info.NumPending != 0 {
		t.Errorf("after shutdown: %d unacked, %d pending tasks", info.NumAckPending, info.NumPending)
	}
}

// TestRedirectChainRecoverable: the fetcher does not follow a page redirect inline, so no
// page knows its whole chain; each hop's page records its Location and the hops that led
// to it, which is enough to rebuild the chain from crawl.pages alone. The test plays the
// parser and the scheduler, turning each page's Location into the next task.
func TestRedirectChainRecoverable(t *testing.T) {
	t.Parallel()
	st := newStack(t)
	s := newSite(t, map[string]http.HandlerFunc{
		"/robots.txt": text(robotsTxt),
		"/a":          func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/b", http.StatusMovedPermanently) },
		"/b":          func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/c?x=1", http.StatusFound) },
		"/c":          html(pageHTML),
	})
	st.start(st.config(nil), "a")
	warm := task(s.URL + "/")
	st.publishTask(warm)
	if o := st.outcome(warm.Lease); o.Kind != crawlmsg.OutcomeRobots {
		t.Fatalf("warm-up outcome %+v", o)
	}

	tk := task(s.URL + "/a")
	tk.Depth = 1
	var leases []string
	for range 3 {
		st.publishTask(tk)
		leases = append(leases, tk.Lease)
		o := st.outcome(tk.Lease)
		if o.Kind != crawlmsg.OutcomeFetched {
			t.Fatalf("outcome %+v", o)
		}
		if o.Location == "" {
			break
		}
		m := st.page(tk.Lease).Meta
		next := task(m.Location)
		next.Depth, next.Hops = m.Depth, m.Hops+1
		tk = next
	}

	// Rebuild the chain backwards from the final page, using only page records.
	byLocation := map[string]crawlmsg.PageMeta{}
	var final crawlmsg.PageMeta
	for _, l := range leases {
		m := st.page(l).Meta
		if m.Location != "" {
			byLocation[m.Location] = m
		} else {
			final = m
		}
		if len(m.Redirects) != 0 {
			t.Errorf("page %s: Redirects %v, want empty (chains are recorded hop by hop)", m.URL, m.Redirects)
		}
	}
	chain := []string{final.URL}
	for cur := final; cur.Hops > 0; {
		prev, ok := byLocation[cur.URL]
		if !ok || prev.Hops != cur.Hops-1 || prev.Depth != cur.Depth {
			t.Fatalf("no previous hop for %s (hops %d): %+v", cur.URL, cur.Hops, byLocation)
		}
		chain = append([]string{prev.URL}, chain...)
		cur = prev
	}
	want := []string{s.URL + "/a", s.URL + "/b", s.URL + "/c?x=1"}
	if !slices.Equal(chain, want) || final.Status != 200 || final.Hops != 2 {
		t.Errorf("rebuilt chain %v (final status %d, hops %d), want %v", chain, final.Status, final.Hops, want)
	}
}

// TestContentTypeRecorded: every page carries its media type and charset, so the parser
// can skip what is not HTML (PageMeta.IsHTML) without looking at the body.
func TestContentTypeRecorded(t *testing.T) {
	t.Parallel()
	st := newStack(t)
	typed := func(ct, body string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if ct != "" {
				w.Header().Set("Content-Type", ct)
			} else {
				w.Header()["Content-Type"] = nil // a nil entry stops net/http from sniffing one
			}
			io.WriteString(w, body)
		}
	}
	cases := []struct {
		path, header, body string
		mediaType, charset string
		isHTML             bool
	}{
		{"/page.html", "text/html; charset=ISO-8859-1", pageHTML, "text/html", "iso-8859-1", true},
		{"/page.xhtml", "Application/XHTML+XML", pageHTML, "application/xhtml+xml", "", true},
		{"/notes.txt", "text/plain; charset=utf-8", "<a href=/bait>not a link</a>", "text/plain", "utf-8", false},
		{"/doc.pdf", "application/pdf", "%PDF-1.7", "application/pdf", "", false},
		{"/image.png", "image/png", "\x89PNG\r\n", "image/png", "", false},
		{"/untyped", "", pageHTML, "", "", false},
	}
	routes := map[string]http.HandlerFunc{"/robots.txt": text(robotsTxt)}
	for _, c := range cases {
		routes[c.path] = typed(c.header, c.body)
	}
	s := newSite(t, routes)
	st.start(st.config(nil), "a")
	warm := task(s.URL + "/")
	st.publishTask(warm)
	if o := st.outcome(warm.Lease); o.Kind != crawlmsg.OutcomeRobots {
		t.Fatalf("warm-up outcome %+v", o)
	}
	for _, c := range cases {
		t.Run(c.path, func(t *testing.T) {
			tk := task(s.URL + c.path)
			st.publishTask(tk)
			if o := st.outcome(tk.Lease); o.Kind != crawlmsg.OutcomeFetched || o.Status != 200 {
				t.Fatalf("outcome %+v", o)
			}
			m := st.page(tk.Lease).Meta
			if m.ContentType != c.mediaType || m.Charset != c.charset || m.IsHTML() != c.isHTML {
				t.Errorf("content type %q charset %q IsHTML %v, want %q %q %v", m.ContentType, m.Charset, m.IsHTML(), c.mediaType, c.charset, c.isHTML)
			}
		})
	}
}
