package service

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/trawl/trawl/services/parser/internal/contentdup"
	"github.com/trawl/trawl/services/parser/internal/scope"
	"github.com/trawl/trawl/shared/policy"
	"github.com/trawl/trawl/shared/renderconf"
)

// registerPolicyMetrics exports which rules the parser holds links to and how fresh they
// are, so a parser that cannot read a change is seen.
func registerPolicyMetrics(reg prometheus.Registerer, w *policy.Watcher) {
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "trawl_parser_policy_version",
			Help: "Version of the live site policies the parser holds links to (0: no rule ever set).",
		}, func() float64 { return float64(w.Current().Version()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "trawl_parser_policy_stale_seconds",
			Help: "Seconds since the policy store last answered a poll (0: the last poll did).",
		}, func() float64 { return w.Stale().Seconds() }),
	)
}

type metrics struct {
	pages             *prometheus.CounterVec
	links             prometheus.Counter
	emitted           prometheus.Counter
	rejected          *prometheus.CounterVec
	dropped           *prometheus.CounterVec
	parseErrors       prometheus.Counter
	parseDuration     prometheus.Histogram
	terminated        *prometheus.CounterVec
	limited           *prometheus.CounterVec
	trimmed           prometheus.Counter
	publishFailures   prometheus.Counter
	duplicates        *prometheus.CounterVec
	nearDupSkipped    prometheus.Counter
	dedupDuration     prometheus.Histogram
	dedupFailures     prometheus.Counter
	bucketsFull       prometheus.Counter
	bodies            *prometheus.CounterVec // result: read, missing, deleted
	render            *prometheus.CounterVec // decision: render, skip; reason: renderconf.Reason
	renderWhyFailures prometheus.Counter
	sitemaps          *sitemapMetrics
	embeds            *embedMetrics
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		pages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trawl_parser_pages_total",
			Help: "Pages taken from crawl.pages: parsed (a document was published) or skipped (not HTML, not 2xx).",
		}, []string{"result"}),
		links: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "trawl_parser_links_total",
			Help: "Distinct valid outlinks extracted from parsed pages.",
		}),
		emitted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "trawl_parser_links_emitted_total",
			Help: "Outlinks published to crawl.discovered (links_total minus links_rejected_total).",
		}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trawl_parser_links_rejected_total",
			Help: "Extracted outlinks not published to crawl.discovered, by scope rule.",
		}, []string{"reason"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trawl_parser_links_dropped_total",
			Help: "Link candidates discarded during extraction: scheme (javascript:, mailto: …), invalid, fragment (#… only), limit (beyond the per-page link cap).",
		}, []string{"reason"}),
		parseErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "trawl_parser_parse_errors_total",
			Help: "Pages whose extraction failed part-way; their document holds what was extracted.",
		}),
		parseDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "trawl_parser_parse_duration_seconds",
			Help:    "Time to extract one page.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 9),
		}),
		terminated: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trawl_parser_messages_terminated_total",
			Help: "crawl.pages messages terminated: permanent (malformed, unknown version); temporary failures are retried, never terminated.",
		}, []string{"reason"}),
		limited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trawl_parser_extract_limited_total",
			Help: "Pages on which an extraction limit was reached: bytes, tokens (rest of page unseen), links, text.",
		}, []string{"limit"}),
		trimmed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "trawl_parser_docs_trimmed_total",
			Help: "Documents whose links or text were cut to fit the stream's message size.",
		}),
		publishFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "trawl_parser_publish_failures_total",
			Help: "Batches whose publish wave failed; their pages are redelivered.",
		}),
		duplicates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trawl_parser_duplicates_total",
			Help: "Documents published flagged as duplicates of an earlier page: exact (same visible text) or near (SimHash within TRAWL_NEAR_DUP_DISTANCE bits).",
		}, []string{"kind"}),
		nearDupSkipped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "trawl_parser_near_dup_skipped_total",
			Help: "Documents checked for exact duplicates only: fewer words than TRAWL_NEAR_DUP_MIN_WORDS.",
		}),
		dedupDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "trawl_parser_dedup_check_duration_seconds",
			Help:    "Time of one batch's duplicate check in Redis (one script call).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 9),
		}),
		dedupFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "trawl_parser_dedup_check_failures_total",
			Help: "Batches whose duplicate check failed (Redis); their pages are redelivered.",
		}),
		bucketsFull: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "trawl_parser_dedup_buckets_full_total",
			Help: "SimHash band insertions refused because the bucket held TRAWL_NEAR_DUP_BUCKET_CAP originals; the page is still found through its other bands.",
		}),
		bodies: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trawl_parser_bodies_total",
			Help: "Page bodies sent by reference (CRAWL_BODIES object store): read, missing (gone before parsing; the page is terminated), deleted (once no consumer of crawl.pages can ask for it).",
		}, []string{"result"}),
		render: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trawl_parser_render_decisions_total",
			Help: "2xx HTML pages by render decision (render: sent to a renderer; skip) and reason: always, rule-always, setting-host, setting-url, shell; off, rule-never, rendered (a rendering, never rendered again), not-shell.",
		}, []string{"decision", "reason"}),
		renderWhyFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "trawl_parser_render_explain_failures_total",
			Help: "Batches whose render decisions could not be kept in Redis for trawlctl explain (the pages are parsed all the same).",
		}),
	}
	reg.MustRegister(m.render, m.renderWhyFailures, m.bodies, m.pages, m.links, m.emitted, m.rejected, m.dropped, m.parseErrors,
		m.parseDuration, m.terminated, m.limited, m.trimmed, m.publishFailures,
		m.duplicates, m.nearDupSkipped, m.dedupDuration, m.dedupFailures, m.bucketsFull)
	m.sitemaps = newSitemapMetrics(reg)
	m.embeds = newEmbedMetrics(reg)
	// Series exist from the start so rate() and alerts see zeros, not gaps.
	for _, r := range []string{"parsed", "skipped"} {
		m.pages.WithLabelValues(r)
	}
	for _, r := range scope.Reasons {
		m.rejected.WithLabelValues(string(r))
	}
	for _, r := range []string{"scheme", "invalid", "fragment", "limit"} {
		m.dropped.WithLabelValues(r)
	}
	for _, r := range []string{"read", "missing", "deleted"} {
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
// so a page redelivered after a failed publish is not counted twice. dedup says whether
// the duplicate check ran.
func (m *metrics) record(o *outcome, dedup bool) {
	if o.sitemap != nil {
		m.sitemaps.record(o.sitemap)
		return
	}
	if o.embed != nil && m.embeds.record(o) {
		return
	}
	if o.skipped {
		m.pages.WithLabelValues("skipped").Inc()
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
	if dedup && o.short {
		m.nearDupSkipped.Inc()
	}
}
