// Package service wires the renderer: it consumes render tasks from the shared `renderer`
// durable (one per free tab, TRAWL_RENDER_TABS), loads each page in headless Chromium with
// every browser request answered by Trawl (packages render and answer), and publishes the
// rendered page on crawl.pages; a task is acked only once its page is stored. A browser
// that crashed, hung or grew past its memory cap is restarted and its pages retried, up
// to TRAWL_RENDER_MAX_ATTEMPTS deliveries; a page still failing then is passed on as it
// was fetched, marked with why it could not be rendered. A killed renderer loses nothing:
// its tasks are unacked and come back after the ack wait.
package service

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/services/renderer/internal/answer"
	"github.com/trawl/trawl/services/renderer/internal/browser"
	"github.com/trawl/trawl/services/renderer/internal/config"
	"github.com/trawl/trawl/services/renderer/internal/render"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/policy"
	"github.com/trawl/trawl/shared/polite"
	"github.com/trawl/trawl/shared/politeness"
	"github.com/trawl/trawl/shared/runner"
	"github.com/trawl/trawl/shared/safedial"
	"github.com/trawl/trawl/shared/topology"
)

// Service is a running renderer.
type Service struct {
	cfg     config.Config
	log     *slog.Logger
	nc      *nats.Conn
	js      jetstream.JetStream
	run     *runner.Runner
	cons    jetstream.Consumer
	bodies  jetstream.ObjectStore
	browser *browser.Browser
	answer  *answer.Answerer
	render  *render.Renderer
	rules   *policy.Watcher // the live site policies, kept current by Run
	m       *metrics
	maxMsg  int32
}

// New connects to NATS and Redis, declares the topology, starts the browser and opens the
// metrics listener. The caller must call Run or Close.
func New(ctx context.Context, cfg config.Config, log *slog.Logger) (*Service, error) {
	r, err := runner.Start(ctx, topology.ServiceRenderer, cfg.Common, log, runner.WithRedis(), runner.WithBodies())
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*Service, error) { r.Close(); return nil, err }
	cons, err := r.JS.Consumer(ctx, topology.StreamRender, topology.ConsumerRenderer)
	if err != nil {
		return fail(fmt.Errorf("renderer: consumer %s/%s: %w", topology.StreamRender, topology.ConsumerRenderer, err))
	}
	m := newMetrics(r.Metrics)
	var cache *answer.Cache
	if cfg.CacheTTL > 0 {
		st, err := natsx.ObjectStore(ctx, r.JS, topology.RenderCache(r.Topology, cfg.CacheTTL, cfg.CacheMaxBytes))
		if err != nil {
			return fail(fmt.Errorf("renderer: object store %s: %w", topology.RenderCacheBucket, err))
		}
		cache = answer.NewCache(st, log)
	}
	_, exclude, err := cfg.Scope.Regexps()
	if err != nil {
		return fail(err)
	}
	// policyVerdict reads block and, through Admit, the scope fields; a request carries the
	// request fields, and a server claim the address limits: the fields a fetcher reads.
	watcher, err := policy.NewWatcher(ctx, policy.NewStore(r.Redis, cfg.Common.RedisPrefix), cfg.Policy.Poll,
		policy.OnlyFields(polite.Fields()...))
	if err != nil {
		return fail(fmt.Errorf("renderer: %w", err))
	}
	dialer := &safedial.Dialer{Policy: safedial.NewPolicy(cfg.AllowCIDRs...), Timeout: min(cfg.DialTimeout, cfg.RequestTimeout)}
	if len(cfg.Resolve) > 0 {
		dialer.Resolver = &safedial.StaticResolver{Names: cfg.Resolve, Next: dialer.Resolver}
	}
	var servers *politeness.Servers
	if cfg.Politeness.Per == politeness.PerIP {
		servers = politeness.NewServers(r.Redis, cfg.Common.RedisPrefix, cfg.Politeness)
	}
	ans := answer.New(answer.Config{
		UserAgent:      cfg.UserAgent,
		RobotsAgent:    cfg.RobotsAgent,
		MaxURLLength:   cfg.Scope.MaxURLLength,
		Norm:           cfg.Norm,
		Exclude:        exclude,
		RequestTimeout: cfg.RequestTimeout,
		MaxBody:        cfg.MaxBody,
		CacheMaxEntry:  cfg.CacheMaxEntry,
		Policy:         policyVerdict(watcher),
		Rules:          func(rawURL string) policy.Resolved { return watcher.Current().URL(rawURL) },
		ServerLimits: func(host string, addr netip.Addr) politeness.ServerLimits {
			return polite.ServerLimits(watcher.Current(), host, addr)
		},
		Requests: polite.New(cfg.Polite(), nil),
	},
		polite.NewRobotsStores(r.Redis, cfg.Robots.StoreOptions(cfg.Common.RedisPrefix, cfg.RobotsAgent)),
		politeness.NewClaimer(r.Redis, cfg.Common.RedisPrefix, cfg.Common.Shards, cfg.Politeness, watcher.Current),
		servers, dialer, cache, m, log)
	r.OnClose(ans.Close)
	br, err := browser.Start(ctx, browser.Options{
		Path: cfg.Chromium, JSHeap: cfg.JSHeap, MaxRSS: cfg.MaxRSS, Log: log,
		UID: cfg.BrowserUID, GID: cfg.BrowserGID, AllowUnsandboxed: cfg.AllowUnsandboxed,
		OnRestart: func(reason string) { m.restarts.WithLabelValues(reason).Inc() },
	})
	if err != nil {
		return fail(fmt.Errorf("renderer: %w", err))
	}
	r.OnClose(br.Close)
	s := &Service{
		cfg: cfg, log: log, nc: r.NC, js: r.JS, run: r, cons: cons, bodies: r.Bodies,
		browser: br, answer: ans, rules: watcher, m: m, maxMsg: r.Topology.MaxMsgSize,
		render: render.New(ans, render.Options{Timeout: cfg.Timeout, Settle: cfg.Settle, Log: log,
			OnRefused: func(reason string) { m.refused.WithLabelValues(reason).Inc() }}),
	}
	return s, nil
}

