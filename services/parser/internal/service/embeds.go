package service

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/trawl/trawl/services/parser/internal/config"
	"github.com/trawl/trawl/services/parser/internal/extract"
	"github.com/trawl/trawl/services/parser/internal/scope"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/obs"
	"github.com/trawl/trawl/shared/topology"
)

// embedSwitch says whether pages' requisites are found and published (TRAWL_EMBEDS). In
// auto it is on while the archiver's durable consumer of crawl.pages exists: the parser
// cannot see TRAWL_ARCHIVE_DIR, but a deployment that archives has that consumer, and one
// that does not would fetch requisites nobody keeps.
type embedSwitch struct {
	mode  string               // config.EmbedsAuto, EmbedsOn, EmbedsOff
	on    atomic.Bool          // EmbedsOn
	watch *natsx.ConsumerWatch // auto only
}

// newEmbedSwitch reads the mode; in auto it watches the archiver's consumer.
func newEmbedSwitch(ctx context.Context, mode string, nc *nats.Conn, js jetstream.JetStream, log *slog.Logger) *embedSwitch {
	e := &embedSwitch{mode: mode}
	switch mode {
	case config.EmbedsOn:
		e.on.Store(true)
		return e
	case config.EmbedsOff:
		return e
	}
	e.watch = natsx.WatchConsumer(ctx, nc, js, topology.StreamPages, topology.ConsumerArchiver, log, func(on bool) {
		log.Info("embeds: page requisites turned "+map[bool]string{true: "on: the archiver's consumer exists", false: "off: the archiver's consumer is gone"}[on],
			"stream", topology.StreamPages, "consumer", topology.ConsumerArchiver)
	})
	return e
}

// On reports whether requisites are wanted now.
func (e *embedSwitch) On() bool {
	if e == nil {
		return false
	}
	if e.watch != nil {
		return e.watch.Exists()
	}
	return e.on.Load()
}

// refresh looks at the archiver's consumer again in auto when the last look is old or an
// advisory came since.
func (e *embedSwitch) refresh(ctx context.Context) {
	if e != nil {
		e.watch.Refresh(ctx)
	}
}

func (e *embedSwitch) close() {
	if e != nil {
		e.watch.Close()
	}
}

// embedCounts are one page's requisite figures for the metrics.
type embedCounts struct {
	// requisite says the page was read for its requisites only: a page fetched as one (a
	// frame's document, a style sheet), or a style sheet; no document is published.
	requisite bool
	found     int
	emitted   int
	rejected  scope.Rejected
}

// isCSS reports whether the page is a style sheet.
func isCSS(m *crawlmsg.PageMeta) bool { return m.ContentType == "text/css" }

// processRequisite handles the pages that are no document: a page fetched as a requisite
// (Kind embed) and a style sheet. ok is false for any other page, which process handles.
// A requisite whose body is HTML (a frame beyond where links go, or a requisite answered
// with a page) is read for its own requisites and nothing else: no document, no links,
// since a link found in it would lead outside what the crawl's links reach. A style sheet
// is read for url() and @import. Every other body is never parsed.
func (p *processor) processRequisite(page *crawlmsg.Page) (*outcome, bool) {
	m := &page.Meta
	sheet := isCSS(m) && p.embeds.On()
	if m.Kind != crawlmsg.KindEmbed && !sheet {
		return nil, false
	}
	o := &outcome{embed: &embedCounts{requisite: true}}
	if !p.embeds.On() || m.Status < 200 || m.Status > 299 || !(m.IsHTML() || isCSS(m)) {
		o.skipped = true
		return o, true
	}
	if p.leftEncoded(m, o) {
		return o, true
	}
	start := time.Now()
	var res *extract.Result
	var err error
	if isCSS(m) {
		res, err = p.safeExtractCSS(page)
	} else {
		opt := p.extract
		opt.Embeds, opt.MaxTextBytes = true, -1
		res, err = p.safeExtractWith(page, opt)
	}
	o.duration = time.Since(start)
	o.parseErr = err
	if err != nil {
		p.log.Warn("requisite read with errors", "url", m.URL, "err", err)
	}
	found, rej := p.filter.SelectEmbeds(scope.Page{URL: m.URL, Depth: m.Depth, Embeds: m.Embeds, Rules: p.currentRules()}, res.Embeds, nil)
	o.embed.found, o.embed.emitted, o.embed.rejected = len(res.Embeds), len(found), rej
	if len(found) > 0 {
		o.follow = &crawlmsg.LinkGroup{Source: m.URL, URLs: found}
	}
	return o, true
}

