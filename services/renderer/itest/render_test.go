package itest

import (
	"net/http"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/trawl/trawl/shared/policy"
	"github.com/trawl/trawl/shared/testwait"
)

const robotsTxt = "User-agent: *\nDisallow: /private\n"

// The page's own document comes from the task (the site never sees it again); its script,
// the JSON the script fetches and a script of another host are answered by Trawl; the
// robots-disallowed request is failed in the page and never reaches the site.
func TestRenderAnswersFromTrawl(t *testing.T) {
	st := newStack(t)
	var s *site
	s = newSite(t, map[string]http.HandlerFunc{
		"a.test/robots.txt": serve("text/plain", robotsTxt),
		"b.test/robots.txt": serve("text/plain", ""),
		"a.test/app.js": serve("text/javascript", `
			fetch('/data.json').then(r => r.json()).then(d => {
				document.getElementById('root').innerHTML = '<p id="text">' + d.text + '</p><a href="/written-by-script">next</a>';
				return fetch('/private/secret').catch(() => { document.body.setAttribute('data-private', 'refused'); });
			}).then(() => { document.body.setAttribute('data-done', '1'); });`),
		"a.test/data.json":      serve("application/json", `{"text":"loaded by fetch"}`),
		"a.test/private/secret": serve("text/plain", "must never be requested"),
		"b.test/lib.js":         serve("text/javascript", `document.documentElement.setAttribute('data-lib', 'b');`),
	})
	in := st.start(st.config(map[string]string{"TRAWL_RESOLVE": resolve("a.test", "b.test")}))
	shell := `<!doctype html><html><head><script src="` + s.url("b.test", "/lib.js") + `"></script></head>` +
		`<body><div id="root"></div><script src="/app.js"></script></body></html>`
	lease := st.publishTask(s.url("a.test", "/"), shell)
	p := st.page(lease)

	dom := string(p.Body)
	if p.Meta.Rendered == nil || p.Meta.Rendered.Failed != "" {
		t.Fatalf("page not rendered: %+v", p.Meta.Rendered)
	}
	for _, want := range []string{"loaded by fetch", `href="/written-by-script"`, `data-lib="b"`} {
		if !strings.Contains(dom, want) {
			t.Errorf("rendered DOM lacks %q:\n%s", want, dom)
		}
	}
	if got := s.paths("a.test"); slices.Contains(got, "/") {
		t.Errorf("the main document was requested again: a.test saw %v", got)
	}
	if got := s.paths("a.test"); slices.Contains(got, "/private/secret") {
		t.Errorf("a robots-disallowed request reached the site: a.test saw %v", got)
	}
	if n := p.Meta.Rendered.Refused["robots"]; n != 1 {
		t.Errorf("refused %v, want robots: 1", p.Meta.Rendered.Refused)
	}
	var urls []string
	for _, e := range p.Meta.Rendered.Exchanges {
		urls = append(urls, e.URL)
		if len(e.Request) == 0 || len(e.Response) == 0 || (e.URL == s.url("a.test", "/data.json") && string(e.Body) != `{"text":"loaded by fetch"}`) {
			t.Errorf("exchange %s lacks its octets: %q %q %q", e.URL, e.Request, e.Response, e.Body)
		}
	}
	for _, want := range []string{s.url("a.test", "/app.js"), s.url("a.test", "/data.json"), s.url("b.test", "/lib.js")} {
		if !slices.Contains(urls, want) {
			t.Errorf("exchanges %v lack %s", urls, want)
		}
	}
	if v := in.metric(t, `trawl_renderer_requests_refused_total{reason="robots"}`); v != 1 {
		t.Errorf("robots refusals counted %v, want 1", v)
	}

	// A second page with the same script: served from the shared cache, not fetched again.
	p2 := st.page(st.publishTask(s.url("a.test", "/other"), shell))
	if !strings.Contains(string(p2.Body), "loaded by fetch") {
		t.Errorf("second page not rendered: %s", p2.Body)
	}
	if n := strings.Count(strings.Join(s.paths("a.test"), " "), "/app.js"); n != 1 {
		t.Errorf("a.test saw /app.js %d times over two pages, want once (cached): %v", n, s.paths("a.test"))
	}
	for _, e := range p2.Meta.Rendered.Exchanges {
		if e.URL == s.url("a.test", "/app.js") && (!e.Cached || len(e.Body) != 0) {
			t.Errorf("second page's app.js exchange: cached %t with %d body octets, want cached without octets", e.Cached, len(e.Body))
		}
	}
}