// policyVerdict refuses what the live rules block, and what a rule excludes: a page's
// requisite has no link depth of its own, and is not held to a rule's includes (a page's
// script from a CDN is part of the page), as with TRAWL_EXCLUDE and TRAWL_INCLUDE.
func policyVerdict(w *policy.Watcher) func(rawURL string) (string, string) {
	return func(rawURL string) (string, string) {
		r := w.Current().URL(rawURL)
		if r.Blocked() {
			return answer.RefusedBlocked, string(policy.FBlock) + " of " + r.DecidedBy(policy.FBlock)
		}
		if ok, why := r.Admit(rawURL, 0); !ok && strings.HasPrefix(why, string(policy.FExclude)+" ") {
			return answer.RefusedScope, why
		}
		return "", ""
	}
}

// Addr is the address /metrics, /healthz and /readyz are served on.
func (s *Service) Addr() string { return s.run.Addr() }

// Browser is the service's browser (tests kill its process).
func (s *Service) Browser() *browser.Browser { return s.browser }

// Close releases a Service that is not Run.
func (s *Service) Close() { s.run.Close() }

// Run consumes render tasks until ctx ends, finishes the pages in hand and closes.
func (s *Service) Run(ctx context.Context) error {
	s.run.Go("policy watch", s.rules.Run)
	s.run.Go("browser watch", func(ctx context.Context) error {
		s.browser.Watch(ctx, 2*time.Second, func(rss int64) { s.m.rss.Set(float64(rss)) })
		return nil
	})
	s.run.Go("consume", func(ctx context.Context) error {
		opts := s.run.ConsumeOptions(s.m.terminated)
		opts.Batch = s.cfg.Tabs
		opts.DrainTimeout = s.cfg.Timeout + 10*time.Second
		return natsx.ConsumeEach(ctx, s.cons, opts, s.handle)
	})
	s.log.Info("renderer consuming", "tabs", s.cfg.Tabs, "timeout", s.cfg.Timeout, "metrics", s.Addr())
	return s.run.RunLoops(ctx)
}

