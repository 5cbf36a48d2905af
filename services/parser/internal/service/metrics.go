package service

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/trawl/trawl/services/parser/internal/contentdup"
	"github.com/trawl/trawl/services/parser/internal/scope"
	"github.com/trawl/trawl/shared/obs"
	"github.com/trawl/trawl/shared/policy"
	"github.com/trawl/trawl/shared/renderconf"
	"github.com/trawl/trawl/shared/runner"
)

type metrics struct {
	pages             *prometheus.CounterVec
	links             prometheus.Counter
	emitted           prometheus.Counter
	rejected          *prometheus.CounterVec
	redirects         *prometheus.CounterVec // result: followed, hops, or a scope.RedirectReasons
	dropped           *prometheus.CounterVec
	parseErrors       prometheus.Counter
	parseDuration     prometheus.Histogram
	terminated        *prometheus.CounterVec
	limited           *prometheus.CounterVec
	trimmed           prometheus.Counter
	publishFailures   prometheus.Counter
	duplicates        *prometheus.CounterVec
	nearDupSkipped    prometheus.Counter
	dupCheckDuration  prometheus.Histogram
	dupCheckFailures  prometheus.Counter
	bucketsFull       prometheus.Counter
	bodies            *prometheus.CounterVec // result: read, missing, parsed_before, deleted
	render            *prometheus.CounterVec // decision: render, skip; reason: renderconf.Reason
	renderWhyFailures prometheus.Counter
	sitemaps          *sitemapMetrics
	embeds            *embedMetrics
	// embedsOn reports the requisites switch for trawl_parser_embeds_on; rules, the live
	// site policies the parser holds links to (nil: TRAWL_PARSER_POLICY=false). Both are
	// set once built, before the metrics are served.
	embedsOn func() bool
	rules    *policy.Watcher
}

func newMetrics(om *obs.Metrics) *metrics {
	m := &metrics{
		pages:             om.CounterVec("pages_total", "Pages taken from crawl.pages: parsed (a document was published), skipped (not HTML, not 2xx) or encoded (not parsed: its body is still content-coded, a Content-Encoding the fetcher could not decode).", "result"),
		links:             om.Counter("links_total", "Distinct valid outlinks extracted from parsed pages."),
		emitted:           om.Counter("links_emitted_total", "Outlinks published to crawl.discovered (links_total minus links_rejected_total)."),
		rejected:          om.CounterVec("links_rejected_total", "Extracted outlinks not published to crawl.discovered, by scope rule.", "reason"),
		redirects:         om.CounterVec("redirects_total", "3xx Locations by what became of them: followed (published to crawl.discovered), hops (past TRAWL_MAX_REDIRECTS), or the scope rule that refused the target, as in links_rejected_total.", "result"),
		dropped:           om.CounterVec("links_dropped_total", "Link candidates discarded during extraction: scheme (javascript:, mailto: …), invalid, fragment (#… only), limit (beyond the per-page link cap).", "reason"),
		parseErrors:       om.Counter("parse_errors_total", "Pages whose extraction failed part-way; their document holds what was extracted."),
		parseDuration:     om.Histogram("parse_duration_seconds", "Time to extract one page.", prometheus.ExponentialBuckets(0.0001, 4, 9)),
		terminated:        om.CounterVec("messages_terminated_total", runner.TerminatedHelp, "reason"),
		limited:           om.CounterVec("extract_limited_total", "Pages on which an extraction limit was reached: bytes, tokens (rest of page unseen), links, text.", "limit"),
		trimmed:           om.Counter("docs_trimmed_total", "Documents whose links or text were cut to fit the stream's message size."),
		publishFailures:   om.Counter("publish_failures_total", "Batches whose publish wave failed; their pages are redelivered."),
		duplicates:        om.CounterVec("duplicates_total", "Documents published flagged as duplicates of an earlier page: exact (same visible text) or near (SimHash within TRAWL_NEAR_DUP_DISTANCE bits).", "kind"),
		nearDupSkipped:    om.Counter("near_dup_skipped_total", "Documents checked for exact duplicates only: fewer words than TRAWL_NEAR_DUP_MIN_WORDS."),
		dupCheckDuration:  om.Histogram("dedup_check_duration_seconds", "Time of one batch's duplicate check in Redis (one script call).", prometheus.ExponentialBuckets(0.0001, 4, 9)),
		dupCheckFailures:  om.Counter("dedup_check_failures_total", "Batches whose duplicate check failed (Redis); their pages are redelivered."),
		bucketsFull:       om.Counter("dedup_buckets_full_total", "SimHash band insertions refused because the bucket held TRAWL_NEAR_DUP_BUCKET_CAP originals; the page is still found through its other bands."),
		bodies:            om.CounterVec("bodies_total", "Page bodies sent by reference (CRAWL_BODIES object store): read, missing (gone before parsing; the page is terminated), parsed_before (gone at a later delivery of a page this parser acked; acked again), deleted (once the page is acked and no other consumer of crawl.pages can ask for it).", "result"),
		render:            om.CounterVec("render_decisions_total", "2xx HTML pages by render decision (render: sent to a renderer; skip) and reason: always, rule-always, setting-host, setting-url, shell; off, rule-never, rendered (a rendering, never rendered again), not-shell.", "decision", "reason"),
		renderWhyFailures: om.Counter("render_explain_failures_total", "Batches whose render decisions could not be kept in Redis for trawlctl explain (the pages are parsed all the same)."),
	}
	m.sitemaps = newSitemapMetrics(om)
	m.embeds = newEmbedMetrics(om)
	// Which rules the parser holds links to and how fresh they are, so a parser that cannot
	// read a change is seen.
	om.GaugeFunc("policy_version", "Version of the live site policies the parser holds links to (0: no rule ever set).", func() float64 {
		if m.rules == nil {
			return 0
		}
		return float64(m.rules.Current().Version())
	})
	om.GaugeFunc("policy_stale_seconds", "Seconds since the policy store last answered a poll (0: the last poll did).", func() float64 {
		if m.rules == nil {
			return 0
		}
		return m.rules.Stale().Seconds()
	})
	om.GaugeFunc("embeds_on", "1 while page requisites are found and published (TRAWL_EMBEDS; in auto, while the archiver's consumer exists).", func() float64 {
		if m.embedsOn != nil && m.embedsOn() {
			return 1
		}
		return 0
	})
	// Series exist from the start so rate() and alerts see zeros, not gaps.
	for _, r := range []string{"parsed", "skipped", resultEncoded} {
		m.pages.WithLabelValues(r)
	}
	for _, r := range scope.Reasons {
		m.rejected.WithLabelValues(string(r))
	}
	for _, r := range []string{"scheme", "invalid", "fragment", "limit"} {
		m.dropped.WithLabelValues(r)
	}
	for _, r := range []string{redirectFollowed, redirectHops} {
		m.redirects.WithLabelValues(r)
	}
	for _, r := range scope.RedirectReasons {
		m.redirects.WithLabelValues(string(r))
	}
	for _, r := range []string{"read", "missing", "parsed_before", "deleted"} {
		m.bodies.WithLabelValues(r)
	}
	for _, r := range []string{"permanent"} {
		m.terminated.WithLabelValues(r)
	}
	for _, r := range []string{"bytes", "tokens", "links", "text"} {
		m.limited.WithLabelValues(r)
	}
	for _, k := range []contentdup.Kind{contentdup.Exact, contentdup.Near} {
		m.duplicates.WithLabelValues(k.String())
	}
	for _, r := range renderconf.Reasons {
		decision := "skip"
		if r.Renders() {
			decision = "render"
		}
		m.render.WithLabelValues(decision, string(r))
	}
	return m
}