// Requests the browser makes to one host never overlap and keep the host's gap, even when
// the page asks for them all at once: the process-wide gap, or a site rule's for the host
// (c.test is never in the frontier: the renderer resolves its rule from the rules it
// watches).
func TestRenderKeepsTheHostsGap(t *testing.T) {
	for _, tt := range []struct {
		name     string
		minDelay time.Duration // TRAWL_MIN_DELAY
		rule     time.Duration // host:c.test's min_delay (0: no rule)
		gap      time.Duration // the gap c.test must keep
	}{
		{name: "the process-wide gap", minDelay: 300 * time.Millisecond, gap: 300 * time.Millisecond},
		{name: "a site rule's gap on a host never in the frontier", minDelay: 50 * time.Millisecond,
			rule: 900 * time.Millisecond, gap: 900 * time.Millisecond},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st := newStack(t)
			if tt.rule != 0 {
				d := policy.Duration(tt.rule)
				sc, err := policy.ParseScope("host:c.test")
				if err != nil {
					t.Fatal(err)
				}
				if _, _, err := policy.NewStore(st.rdb(), "itest").Apply(testwait.Context(t),
					[]policy.Change{{Rule: policy.Rule{Scope: sc, MinDelay: &d}}}, "test", 0); err != nil {
					t.Fatal(err)
				}
			}
			slow := func(w http.ResponseWriter, r *http.Request) {
				time.Sleep(100 * time.Millisecond)
				w.Header().Set("Content-Type", "text/javascript")
				w.Write([]byte("window.n = (window.n || 0) + 1;"))
			}
			s := newSite(t, map[string]http.HandlerFunc{
				"a.test/robots.txt": serve("text/plain", ""),
				"c.test/robots.txt": serve("text/plain", ""),
				"c.test/1.js":       slow, "c.test/2.js": slow, "c.test/3.js": slow,
			})
			st.start(st.config(map[string]string{"TRAWL_RESOLVE": resolve("a.test", "c.test"), "TRAWL_MIN_DELAY": tt.minDelay.String(),
				"TRAWL_RENDER_CACHE_TTL": "0"}))
			shell := `<html><body>`
			for _, n := range []string{"1", "2", "3"} {
				shell += `<script async src="` + s.url("c.test", "/"+n+".js") + `"></script>`
			}
			lease := st.publishTask(s.url("a.test", "/"), shell+`</body></html>`)
			p := st.page(lease)
			if p.Meta.Rendered == nil || p.Meta.Rendered.Failed != "" {
				t.Fatalf("page not rendered: %+v", p.Meta.Rendered)
			}
			var scripts []string
			for _, e := range p.Meta.Rendered.Exchanges {
				if strings.Contains(e.URL, "c.test") {
					scripts = append(scripts, e.URL)
				}
			}
			if len(scripts) != 3 {
				t.Fatalf("exchanges with c.test: %v, want its three scripts", scripts)
			}
			var hits []hit
			for _, h := range s.log() {
				if h.host == "c.test" {
					hits = append(hits, h)
				}
			}
			slices.SortFunc(hits, func(a, b hit) int { return a.start.Compare(b.start) })
			for i := 1; i < len(hits); i++ {
				prev, cur := hits[i-1], hits[i]
				if cur.start.Before(prev.end) {
					t.Errorf("%s started at %s, before %s ended at %s: two requests in flight to one host",
						cur.path, cur.start.Format("15:04:05.000"), prev.path, prev.end.Format("15:04:05.000"))
				} else if d := cur.start.Sub(prev.end); d < tt.gap {
					t.Errorf("%s started %s after %s ended, below the host's gap of %s", cur.path, d, prev.path, tt.gap)
				}
			}
			var paths []string
			for _, h := range hits {
				paths = append(paths, h.path)
			}
			if len(hits) != 4 {
				t.Errorf("c.test saw %v, want robots.txt once and the three scripts", paths)
			}
		})
	}
}

