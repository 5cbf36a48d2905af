package service

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/trawl/trawl/services/parser/internal/render"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/policy"
	"github.com/trawl/trawl/shared/renderconf"
	"github.com/trawl/trawl/shared/topology"
)

// decideRender decides whether the page goes to a renderer (render.Decider) and marks a
// rendered page's document.
//
// A page sent to a renderer publishes no document of its own: its text is the shell's (a
// "Loading…", a noscript notice), the same on every page of one application, which an
// indexer would index and the duplicate check would take for copies of one another; the
// rendered page, parsed when it comes back, makes the page's document and its recrawl
// schedule (it carries the fetch's metadata). Its links are followed at once: they are in
// the fetched markup, and the rendered page's links are a superset whose repeats the seen
// test drops.
func (p *processor) decideRender(page *crawlmsg.Page, text string, o *outcome) {
	m := &page.Meta
	if r := m.Rendered; r != nil && o.document != nil {
		o.document.Rendered = r.Failed == ""
		o.document.RenderFailed = r.Failed
	}
	if p.render == nil {
		return
	}
	d := p.render.Decide(render.Page{URL: m.URL, Host: o.document.Host, Rendered: m.Rendered != nil, Text: text, Body: page.Body})
	o.render = d
	if !d.Render {
		return
	}
	if m.Lease == "" {
		// Only a fetcher's page carries a lease, which names the task; a page from
		// elsewhere (a tap's replay, a test) is parsed as it is.
		p.log.Warn("page to render has no lease; parsed as fetched", "url", m.URL)
		o.render.Render, o.render.Reason = false, renderconf.ReasonNoShell
		o.render.Detail = "no lease to name a render task"
		return
	}
	t := &crawlmsg.RenderTask{Page: *page, Reason: string(d.Reason)}
	t.Page.Meta.BodyRef = nil
	o.task, o.document = t, nil
}

// why is what the parser keeps of a decision for trawlctl explain; ok is false for the
// decisions the settings alone explain (off, always, a host or URL setting, a plain page
// with plenty of text in auto mode), so that a crawl of ordinary pages writes nothing.
func (o *outcome) why(page *crawlmsg.PageMeta, now time.Time) (renderconf.Why, bool) {
	d := &o.render
	if d.Reason == "" {
		return renderconf.Why{}, false
	}
	w := renderconf.Why{URL: page.URL, Render: d.Render, Reason: d.Reason, Detail: d.Detail, At: now.UnixMilli()}
	switch {
	case page.Rendered != nil:
		// The rendering came back: what it was and what it did replaces the decision.
		r := page.Rendered
		w.Render, w.Reason = true, renderconf.Reason(r.Reason)
		w.Detail = fmt.Sprintf("rendered in %d ms, %d browser requests answered", r.DurationMs, len(r.Exchanges))
		if len(r.Refused) > 0 {
			w.Detail += fmt.Sprintf(", refused %v", r.Refused)
		}
		if r.Failed != "" {
			w.Render, w.Detail = false, "rendering failed: "+r.Failed+"; parsed as fetched"
		}
		return w, true
	case d.Render, d.Examined, d.Reason == renderconf.ReasonNever:
		return w, true
	}
	return w, false
}

// renderTaskMsg builds the message of o's render task; a body too large for a message is
// stored first as the task's own object (the page's object is removed once the page is
// parsed, and a task may wait longer than that).
func (s *Service) renderTaskMsg(ctx context.Context, o *outcome) (*nats.Msg, error) {
	t := o.task
	if len(t.Page.Body) > s.proc.maxDoc {
		if s.bodies == nil {
			return nil, fmt.Errorf("parser: render task of %s: no body store for its %d-octet body (an Offline parser without NATS)", t.Page.Meta.URL, len(t.Page.Body))
		}
		name := crawlmsg.RenderTaskBodyName(t.Page.Meta.Lease)
		if _, err := s.bodies.PutBytes(ctx, name, t.Page.Body); err != nil {
			return nil, fmt.Errorf("parser: store render task body %s: %w", name, err)
		}
		t.Page.Meta.BodyRef = &crawlmsg.BodyRef{Bucket: topology.BodiesBucket, Name: name, Size: int64(len(t.Page.Body))}
		t.Page.Body = nil
	}
	m, err := crawlmsg.RenderTaskMsg(topology.SubjectRender, t)
	if err != nil {
		return nil, fmt.Errorf("parser: render task: %w", err)
	}
	return m, nil
}

// policyRule is the decider's view of the live site policies: the render field of the
// most specific rule that sets it, and that rule's scope.
func (s *Service) policyRule() render.Rule {
	return func(url string) (string, string) {
		set := s.proc.currentRules()
		if set == nil {
			return "", ""
		}
		r := set.URL(url)
		if r.Render == nil {
			return "", ""
		}
		return *r.Render, r.DecidedBy(policy.FRender)
	}
}

// recordWhys keeps the batch's notable decisions for trawlctl explain, in one pipelined
// round trip. A failure loses only that diagnosis, never a page: it is logged and counted,
// and the batch is acked.
func (s *Service) recordWhys(ctx context.Context, outs []*outcome, errs []error) {
	if s.rdb == nil {
		return
	}
	var whys []renderconf.Why
	for i, o := range outs {
		if o != nil && errs[i] == nil && o.whyRec != nil {
			whys = append(whys, *o.whyRec)
		}
	}
	if len(whys) == 0 {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, s.cfg.Common.AckWait)
	defer cancel()
	if err := renderconf.Record(rctx, s.rdb, s.cfg.Common.RedisPrefix, whys); err != nil {
		s.m.renderWhyFailures.Inc()
		s.log.Warn("render decisions not kept for explain", "pages", len(whys), "err", err)
	}
}