// handle renders one task. Errors are temporary (nak, retried with backoff) except a
// malformed task or a body that is gone (terminated). A task's body is deleted only once
// its page is stored, so a task delivered again without its body was done (its ack lost
// or late): it is acked, not parked.
func (s *Service) handle(ctx context.Context, m jetstream.Msg) error {
	task, err := crawlmsg.DecodeRenderTask(m.Headers(), m.Data())
	if err != nil {
		return err
	}
	// While the page renders the task is marked in progress, so the ack wait need not
	// cover the page's time cap; a dead renderer stops marking it and it comes back.
	stop := s.keepInProgress(ctx, m)
	defer stop()
	delivered := uint64(1)
	if md, err := m.Metadata(); err == nil {
		delivered = md.NumDelivered
	}
	p := &task.Page
	body := p.Body
	if ref := p.Meta.BodyRef; ref != nil {
		gctx, cancel := context.WithTimeout(ctx, s.cfg.Common.AckWait)
		body, err = s.bodies.GetBytes(gctx, ref.Name)
		cancel()
		if errors.Is(err, jetstream.ErrObjectNotFound) && delivered > 1 {
			s.m.pages.WithLabelValues("done_before").Inc()
			s.log.Warn("render task delivered again after its page was stored: acked, not rendered again", "url", p.Meta.URL, "object", ref.Name)
			return nil
		}
		if errors.Is(err, jetstream.ErrObjectNotFound) {
			return natsx.Permanent(fmt.Errorf("render task %s: body %s is gone", p.Meta.URL, ref.Name))
		}
		if err != nil {
			return fmt.Errorf("render task %s: body %s: %w", p.Meta.URL, ref.Name, err)
		}
	}
	res, rerr := s.renderOnce(ctx, p, body)
	rendered := &crawlmsg.Rendered{Reason: task.Reason}
	out := body
	switch {
	case rerr == nil:
		rendered.RenderedAt, rendered.DurationMs = res.Started.UnixMilli(), res.Duration.Milliseconds()
		rendered.Exchanges, rendered.Refused = res.Exchanges, res.Refused
		out = res.DOM
		s.m.duration.Observe(res.Duration.Seconds())
	case ctx.Err() != nil:
		return rerr
	case delivered < uint64(s.cfg.MaxAttempts):
		s.m.pages.WithLabelValues("retried").Inc()
		s.log.Warn("page not rendered; retried", "url", p.Meta.URL, "delivery", delivered, "of", s.cfg.MaxAttempts, "err", rerr)
		return rerr
	default:
		// Never retried for ever: the page goes on as fetched, once, saying why.
		rendered.RenderedAt = time.Now().UnixMilli()
		rendered.Failed = fmt.Sprintf("not rendered after %d attempts: %v", delivered, rerr)
		s.log.Error("page given up: passed on unrendered", "url", p.Meta.URL, "attempts", delivered, "err", rerr)
	}
	if err := s.publish(ctx, task, rendered, out); err != nil {
		return err
	}
	if rendered.Failed != "" {
		s.m.pages.WithLabelValues("failed").Inc()
	} else {
		s.m.pages.WithLabelValues("rendered").Inc()
		s.m.exchanges.Add(float64(len(rendered.Exchanges)))
	}
	if ref := p.Meta.BodyRef; ref != nil {
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if err := s.bodies.Delete(dctx, ref.Name); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
			s.log.Warn("render task body not deleted", "object", ref.Name, "err", err)
		}
		cancel()
	}
	return nil
}

// errTimeCap marks a page that did not render within TRAWL_RENDER_TIMEOUT.
var errTimeCap = errors.New("over the page's time cap")

// renderOnce renders p in a new tab. An error names what went wrong: the browser restarted
// under the page (crash, hang, memory), the time cap, or the page's own failure.
func (s *Service) renderOnce(ctx context.Context, p *crawlmsg.Page, body []byte) (*render.Result, error) {
	s.m.tabs.Inc()
	defer s.m.tabs.Dec()
	tab, err := s.browser.NewTab(ctx)
	if err != nil {
		return nil, err
	}
	defer tab.Close()
	res, err := s.render.Render(ctx, tab.Ctx, render.Page{URL: p.Meta.URL, Status: p.Meta.Status, Header: p.Meta.Header, Body: body})
	if err == nil {
		return res, nil
	}
	if lost, reason := tab.Lost(); lost {
		return nil, fmt.Errorf("%w (%s) while rendering: %v", browser.ErrRestarted, reason, err)
	}
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		// A page over its cap may be a hung browser: ask it, restart it if it does not answer.
		tab.Check()
		if lost, reason := tab.Lost(); lost {
			return nil, fmt.Errorf("%w (%s) while rendering: %v", browser.ErrRestarted, reason, err)
		}
		return nil, fmt.Errorf("%w (%s): %v", errTimeCap, s.cfg.Timeout, err)
	}
	return nil, err
}