// record adds one settled page's counts. It runs only once the page's outputs are stored,
// so a page redelivered after a failed publish is not counted twice. contentDedup says
// whether the content duplicate check ran.
func (m *metrics) record(o *outcome, contentDedup bool) {
	// Whatever the 3xx was fetched as (a page, a requisite, a sitemap).
	if o.redirect != "" {
		m.redirects.WithLabelValues(o.redirect).Inc()
	}
	if o.sitemap != nil {
		m.sitemaps.record(o.sitemap)
		return
	}
	if o.embed != nil && m.embeds.record(o) {
		return
	}
	if o.skipped {
		r := "skipped"
		if o.encoded {
			r = resultEncoded
		}
		m.pages.WithLabelValues(r).Inc()
		return
	}
	if d := o.render; d.Reason != "" {
		decision := "skip"
		if d.Render {
			decision = "render"
		}
		m.render.WithLabelValues(decision, string(d.Reason)).Inc()
	}
	m.pages.WithLabelValues("parsed").Inc()
	m.parseDuration.Observe(o.duration.Seconds())
	if o.parseErr != nil {
		m.parseErrors.Inc()
	}
	m.links.Add(float64(o.links))
	m.emitted.Add(float64(o.emitted))
	for r, n := range o.rejected {
		m.rejected.WithLabelValues(string(r)).Add(float64(n))
	}
	for r, n := range map[string]int{"scheme": o.dropped.Scheme, "invalid": o.dropped.Invalid, "fragment": o.dropped.Fragment, "limit": o.dropped.Limit} {
		if n > 0 {
			m.dropped.WithLabelValues(r).Add(float64(n))
		}
	}
	for _, l := range o.limits {
		m.limited.WithLabelValues(l).Inc()
	}
	if o.trimmed {
		m.trimmed.Inc()
	}
	if o.dup != contentdup.Original {
		m.duplicates.WithLabelValues(o.dup.String()).Inc()
	}
	if contentDedup && o.short {
		m.nearDupSkipped.Inc()
	}
}