// addEmbeds adds an HTML page's requisites to the links it follows.
func (p *processor) addEmbeds(m *crawlmsg.PageMeta, res *extract.Result, o *outcome, found []crawlmsg.Discovered) []crawlmsg.Discovered {
	if !p.embeds.On() {
		return found
	}
	embeds, rej := p.filter.SelectEmbeds(scope.Page{URL: m.URL, Depth: m.Depth, Embeds: m.Embeds, Rules: p.currentRules()}, res.Embeds, found)
	o.embed = &embedCounts{found: len(res.Embeds), emitted: len(embeds), rejected: rej}
	return append(found, embeds...)
}

// extractOptionsNow are the extraction options for a page handled now.
func (p *processor) extractOptionsNow() extract.Options {
	opt := p.extract
	opt.Embeds = p.embeds.On()
	return opt
}

// safeExtractWith is safeExtract with other options.
func (p *processor) safeExtractWith(page *crawlmsg.Page, opt extract.Options) (res *extract.Result, err error) {
	defer func() {
		if r := recover(); r != nil {
			res, err = &extract.Result{}, errPanic(r)
		}
	}()
	return extract.Extract(extract.Input{
		URL:         page.Meta.URL,
		Body:        page.Body,
		ContentType: contentType(&page.Meta),
		Header:      page.Meta.Header,
	}, opt)
}

func errPanic(r any) error { return fmt.Errorf("parser: extract panicked: %v", r) }

// safeExtractCSS is safeExtract for a style sheet.
func (p *processor) safeExtractCSS(page *crawlmsg.Page) (res *extract.Result, err error) {
	defer func() {
		if r := recover(); r != nil {
			res, err = &extract.Result{}, errPanic(r)
		}
	}()
	return extract.ExtractCSS(extract.CSSInput{URL: page.Meta.URL, Body: page.Body, ContentType: contentType(&page.Meta)}, p.extract)
}

type embedMetrics struct {
	pages    *prometheus.CounterVec
	found    prometheus.Counter
	emitted  prometheus.Counter
	rejected *prometheus.CounterVec
}

func newEmbedMetrics(om *obs.Metrics) *embedMetrics {
	m := &embedMetrics{
		pages:    om.CounterVec("requisite_pages_total", "Pages read for their requisites only, no document published: fetched as a requisite (a style sheet, a frame's document) or a style sheet; skipped when requisites are off or the body is neither HTML nor CSS; encoded (not read) when its body is still content-coded (a Content-Encoding the fetcher could not decode).", "result"),
		found:    om.Counter("embeds_total", "Distinct valid page requisites found (images, style sheets, scripts, fonts, media, frames) while requisites are on."),
		emitted:  om.Counter("embeds_emitted_total", "Page requisites published to crawl.discovered as kind embed."),
		rejected: om.CounterVec("embeds_rejected_total", "Page requisites not published, by rule (embed_hops: past TRAWL_MAX_EMBED_HOPS). A requisite also followed as a link is neither.", "reason"),
	}
	for _, r := range []string{"read", "skipped", resultEncoded} {
		m.pages.WithLabelValues(r)
	}
	for _, r := range scope.Reasons {
		m.rejected.WithLabelValues(string(r))
	}
	return m
}

// record adds one settled page's requisite figures; requisite reports whether the page was
// read for requisites only, and is then counted nowhere else.
func (m *embedMetrics) record(o *outcome) (requisite bool) {
	c := o.embed
	if c.requisite {
		r := "read"
		switch {
		case o.encoded:
			r = resultEncoded
		case o.skipped:
			r = "skipped"
		}
		m.pages.WithLabelValues(r).Inc()
	}
	m.found.Add(float64(c.found))
	m.emitted.Add(float64(c.emitted))
	for r, n := range c.rejected {
		m.rejected.WithLabelValues(string(r)).Add(float64(n))
	}
	return c.requisite
}
