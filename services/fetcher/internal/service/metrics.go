package service

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/trawl/trawl/shared/obs"
	"github.com/trawl/trawl/shared/runner"
)

type metrics struct {
	pages           *prometheus.CounterVec // class: 1xx..5xx, other
	bytes           prometheus.Counter
	duration        prometheus.Histogram
	robotsDecisions *prometheus.CounterVec // decision: allowed, disallowed, unavailable, miss
	robotsFetches   *prometheus.CounterVec // result: parsed, unavailable, unreachable, blocked, redirect, no-such-host
	inflight        prometheus.Gauge
	blocked         prometheus.Counter
	expired         prometheus.Counter
	staleTasks      prometheus.Counter
	robotsDeferred  prometheus.Counter
	robotsThenPage  prometheus.Counter
	serverBusy      prometheus.Counter
	terminated      *prometheus.CounterVec // reason: permanent
	outcomes        *prometheus.CounterVec // kind: crawlmsg.OutcomeKind
	outcomeBatches  prometheus.Counter
	pageMessages    prometheus.Counter
	publishFailures prometheus.Counter
	publishRetries  *prometheus.CounterVec // what: body, page, outcome
	permanentErrors *prometheus.CounterVec // what, reason (shared/errclass)
	tooLarge        prometheus.Counter
	bodiesByRef     prometheus.Counter
	paused          prometheus.Gauge
	dnsLookups      *prometheus.CounterVec // result: hit, negative, miss, shared
	sitemaps        *prometheus.CounterVec // source: robots, default
	policy          *policyMetrics

	// Gauges read at scrape time from state New builds after the metrics.
	clockOffset, outcomesWaiting func() float64
}

func newMetrics(om *obs.Metrics) *metrics {
	m := &metrics{
		pages:           om.CounterVec("pages_total", "Page responses received, by status class.", "class"),
		bytes:           om.Counter("bytes_total", "Response body octets read from the network (compressed when gzip), pages and robots.txt."),
		duration:        om.Histogram("fetch_duration_seconds", "Page request time, start to last body byte.", []float64{0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60}),
		robotsDecisions: om.CounterVec("robots_decisions_total", "robots.txt verdicts on tasks: allowed, disallowed, unavailable (cached 5xx/unreachable), miss (robots.txt fetched instead).", "decision"),
		robotsFetches:   om.CounterVec("robots_fetches_total", "robots.txt fetches by result: parsed (2xx), unavailable (4xx, allow all), unreachable (5xx/429/network, disallow all), blocked, redirect (a same-host hop left to the host's next task), no-such-host (the origin's name does not exist: the URL ends, nothing cached).", "result"),
		inflight:        om.Gauge("inflight", "Tasks being handled."),
		blocked:         om.Counter("blocked_total", "Tasks refused by the address policy or for an unusable URL."),
		robotsDeferred:  om.Counter("robots_deferred_total", "Tasks deferred without a request because their robots.txt redirects to another host inside its gap."),
		robotsThenPage:  om.Counter("robots_then_url_total", "Tasks that fetched robots.txt and then went on to their own URL in the same task, the host's gap after robots.txt having passed already (no delay set)."),
		serverBusy:      om.Counter("server_busy_total", "Requests not made because their server address was busy (TRAWL_POLITENESS=ip); each task ended server-busy, or a robots.txt chain stopped at that hop."),
		expired:         om.Counter("tasks_expired_total", "Tasks received too close to their lease deadline to start a request."),
		staleTasks:      om.Counter("tasks_stale_total", "Tasks handed out again by JetStream after a restart whose lease had already ended: answered, so not requested again."),
		terminated:      om.CounterVec("messages_terminated_total", runner.TerminatedHelp, "reason"),
		outcomes:        om.CounterVec("outcomes_total", "Outcomes published, by kind.", "kind"),
		outcomeBatches:  om.Counter("outcome_messages_total", "Messages published to crawl.fetched, each carrying a batch of outcomes."),
		pageMessages:    om.Counter("page_messages_total", "Messages published to crawl.pages, each carrying one page or a bundle of up to TRAWL_PAGES_PER_MESSAGE."),
		publishFailures: om.Counter("publish_failures_total", "Tasks whose results could not be stored before the lease deadline; the lease expires and the URL is retried."),
		publishRetries:  om.CounterVec("publish_retries_total", "Failed attempts to store a task's body, page or outcome, each retried until the lease deadline.", "what"),
		permanentErrors: om.CounterVec("permanent_errors_total", "NATS or Redis errors that trying again cannot cure (shared/errclass), by step (body, page, outcome, task) and reason; not retried.", "what", "reason"),
		tooLarge:        om.Counter("too_large_total", "Pages refused as larger than the largest message; their URLs end too-large."),
		bodiesByRef:     om.Counter("bodies_by_reference_total", "Page bodies above the inline threshold stored in the CRAWL_BODIES object store."),
		paused:          om.Gauge("paused", "1 while consumption is paused because Redis does not answer."),
		dnsLookups:      om.CounterVec("dns_lookups_total", "Host name lookups by the dialer: hit and negative (answered from the DNS cache), miss (resolved), shared (joined a lookup in progress).", "result"),
	}
	m.sitemaps = newSitemapsMetric(om)
	m.policy = newPolicyMetrics(om)
	om.GaugeFunc("clock_offset_seconds", "Redis's clock minus this machine's, as last measured (lease deadlines are converted by it).", func() float64 { return probe(m.clockOffset) })
	om.GaugeFunc("outcomes_waiting", "Outcomes gathered for a crawl.fetched batch and not yet being published.", func() float64 { return probe(m.outcomesWaiting) })
	m.sitemaps.WithLabelValues("robots")
	m.sitemaps.WithLabelValues("default")
	return m
}

func statusClass(code int) string {
	if code >= 100 && code < 600 {
		// Constants: a label built per page would be a string allocated per page.
		return [...]string{"1xx", "2xx", "3xx", "4xx", "5xx"}[code/100-1]
	}
	return "other"
}

// probe reads a gauge whose value comes from state the service builds after its metrics
// (set before the metrics are served); unset, the gauge reads 0.
func probe(f func() float64) float64 {
	if f == nil {
		return 0
	}
	return f()
}
