package service

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the scheduler's Prometheus series. Counters count what this process did;
// the gauges mirror the shard's state in Redis, which all processes serving it share.
type metrics struct {
	dispatched        *prometheus.CounterVec
	publishFailures   *prometheus.CounterVec
	added             *prometheus.CounterVec
	recrawlsDue       *prometheus.CounterVec
	recrawlsFailed    *prometheus.CounterVec
	duplicates        *prometheus.CounterVec
	outcomes          *prometheus.CounterVec
	results           *prometheus.CounterVec
	terminated        *prometheus.CounterVec
	attemptsExhausted *prometheus.CounterVec
	leaseExpiries     *prometheus.CounterVec
	cappedDelays      *prometheus.CounterVec
	hostsRetired      *prometheus.CounterVec
	dispatchHeld      *prometheus.CounterVec
	backpressure      *prometheus.CounterVec
	markersTrimmed    *prometheus.CounterVec
	redisErrors       *prometheus.CounterVec
	stepSeconds       *prometheus.HistogramVec

	urls        *prometheus.GaugeVec
	queued      *prometheus.GaugeVec
	activeHosts *prometheus.GaugeVec
	readyHosts  *prometheus.GaugeVec
	inflight    *prometheus.GaugeVec
	paused      *prometheus.GaugeVec
	holding     *prometheus.GaugeVec
	fetchQueued prometheus.Gauge
	fetchBusy   prometheus.Gauge
	fetchLimit  prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trawl_scheduler_" + name, Help: help}, labels)
		reg.MustRegister(c)
		return c
	}
	gauge := func(name, help string, labels ...string) *prometheus.GaugeVec {
		g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "trawl_scheduler_" + name, Help: help}, labels)
		reg.MustRegister(g)
		return g
	}
	m := &metrics{
		dispatched:        counter("dispatched_total", "Fetch tasks dispatched.", "shard"),
		publishFailures:   counter("publish_failures_total", "Dispatched tasks whose publish failed (their leases expire and the reaper requeues them).", "shard"),
		added:             counter("urls_added_total", "URLs queued from frontier messages.", "shard"),
		recrawlsDue:       counter("recrawls_due_total", "Due recrawls sent to the frontier (TRAWL_RECRAWL=adaptive).", "shard"),
		recrawlsFailed:    counter("recrawls_failed_rescheduled_total", "Recrawled URLs that ended failed without a page (host retired, retries spent), scheduled again.", "shard"),
		duplicates:        counter("frontier_duplicates_total", "Frontier messages skipped because they were already applied.", "shard"),
		outcomes:          counter("outcomes_total", "Fetch outcomes received, by kind.", "shard", "kind"),
		results:           counter("outcome_results_total", "What applying an outcome did: fetched, retry, failed, disallowed, requeued, stale, invalid (unknown kind), malformed (no host, lease or kind; skipped).", "shard", "result"),
		terminated:        counter("messages_terminated_total", "Messages terminated instead of redelivered.", "consumer", "reason"),
		leaseExpiries:     counter("lease_expiries_total", "Leases that expired and were reaped.", "shard"),
		attemptsExhausted: counter("attempts_exhausted_total", "URLs of reaped leases that ended failed because their attempts ran out (1 + TRAWL_MAX_RETRIES): their fetcher died, hung or could not store the page every time.", "shard"),
		cappedDelays:      counter("crawl_delay_capped_total", "Outcomes whose host Crawl-delay exceeded TRAWL_MAX_CRAWL_DELAY and was capped.", "shard"),
		hostsRetired:      counter("hosts_retired_total", "Hosts retired after TRAWL_RETIRE_AFTER consecutive failures; their URLs end as failed.", "shard"),
		dispatchHeld:      counter("dispatch_held_total", "Dispatch steps skipped because NATS JetStream could not take fetch tasks (nothing is leased then).", "shard"),
		backpressure:      counter("dispatch_backpressure_total", "Times dispatch was held because a later stage fell behind, by stage: parser, pages-bytes, dedup, frontier.", "stage"),
		markersTrimmed:    counter("applied_markers_trimmed_total", "Frontier message markers dropped once the frontier consumer's ack floor passed them.", "shard"),
		redisErrors:       counter("redis_errors_total", "Failed Redis steps: add, dispatch, complete, reap, stats (the gauges' refresh), status (the status page's reads).", "shard", "step"),
		stepSeconds: func() *prometheus.HistogramVec {
			h := prometheus.NewHistogramVec(prometheus.HistogramOpts{
				Name:    "trawl_scheduler_step_duration_seconds",
				Help:    "Duration of one frontier step (one Lua script over a batch).",
				Buckets: prometheus.ExponentialBuckets(0.0002, 2.5, 10),
			}, []string{"step"})
			reg.MustRegister(h)
			return h
		}(),
		urls:        gauge("frontier_urls", "URLs of the shard by state: accepted, queued, inflight, parked and the terminal states.", "shard", "state"),
		queued:      gauge("queued_urls", "URLs waiting in each front queue (0 = highest priority).", "shard", "priority"),
		activeHosts: gauge("active_hosts", "Hosts holding a back queue.", "shard"),
		readyHosts:  gauge("ready_hosts", "Active hosts idle in the heap (not in flight).", "shard"),
		inflight:    gauge("inflight_tasks", "Tasks out on lease.", "shard"),
		paused:      gauge("paused", "1 while the shard is paused.", "shard"),
		holding:     gauge("dispatch_backpressure", "1 while dispatch is held because the stage is behind.", "stage"),
		fetchQueued: gauge("fetch_tasks_queued", "Fetch tasks no fetcher has taken yet (fetch consumer's pending count).").WithLabelValues(),
		fetchBusy:   gauge("fetch_tasks_busy", "Fetch tasks fetchers hold (fetch consumer's ack-pending count).").WithLabelValues(),
		fetchLimit:  gauge("fetch_tasks_queued_limit", "Most fetch tasks kept waiting for a fetcher: (TRAWL_DISPATCH_AHEAD-1) x max(busy, 4).").WithLabelValues(),
	}
	return m
}