// keepInProgress marks m in progress every third of the ack wait until the returned func
// is called.
func (s *Service) keepInProgress(ctx context.Context, m jetstream.Msg) func() {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		t := time.NewTicker(max(s.cfg.Common.AckWait/3, time.Second))
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				_ = m.InProgress()
			}
		}
	}()
	return cancel
}

// publish stores the rendered page: bodies that would not fit the message go to the
// bodies object store first (the DOM as render:<attempt>, an exchange's body as
// render:<attempt>:<i>), then the page, with Nats-Msg-Id render:<lease>.
//
// The objects are named by this attempt (the lease and a random id), never by the lease
// alone: a task rendered again after its page was stored (an ack lost, a renderer gone
// before acking) renders other bodies (another DOM, a script that changed), and its page
// is dropped as a duplicate; objects under the lease's names would be rewritten under the
// stored page, which a lagging parser or archiver would then find the wrong size or,
// worse, the size of the other body. A duplicate's objects are deleted at once; those of
// an attempt that never got its page stored are the parser's sweeper's, as any body.
func (s *Service) publish(ctx context.Context, task *crawlmsg.RenderTask, rendered *crawlmsg.Rendered, dom []byte) error {
	url := task.Page.Meta.URL
	room := func(metaLen int) int64 {
		return topology.PageInlineMax(s.cfg.BodyInlineMax, s.nc.MaxPayload(), s.maxMsg, metaLen)
	}
	var stored []string
	put := func(name string, b []byte) (*crawlmsg.BodyRef, error) {
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if _, err := s.bodies.Put(pctx, jetstream.ObjectMeta{Name: name}, bytes.NewReader(b)); err != nil {
			return nil, fmt.Errorf("store %s: %w", name, err)
		}
		stored = append(stored, name)
		return &crawlmsg.BodyRef{Bucket: topology.BodiesBucket, Name: name, Size: int64(len(b))}, nil
	}
	msg, err := renderedMsg(task, rendered, dom, attemptName(task.Page.Meta.Lease), room, put)
	if err != nil {
		// No page names them: they can go now.
		s.deleteObjects(ctx, stored)
		return err
	}
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ack, err := s.js.PublishMsg(pctx, msg)
	if err != nil {
		// The page may be stored all the same (a lost pub-ack): its objects stay.
		return fmt.Errorf("publish rendered page %s: %w", url, err)
	}
	if ack.Duplicate {
		// An earlier attempt's page is the one stored; it names that attempt's objects.
		s.log.Info("rendered page stored by an earlier attempt; this attempt's objects removed", "url", url, "objects", len(stored))
		s.deleteObjects(ctx, stored)
	}
	return nil
}

// renderedMsg is the message of task's rendered page on crawl.pages, with its Nats-Msg-Id:
// the fetched page's metadata less what described the fetched body, rendered, and dom as
// its body. Bodies that would not fit it are put (pageOut).
func renderedMsg(task *crawlmsg.RenderTask, rendered *crawlmsg.Rendered, dom []byte, attempt string, room func(metaLen int) int64,
	put func(name string, b []byte) (*crawlmsg.BodyRef, error)) (*nats.Msg, error) {
	meta := task.Page.Meta
	meta.BodyRef, meta.Capture, meta.Rendered = nil, nil, rendered
	meta.ContentType, meta.Charset = "text/html", "utf-8"
	meta.Header = withoutBodyHeaders(meta.Header)
	page, err := pageOut(meta, rendered, dom, attempt, room, put)
	if err != nil {
		return nil, err
	}
	msg, err := crawlmsg.PageMsg(topology.SubjectPages, page)
	if err != nil {
		return nil, fmt.Errorf("encode rendered page %s: %w", meta.URL, err)
	}
	msg.Header.Set(nats.MsgIdHdr, crawlmsg.RenderedMsgID(meta.Lease))
	return msg, nil
}