// A browser killed mid-page is restarted and the page rendered on the task's next
// delivery.
func TestRenderSurvivesABrowserCrash(t *testing.T) {
	st := newStack(t)
	s, asked, release := slowScript(t, 5*time.Second)
	in := st.start(st.config(map[string]string{"TRAWL_RESOLVE": resolve("a.test"), "TRAWL_RENDER_CACHE_TTL": "0"}))
	lease := st.publishTask(s.url("a.test", "/"), `<html><body><script src="/slow.js"></script></body></html>`)
	select {
	case <-asked:
	case <-time.After(waitFor):
		t.Fatal("the page never asked for its script")
	}
	pid := in.Svc.Browser().PID()
	if pid == 0 {
		t.Fatal("no browser process")
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill browser %d: %v", pid, err)
	}
	close(release)
	p := st.page(lease)
	if p.Meta.Rendered == nil || p.Meta.Rendered.Failed != "" || !strings.Contains(string(p.Body), `data-slow="ran"`) {
		t.Fatalf("page after the crash: rendered %+v, DOM %s", p.Meta.Rendered, p.Body)
	}
	testwait.Eventually(t, 5*time.Second, "the restart counted", func() bool {
		return in.metric(t, `trawl_renderer_browser_restarts_total{reason="crash"}`) == 1
	})
	if v := in.metric(t, `trawl_renderer_pages_total{result="retried"}`); v != 1 {
		t.Errorf("retried pages %v, want 1", v)
	}
}

// The live site policies are asked before every browser request: a blocked host and a
// URL a rule excludes are refused in the page, counted, and never requested.
func TestRenderFollowsTheSitePolicies(t *testing.T) {
	st := newStack(t)
	s := newSite(t, map[string]http.HandlerFunc{
		"a.test/robots.txt":       serve("text/plain", ""),
		"blocked.test/robots.txt": serve("text/plain", ""),
		"a.test/ads/x.js":         serve("text/javascript", "document.body.setAttribute('data-ads', 'ran');"),
		"a.test/ok.js":            serve("text/javascript", "document.body.setAttribute('data-ok', 'ran');"),
		"blocked.test/x.js":       serve("text/javascript", "document.body.setAttribute('data-blocked', 'ran');"),
	})
	rule := func(scope string, set func(*policy.Rule)) policy.Change {
		sc, err := policy.ParseScope(scope)
		if err != nil {
			t.Fatal(err)
		}
		r := policy.Rule{Scope: sc}
		set(&r)
		return policy.Change{Rule: r}
	}
	yes := true
	store := policy.NewStore(st.rdb(), "itest")
	if _, _, err := store.Apply(testwait.Context(t), []policy.Change{
		rule("host:blocked.test", func(r *policy.Rule) { r.Block = &yes }),
		rule("host:a.test", func(r *policy.Rule) { r.Exclude = []string{"/ads/"} }),
	}, "test", 0); err != nil {
		t.Fatal(err)
	}
	in := st.start(st.config(map[string]string{"TRAWL_RESOLVE": resolve("a.test", "blocked.test")}))
	p := st.page(st.publishTask(s.url("a.test", "/"), `<html><body><script src="/ads/x.js"></script><script src="/ok.js"></script>`+
		`<script src="`+s.url("blocked.test", "/x.js")+`"></script></body></html>`))
	if !strings.Contains(string(p.Body), `data-ok="ran"`) {
		t.Errorf("the allowed script did not run: %s", p.Body)
	}
	if got := s.paths("blocked.test"); len(got) != 0 {
		t.Errorf("blocked.test saw %v, want nothing", got)
	}
	if got := s.paths("a.test"); slices.Contains(got, "/ads/x.js") {
		t.Errorf("an excluded URL was requested: a.test saw %v", got)
	}
	if r := p.Meta.Rendered.Refused; r["blocked"] != 1 || r["scope"] != 1 {
		t.Errorf("refused %v, want blocked: 1, scope: 1", r)
	}
	if v := in.metric(t, `trawl_renderer_requests_refused_total{reason="blocked"}`); v != 1 {
		t.Errorf("blocked refusals counted %v, want 1", v)
	}
}

