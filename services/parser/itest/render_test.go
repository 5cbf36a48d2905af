package itest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/devstack/natsembed"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/policy"
	"github.com/trawl/trawl/shared/renderconf"
	"github.com/trawl/trawl/shared/testwait"
	"github.com/trawl/trawl/shared/topology"
)

const shellPage = `<!doctype html><html lang="en"><head><meta charset="utf-8"/><title>React App</title>
<script defer="defer" src="/static/js/main.8f3a1c2b.js"></script></head>
<body><noscript>You need to enable JavaScript to run this app.</noscript><div id="root"></div>
<a href="/static-link">one static link</a></body></html>`

const renderedDOM = `<html lang="en"><head><title>Harbour app</title></head><body><div id="root">
<h1>Harbour app</h1><p>The lighthouse keeper writes renderedtoken into the log each night while the boats come in.</p>
<ul><li><a href="/app/1">first</a></li><li><a href="/app/2">second</a></li></ul></div></body></html>`

// With TRAWL_RENDER=auto, a shell goes to crawl.render as a task (no document of its own,
// its static links followed), an ordinary page is parsed as always, and the rendered page
// that comes back is parsed like a page: a document marked rendered with the text the
// script wrote, its script-written links followed, and never a second task. Each decision
// is counted, and the notable ones are kept for trawlctl explain.
func TestRenderPipeline(t *testing.T) {
	t.Parallel()
	s := newStack(t, map[string]string{"TRAWL_RENDER": "auto"})
	s.run()

	shell := htmlMeta("http://site.test/app", 0)
	shell.Lease = "lease-shell"
	s.publishPage(shell, shellPage)
	plain := htmlMeta("http://site.test/plain", 0)
	plain.Lease = "lease-plain"
	s.publishPage(plain, strings.Replace(linkPage, "<p>Welcome home.</p>", "<p>"+strings.Repeat("The harbour town kept its old customs long after the railway came. ", 8)+"</p>", 1))
	s.waitSettled()

	tasks := s.takeRenderTasks()
	if len(tasks) != 1 {
		t.Fatalf("%d render tasks, want 1 (the shell's)", len(tasks))
	}
	task := tasks[0]
	if task.Page.Meta.URL != shell.URL || task.Reason != string(renderconf.ReasonShell) || string(task.Page.Body) != shellPage {
		t.Fatalf("render task = %s reason %q body %d octets", task.Page.Meta.URL, task.Reason, len(task.Page.Body))
	}
	docs := s.docs()
	if len(docs) != 1 || docs[0].doc.URL != plain.URL || docs[0].doc.Rendered {
		t.Fatalf("documents %+v: want the plain page's alone, not rendered", docs)
	}
	links := strings.Join(discoveredURLs(s.takeDiscovered()), " ")
	if !strings.Contains(links, "http://site.test/static-link") {
		t.Errorf("the shell's static link was not followed: %s", links)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	why, ok, err := renderconf.Lookup(ctx, s.rdb, "trawl", shell.URL)
	if err != nil || !ok || !why.Render || why.Reason != renderconf.ReasonShell || !strings.Contains(why.Detail, "mount=div#root") {
		t.Fatalf("explain record of the shell = %+v, %t, %v", why, ok, err)
	}
	if _, ok, _ := renderconf.Lookup(ctx, s.rdb, "trawl", plain.URL); ok {
		t.Error("a plain page with plenty of text left an explain record: a plain crawl must write none")
	}

	// The renderer's page comes back.
	back := task.Page.Meta
	back.Rendered = &crawlmsg.Rendered{Reason: task.Reason, RenderedAt: time.Now().UnixMilli(), DurationMs: 120,
		Refused: map[string]int{"robots": 1}}
	m, err := crawlmsg.PageMsg(topology.SubjectPages, &crawlmsg.Page{Meta: back, Body: []byte(renderedDOM)})
	if err != nil {
		t.Fatal(err)
	}
	m.Header.Set(nats.MsgIdHdr, crawlmsg.RenderedMsgID(back.Lease))
	s.publish(m)
	s.waitSettled()

	if n := len(s.takeRenderTasks()); n != 0 {
		t.Fatalf("a rendered page made %d render tasks: it must never be rendered again", n)
	}
	docs = s.docs()
	if len(docs) != 2 {
		t.Fatalf("%d documents, want the plain page's and the rendered page's", len(docs))
	}
	d := docs[1].doc
	if d.URL != shell.URL || !d.Rendered || !strings.Contains(d.Text, "renderedtoken") {
		t.Fatalf("rendered document = %+v", d)
	}
	links = strings.Join(discoveredURLs(s.takeDiscovered()), " ")
	if !strings.Contains(links, "http://site.test/app/1") || !strings.Contains(links, "http://site.test/app/2") {
		t.Errorf("the script-written links were not followed: %s", links)
	}
	why, ok, err = renderconf.Lookup(ctx, s.rdb, "trawl", shell.URL)
	if err != nil || !ok || !why.Render || !strings.Contains(why.Detail, "rendered in 120 ms") || !strings.Contains(why.Detail, "robots:1") {
		t.Fatalf("explain record after rendering = %+v, %t, %v", why, ok, err)
	}
	for series, want := range map[string]float64{
		`trawl_parser_render_decisions_total{decision="render",reason="shell"}`:   1,
		`trawl_parser_render_decisions_total{decision="skip",reason="not-shell"}`: 1,
		`trawl_parser_render_decisions_total{decision="skip",reason="rendered"}`:  1,
	} {
		if got := s.metric(series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
}

// With rendering off (the default) a shell is parsed as fetched: a document, no task.
func TestRenderOff(t *testing.T) {
	t.Parallel()
	s := newStack(t, nil)
	s.run()
	shell := htmlMeta("http://site.test/app", 0)
	shell.Lease = "lease-shell"
	s.publishPage(shell, shellPage)
	s.waitSettled()
	if n := len(s.takeRenderTasks()); n != 0 {
		t.Fatalf("%d render tasks with TRAWL_RENDER unset", n)
	}
	if docs := s.docs(); len(docs) != 1 || docs[0].doc.Rendered {
		t.Fatalf("documents %+v: want the shell's own", docs)
	}
	if got := s.metric(`trawl_parser_render_decisions_total{decision="skip",reason="off"}`); got != 1 {
		t.Errorf("off decisions = %v", got)
	}
}

// takeRenderTasks acts as the renderers: it pulls and acks every task on crawl.render.
func (s *stack) takeRenderTasks() []*crawlmsg.RenderTask {
	s.t.Helper()
	var out []*crawlmsg.RenderTask
	natsembed.TakeAll(s.t, s.js, topology.StreamRender, topology.ConsumerRenderer, waitFor, func(m jetstream.Msg) {
		task, err := crawlmsg.DecodeRenderTask(m.Headers(), m.Data())
		if err != nil {
			s.t.Fatalf("render task: %v", err)
		}
		if id := m.Headers().Get(nats.MsgIdHdr); id != crawlmsg.RenderTaskMsgID(task.Page.Meta.Lease) {
			s.t.Errorf("render task id %q", id)
		}
		out = append(out, task)
	})
	return out
}

func discoveredURLs(ms []discMsg) []string {
	var out []string
	for _, m := range ms {
		for _, g := range m.batch.LinkGroups() {
			for _, u := range g.URLs {
				out = append(out, u.URL)
			}
		}
	}
	return out
}

// A live site policy's render field decides per site, over TRAWL_RENDER, and is named in
// the decision kept for explain: never keeps a shell from the renderer, always sends a
// plain page.
func TestRenderByRule(t *testing.T) {
	s := newStack(t, map[string]string{"TRAWL_RENDER": "auto", "TRAWL_POLICY_POLL": "50ms"})
	s.run()
	ctx := testwait.Context(t)
	st := policy.NewStore(s.rdb, "trawl")
	for scope, v := range map[string]string{"host:never.test": "never", "host:always.test": "always"} {
		sc, err := policy.ParseScope(scope)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := st.Apply(ctx, []policy.Change{{Rule: policy.Rule{Scope: sc, Render: ptr(v)}}}, "test", 0); err != nil {
			t.Fatal(err)
		}
	}
	testwait.Eventually(t, 2*time.Second, "the parser to hold both rules", func() bool {
		return s.metric("trawl_parser_policy_version") == 2
	})
	shell := htmlMeta("http://never.test/app", 0)
	shell.Host, shell.Lease = "never.test", "l-never"
	s.publishPage(shell, shellPage)
	plain := htmlMeta("http://always.test/plain", 0)
	plain.Host, plain.Lease = "always.test", "l-always"
	s.publishPage(plain, linkPage)
	s.waitSettled()
	tasks := s.takeRenderTasks()
	if len(tasks) != 1 || tasks[0].Page.Meta.URL != plain.URL || tasks[0].Reason != string(renderconf.ReasonRule) {
		t.Fatalf("render tasks %v: want the plain page's alone, by rule", tasks)
	}
	why, ok, err := renderconf.Lookup(ctx, s.rdb, "trawl", shell.URL)
	if err != nil || !ok || why.Render || why.Reason != renderconf.ReasonNever || why.Detail != "host:never.test" {
		t.Fatalf("explain record of the shell under never = %+v, %t, %v", why, ok, err)
	}
	if got := s.metric(`trawl_parser_render_decisions_total{decision="render",reason="rule-always"}`); got != 1 {
		t.Errorf("rule-always decisions = %v", got)
	}
}