// pageOut is the rendered page's message content: bodies that would not fit it are put
// (named after attempt) and referred to. room(metaLen) is how much payload may travel
// inline beside a Trawl-Meta of metaLen octets (topology.PageInlineMax).
func pageOut(meta crawlmsg.PageMeta, rendered *crawlmsg.Rendered, dom []byte, attempt string, room func(metaLen int) int64,
	put func(name string, b []byte) (*crawlmsg.BodyRef, error)) (*crawlmsg.Page, error) {
	metaLen, used, err := largestForm(meta, rendered, dom, attempt)
	if err != nil {
		return nil, err
	}
	budget := room(metaLen)
	for i := range rendered.Exchanges {
		e := &rendered.Exchanges[i]
		if used+int64(len(e.Body)) > budget/2 && len(e.Body) > 0 {
			ref, err := put(crawlmsg.RenderedExchangeBodyName(attempt, i), e.Body)
			if err != nil {
				return nil, err
			}
			e.BodyRef, e.BodySize, e.Body = ref, ref.Size, nil
			continue
		}
		used += int64(len(e.Body))
	}
	page := &crawlmsg.Page{Meta: meta, Body: dom}
	if used+int64(len(dom)) > budget {
		ref, err := put(crawlmsg.RenderedBodyName(attempt), dom)
		if err != nil {
			return nil, err
		}
		page.Meta.BodyRef, page.Body = ref, nil
	}
	return page, nil
}

// largestForm measures the rendered page's message with the DOM and every exchange's body
// by reference: the length of its Trawl-Meta (the response headers, redirects, the
// rendering's summary: a few hundred octets to tens of KiB), and of its payload (the
// exchanges' request and response heads and their list, whose entries name a URL each, up
// to a few KiB). Which bodies go by reference depends on the room these leave, and sending
// one lengthens both (its BodyRef in the meta or in the list): measured in this largest
// form, the message sent is never longer than the one its budget was made with.
func largestForm(meta crawlmsg.PageMeta, rendered *crawlmsg.Rendered, dom []byte, attempt string) (metaLen int, payload int64, err error) {
	r := *rendered
	r.Exchanges = make([]crawlmsg.Exchange, len(rendered.Exchanges))
	for i, e := range rendered.Exchanges {
		if len(e.Body) > 0 {
			e.BodyRef = &crawlmsg.BodyRef{Bucket: topology.BodiesBucket, Name: crawlmsg.RenderedExchangeBodyName(attempt, i), Size: int64(len(e.Body))}
			e.BodySize, e.Body = e.BodyRef.Size, nil
		}
		r.Exchanges[i] = e
	}
	meta.Rendered = &r
	meta.BodyRef = &crawlmsg.BodyRef{Bucket: topology.BodiesBucket, Name: crawlmsg.RenderedBodyName(attempt), Size: int64(len(dom))}
	m, err := crawlmsg.PageMsg(topology.SubjectPages, &crawlmsg.Page{Meta: meta})
	if err != nil {
		return 0, 0, fmt.Errorf("measure rendered page %s: %w", meta.URL, err)
	}
	return len(m.Header.Get(crawlmsg.MetaHeader)), int64(len(m.Data)), nil
}

// attemptName names one rendering of the task of lease: the lease and 64 random bits, so
// no two attempts (on one renderer or several, across restarts) share an object name.
func attemptName(lease string) string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return lease + "." + hex.EncodeToString(b[:])
}

// deleteObjects removes objects of this attempt that no stored page names; a failure only
// leaves them to the parser's body sweeper.
func (s *Service) deleteObjects(ctx context.Context, names []string) {
	if len(names) == 0 {
		return
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	for _, name := range names {
		if err := s.bodies.Delete(dctx, name); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
			s.log.Warn("object of a rendering no page names not deleted; left to the body sweeper", "object", name, "err", err)
		}
	}
}

// withoutBodyHeaders drops the headers that describe the fetched body's transfer; the
// rendered DOM is another body.
func withoutBodyHeaders(h map[string][]string) map[string][]string {
	out := make(map[string][]string, len(h))
	for k, v := range h {
		switch http.CanonicalHeaderKey(k) {
		case "Content-Length", "Content-Encoding", "Transfer-Encoding", "Content-Type":
			continue
		}
		out[k] = v
	}
	out["Content-Type"] = []string{"text/html; charset=utf-8"}
	return out
}