// Under per-server politeness (TRAWL_POLITENESS=ip) the browser's requests to different
// hosts of one address never overlap and keep the gap, as fetchers' do: the process-wide
// one, or the one a site policy sets for the address block (polite.ServerLimits).
func TestRenderKeepsTheServersGap(t *testing.T) {
	tests := []struct {
		name     string
		minDelay time.Duration // TRAWL_MIN_DELAY
		cidr     time.Duration // a cidr rule's min_delay over the site's address; 0: none
		gap      time.Duration
	}{
		{name: "the process-wide gap", minDelay: 300 * time.Millisecond, gap: 300 * time.Millisecond},
		{name: "an address-block rule's gap", minDelay: 0, cidr: 600 * time.Millisecond, gap: 600 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := newStack(t)
			s := newSite(t, map[string]http.HandlerFunc{
				"a.test/robots.txt": serve("text/plain", ""),
				"c.test/robots.txt": serve("text/plain", ""),
				"d.test/robots.txt": serve("text/plain", ""),
				"c.test/1.js":       serve("text/javascript", "1;"),
				"d.test/1.js":       serve("text/javascript", "1;"),
			})
			if tt.cidr > 0 {
				sc, err := policy.ParseScope("cidr:127.0.0.0/8")
				if err != nil {
					t.Fatal(err)
				}
				d := policy.Duration(tt.cidr)
				if _, _, err := policy.NewStore(st.rdb(), "itest").Apply(testwait.Context(t),
					[]policy.Change{{Rule: policy.Rule{Scope: sc, MinDelay: &d}}}, "test", 0); err != nil {
					t.Fatal(err)
				}
			}
			st.start(st.config(map[string]string{"TRAWL_RESOLVE": resolve("a.test", "c.test", "d.test"), "TRAWL_MIN_DELAY": tt.minDelay.String(),
				"TRAWL_POLITENESS": "ip", "TRAWL_RENDER_CACHE_TTL": "0"}))
			p := st.page(st.publishTask(s.url("a.test", "/"), `<html><body><script async src="`+s.url("c.test", "/1.js")+`"></script>`+
				`<script async src="`+s.url("d.test", "/1.js")+`"></script></body></html>`))
			if p.Meta.Rendered == nil || p.Meta.Rendered.Failed != "" {
				t.Fatalf("page not rendered: %+v", p.Meta.Rendered)
			}
			hits := s.log()
			slices.SortFunc(hits, func(a, b hit) int { return a.start.Compare(b.start) })
			for i := 1; i < len(hits); i++ {
				prev, cur := hits[i-1], hits[i]
				if cur.start.Before(prev.end) {
					t.Errorf("%s%s started before %s%s ended: two requests in flight to one address", cur.host, cur.path, prev.host, prev.path)
				} else if d := cur.start.Sub(prev.end); d < tt.gap {
					t.Errorf("%s%s started %s after %s%s ended, below the gap of %s", cur.host, cur.path, d, prev.host, prev.path, tt.gap)
				}
			}
		})
	}
}

// A page that never finishes (a script that loops for ever) is not retried for ever: after
// TRAWL_RENDER_MAX_ATTEMPTS deliveries it goes on as fetched, saying why, and is counted.
func TestRenderGivesUpOnAPageThatNeverLoads(t *testing.T) {
	st := newStack(t)
	s := newSite(t, map[string]http.HandlerFunc{
		"a.test/robots.txt": serve("text/plain", ""),
		"a.test/loop.js":    serve("text/javascript", "for (;;) {}"),
	})
	in := st.start(st.config(map[string]string{"TRAWL_RESOLVE": resolve("a.test"), "TRAWL_RENDER_TIMEOUT": "2s",
		"TRAWL_RENDER_REQUEST_TIMEOUT": "1s", "TRAWL_RENDER_SETTLE": "100ms", "TRAWL_RENDER_MAX_ATTEMPTS": "2"}))
	shell := `<html><body><p>shell</p><script src="/loop.js"></script></body></html>`
	p := st.page(st.publishTask(s.url("a.test", "/"), shell))
	if p.Meta.Rendered == nil || !strings.Contains(p.Meta.Rendered.Failed, "not rendered after 2 attempts") ||
		!strings.Contains(p.Meta.Rendered.Failed, "time cap") {
		t.Fatalf("rendered %+v, want failed after 2 attempts over the time cap", p.Meta.Rendered)
	}
	if string(p.Body) != shell {
		t.Errorf("a page given up carries %q, want the body as fetched", p.Body)
	}
	// The renderer counts a page once it is published, so just after it reaches the test.
	testwait.Eventually(t, 5*time.Second, "the page counted as failed", func() bool {
		return in.metric(t, `trawl_renderer_pages_total{result="failed"}`) == 1
	})
}

