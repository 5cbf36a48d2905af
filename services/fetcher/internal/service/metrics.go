package service

import (
	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	pages           *prometheus.CounterVec // class: 1xx..5xx, other
	bytes           prometheus.Counter
	duration        prometheus.Histogram
	robotsDecisions *prometheus.CounterVec // decision: allowed, disallowed, unavailable, miss
	robotsFetches   *prometheus.CounterVec // result: parsed, unavailable, unreachable, blocked
	inflight        prometheus.Gauge
	blocked         prometheus.Counter
	expired         prometheus.Counter
	robotsDeferred  prometheus.Counter
	robotsThenPage  prometheus.Counter
	serverBusy      prometheus.Counter
	terminated      *prometheus.CounterVec // reason: permanent
	outcomes        *prometheus.CounterVec // kind: crawlmsg.OutcomeKind
	outcomeBatches  prometheus.Counter
	publishFailures prometheus.Counter
	publishRetries  *prometheus.CounterVec // what: body, page, outcome
	permanentErrors *prometheus.CounterVec // what, reason (shared/errclass)
	tooLarge        prometheus.Counter
	bodiesByRef     prometheus.Counter
	paused          prometheus.Gauge
	dnsLookups      *prometheus.CounterVec // result: hit, negative, miss, shared
	sitemaps        *prometheus.CounterVec // source: robots, default
	policy          *policyMetrics
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		pages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trawl_fetcher_pages_total", Help: "Page responses received, by status class.",
		}, []string{"class"}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "trawl_fetcher_bytes_total", Help: "Response body octets read from the network (compressed when gzip), pages and robots.txt.",
		}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "trawl_fetcher_fetch_duration_seconds", Help: "Page request time, start to last body byte.",
			Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60},
		}),
		robotsDecisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trawl_fetcher_robots_decisions_total", Help: "robots.txt verdicts on tasks: allowed, disallowed, unavailable (cached 5xx/unreachable), miss (robots.txt fetched instead).",
		}, []string{"decision"}),
		robotsFetches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trawl_fetcher_robots_fetches_total", Help: "robots.txt fetches by result: parsed (2xx), unavailable (4xx, allow all), unreachable (5xx/429/network, disallow all), blocked, redirect (a same-host hop left to the host's next task).",
		}, []string{"result"}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "trawl_fetcher_inflight", Help: "Tasks being handled.",
		}),
		blocked: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "trawl_fetcher_blocked_total", Help: "Tasks refused by the address policy or for an unusable URL.",
		}),
		robotsDeferred: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "trawl_fetcher_robots_deferred_total", Help: "Tasks deferred without a request because their robots.txt redirects to another host inside its gap.",
		}),
		robotsThenPage: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "trawl_fetcher_robots_then_url_total", Help: "Tasks that fetched robots.txt and then went on to their own URL in the same task, the host's gap after robots.txt having passed already (no delay set).",
		}),
		serverBusy: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "trawl_fetcher_server_busy_total", Help: "Requests not made because their server address was busy (TRAWL_POLITENESS=ip); each task ended server-busy, or a robots.txt chain stopped at that hop.",
		}),
		expired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "trawl_fetcher_tasks_expired_total", Help: "Tasks received too close to their lease deadline to start a request.",
		}),
		terminated: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trawl_fetcher_messages_terminated_total", Help: "Fetch tasks terminated: permanent (malformed, unknown version); temporary failures are retried, never terminated.",
		}, []string{"reason"}),
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trawl_fetcher_outcomes_total", Help: "Outcomes published, by kind.",
		}, []string{"kind"}),
		outcomeBatches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "trawl_fetcher_outcome_messages_total", Help: "Messages published to crawl.fetched, each carrying a batch of outcomes.",
		}),
		publishFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "trawl_fetcher_publish_failures_total", Help: "Tasks whose results could not be stored before the lease deadline; the lease expires and the URL is retried.",
		}),
		publishRetries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trawl_fetcher_publish_retries_total", Help: "Failed attempts to store a task's body, page or outcome, each retried until the lease deadline.",
		}, []string{"what"}),
		permanentErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trawl_fetcher_permanent_errors_total", Help: "NATS or Redis errors that trying again cannot cure (shared/errclass), by step (body, page, outcome, task) and reason; not retried.",
		}, []string{"what", "reason"}),
		tooLarge: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "trawl_fetcher_too_large_total", Help: "Pages refused as larger than the largest message; their URLs end too-large.",
		}),
		bodiesByRef: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "trawl_fetcher_bodies_by_reference_total", Help: "Page bodies above the inline threshold stored in the CRAWL_BODIES object store.",
		}),
		paused: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "trawl_fetcher_paused", Help: "1 while consumption is paused because Redis does not answer.",
		}),
		dnsLookups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trawl_fetcher_dns_lookups_total", Help: "Host name lookups by the dialer: hit and negative (answered from the DNS cache), miss (resolved), shared (joined a lookup in progress).",
		}, []string{"result"}),
	}
	m.sitemaps = newSitemapsMetric()
	m.policy = newPolicyMetrics(reg)
	m.sitemaps.WithLabelValues("robots")
	m.sitemaps.WithLabelValues("default")
	reg.MustRegister(m.sitemaps, m.dnsLookups, m.pages, m.bytes, m.duration, m.robotsDecisions, m.robotsFetches, m.robotsThenPage, m.inflight,
		m.blocked, m.expired, m.robotsDeferred, m.serverBusy, m.terminated, m.outcomes, m.outcomeBatches, m.publishFailures, m.publishRetries, m.permanentErrors, m.tooLarge, m.bodiesByRef, m.paused)
	return m
}

func statusClass(code int) string {
	if code >= 100 && code < 600 {
		// Constants: a label built per page would be a string allocated per page.
		return [...]string{"1xx", "2xx", "3xx", "4xx", "5xx"}[code/100-1]
	}
	return "other"
}
