package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/trawl/trawl/devstack/stack"
	"github.com/trawl/trawl/devstack/synthweb"
	"github.com/trawl/trawl/shared/testwait"
	"github.com/trawl/trawl/shared/topology"
)

// spaWeb is a small web with the single-page-app section: two ordinary hosts, the app
// host whose links and text only its script writes, and the script's host.
func spaWeb(render bool) synthweb.Config {
	return synthweb.Config{Hosts: 2, PagesPerHost: 4, LinksPerPage: 3, SPA: true, Render: render}
}

// renderEnv turns rendering on. One tab: the renderer's subresource cache serves a script
// it holds, but two tabs asking for it at the same first moment both fetch it (no
// in-flight sharing yet), which the log's exactly-once check would take for a refetch.
func renderEnv() map[string]string {
	return map[string]string{"TRAWL_RENDER": "auto", "TRAWL_RENDER_TIMEOUT": "30s", "TRAWL_RENDER_TABS": "1"}
}

// checkSPADocs says whether every page of the app was indexed with the text its script
// loaded, marked rendered.
func checkSPADocs(t *testing.T, r crawlResult, rendered bool) {
	t.Helper()
	spa, ok := r.web.SPA()
	if !ok {
		t.Fatal("the web has no single-page app")
	}
	docs := readDocs(t, r.stack.JetStream())
	for u, token := range spa.Tokens {
		d, ok := docs[u]
		switch {
		case rendered && (!ok || !d.Rendered || !strings.Contains(d.Text, token)):
			t.Errorf("%s: document %t, rendered %t, text %.80q: want the rendered text with %s", u, ok, d.Rendered, d.Text, token)
		case !rendered && ok && (d.Rendered || strings.Contains(d.Text, token)):
			t.Errorf("%s: rendering off, yet its document is rendered (%t) or has the script's text", u, d.Rendered)
		case !rendered && u != "http://"+spa.Host+":"+portOf(r.web)+"/" && ok:
			t.Errorf("%s: rendering off, yet a script-only page was crawled", u)
		}
	}
	for _, q := range r.reqs {
		if q.Host == spa.Host && strings.HasPrefix(q.Path, "/private/") {
			t.Errorf("the robots-disallowed %s was requested (%s)", q.Path, q.Agent)
		}
	}
}

func portOf(w *synthweb.Web) string {
	o := w.Origin("h")
	return o[strings.LastIndex(o, ":")+1:]
}

// TestRenderSinglePageApp: with rendering on (auto), the app host's shells are detected
// and rendered, the pages only their script links to are crawled and their text, loaded by
// fetch(), is indexed, marked rendered; every browser request is in the synthetic web's
// log as polite as the fetchers' (no robots violation, never two in flight per host, no
// gap below the rule, checkInvariants over the whole log), the script and each JSON asked
// for once, the disallowed path never.
func TestRenderSinglePageApp(t *testing.T) {
	env := testEnv()
	r := crawl(t, spaWeb(true), env, stack.Options{Env: renderEnv()}, nil)
	checkInvariants(t, r, env, 0)
	checkSPADocs(t, r, true)
	spa, _ := r.web.SPA()
	browser := 0
	for _, q := range r.reqs {
		if q.Host == spa.ScriptHost && q.Path == "/js/app.js" || strings.HasPrefix(q.Path, "/api/page") {
			browser++
		}
	}
	if want := 1 + len(spa.API); browser != want {
		t.Errorf("%d browser requests in the log, want %d (the script once, each page's JSON)", browser, want)
	}
	t.Logf("rendered crawl: %d requests, %d pages fetched, in %s", len(r.reqs), r.progress.Fetched, r.took.Round(time.Millisecond))
}

// TestRenderOff: with rendering off (the default) the same web's app pages stay shells:
// the script-only pages are never requested, the shell's document has none of their text,
// and no browser request is made.
func TestRenderOff(t *testing.T) {
	env := testEnv()
	r := crawl(t, spaWeb(false), env, stack.Options{}, nil)
	checkInvariants(t, r, env, 0)
	checkSPADocs(t, r, false)
	for _, p := range r.stack.Procs() {
		if p.Name == stack.Renderer {
			t.Errorf("%s runs with rendering off", p.ID())
		}
	}
}

// TestRendererKilledMidPage: a renderer SIGKILLed while a page waits for its JSON loses
// nothing: the task comes back after the consumer's ack wait, the restarted renderer
// renders it, and every app page is indexed with its text. The JSON the dead browser was
// waiting for is asked for again (one more request of it in the log), and so may the
// script be, whose cache died with the process.
func TestRendererKilledMidPage(t *testing.T) {
	env := testEnv()
	wcfg := spaWeb(true)
	wcfg.SPADelay = 1500 * time.Millisecond
	killed := false
	r := crawlWeb(t, wcfg, env, stack.Options{Env: renderEnv()}, func(st *stack.Stack, web *synthweb.Web) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		p := st.Proc(stack.Renderer, 0)
		if p == nil {
			t.Fatal("no renderer in the stack")
		}
		testwait.Eventually(t, time.Minute, "a browser to wait for a page's JSON", func() bool { return web.SPAWaiting() > 0 })
		if err := p.Kill(); err != nil {
			t.Fatal(err)
		}
		killed = true
		if n := pendingRender(t, ctx, st); n == 0 {
			t.Error("no render task left pending after the kill")
		}
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		if err := st.WaitReady(ctx, p); err != nil {
			t.Fatal(err)
		}
	})
	if !killed {
		t.Fatal("the renderer was never killed")
	}
	checkInvariants(t, r, env, 2)
	checkSPADocs(t, r, true)
}

// pendingRender is the render tasks not yet acked.
func pendingRender(t *testing.T, ctx context.Context, st *stack.Stack) int {
	t.Helper()
	s, err := st.JetStream().Stream(ctx, topology.StreamRender)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return int(info.State.Msgs)
}