// A browser request is judged in Trawl's form of its URL, not Chromium's: a host written
// with a trailing dot is the host a block names, an escaped unreserved octet is the letter
// a prefix block names, and neither spelling reaches the site.
func TestRenderJudgesRequestsInTrawlsForm(t *testing.T) {
	st := newStack(t)
	s := newSite(t, map[string]http.HandlerFunc{
		"a.test/robots.txt":       serve("text/plain", ""),
		"blocked.test/robots.txt": serve("text/plain", ""),
		"a.test/ok.js":            serve("text/javascript", "document.body.setAttribute('data-ok', 'ran');"),
		"a.test/private/a.js":     serve("text/javascript", "document.body.setAttribute('data-private', 'ran');"),
		"blocked.test/x.js":       serve("text/javascript", "document.body.setAttribute('data-blocked', 'ran');"),
	})
	yes := true
	var changes []policy.Change
	for _, scope := range []string{"host:blocked.test", s.url("a.test", "/private/")} {
		sc, err := policy.ParseScope(scope)
		if err != nil {
			t.Fatal(err)
		}
		changes = append(changes, policy.Change{Rule: policy.Rule{Scope: sc, Block: &yes}})
	}
	if _, _, err := policy.NewStore(st.rdb(), "itest").Apply(testwait.Context(t), changes, "test", 0); err != nil {
		t.Fatal(err)
	}
	// The trailing-dot spelling resolves too, so that a request let through would be seen.
	st.start(st.config(map[string]string{"TRAWL_RESOLVE": resolve("a.test", "blocked.test", "blocked.test.")}))
	dotted := "http://blocked.test.:" + s.port + "/x.js"
	p := st.page(st.publishTask(s.url("a.test", "/"), `<html><body><script src="/ok.js"></script>`+
		`<script src="/%70rivate/a.js"></script><script src="`+dotted+`"></script></body></html>`))
	if !strings.Contains(string(p.Body), `data-ok="ran"`) {
		t.Errorf("the allowed script did not run: %s", p.Body)
	}
	for _, attr := range []string{"data-private", "data-blocked"} {
		if strings.Contains(string(p.Body), attr) {
			t.Errorf("a blocked script ran (%s): %s", attr, p.Body)
		}
	}
	if got := s.paths("blocked.test"); len(got) != 0 {
		t.Errorf("blocked.test saw %v, want nothing", got)
	}
	for _, path := range s.paths("a.test") {
		if strings.Contains(path, "rivate") {
			t.Errorf("a.test saw %s, under a prefix block", path)
		}
	}
	if r := p.Meta.Rendered.Refused; r["blocked"] != 2 {
		t.Errorf("refused %v, want blocked: 2", r)
	}
}

// The quiet window that ends a page starts at the load event: a page whose last request
// ended long before it (here a script holding the main thread 1.5 s) and that loads its
// content from its load handler is taken with that content, not at once. A busy browser
// on a loaded machine makes this case of any script that runs slowly.
func TestRenderWaitsOutTheQuietWindowAfterLoad(t *testing.T) {
	st := newStack(t)
	s := newSite(t, map[string]http.HandlerFunc{
		"a.test/robots.txt": serve("text/plain", ""),
		"a.test/data.json":  serve("application/json", `{"text":"loaded after the load event"}`),
	})
	st.start(st.config(map[string]string{"TRAWL_RESOLVE": resolve("a.test"), "TRAWL_RENDER_SETTLE": "500ms"}))
	shell := `<!doctype html><html><head><link rel="icon" href="data:,"></head><body><div id="root"></div><script>
		var t = Date.now(); while (Date.now() - t < 1500) {}
		addEventListener('load', function () { setTimeout(function () {
			fetch('/data.json').then(function (r) { return r.json(); }).then(function (d) {
				document.getElementById('root').textContent = d.text;
			});
		}, 100); });
	</script></body></html>`
	p := st.page(st.publishTask(s.url("a.test", "/"), shell))
	if p.Meta.Rendered == nil || p.Meta.Rendered.Failed != "" {
		t.Fatalf("page not rendered: %+v", p.Meta.Rendered)
	}
	if !strings.Contains(string(p.Body), "loaded after the load event") {
		t.Errorf("rendered DOM lacks the content its load handler fetched (site asked for %v):\n%s", s.paths("a.test"), p.Body)
	}
}
