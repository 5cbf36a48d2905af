package service

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/trawl/trawl/shared/obs"
	"github.com/trawl/trawl/shared/runner"
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
	skipsLost         *prometheus.CounterVec
	dispatchHeld      *prometheus.CounterVec
	backpressure      *prometheus.CounterVec
	markersTrimmed    *prometheus.CounterVec
	pagesReadmitted   *prometheus.CounterVec
	pageLogChecks     *prometheus.CounterVec
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

func newMetrics(om *obs.Metrics) *metrics {
	m := &metrics{
		dispatched:        om.CounterVec("dispatched_total", "Fetch tasks dispatched.", "shard"),
		publishFailures:   om.CounterVec("publish_failures_total", "Dispatched tasks whose publish failed (their leases expire and the reaper requeues them).", "shard"),
		added:             om.CounterVec("urls_added_total", "URLs queued from frontier messages.", "shard"),
		recrawlsDue:       om.CounterVec("recrawls_due_total", "Due recrawls sent to the frontier (TRAWL_RECRAWL=adaptive).", "shard"),
		recrawlsFailed:    om.CounterVec("recrawls_failed_rescheduled_total", "Recrawled URLs that ended failed without a page (host retired, retries spent), scheduled again.", "shard"),
		duplicates:        om.CounterVec("frontier_duplicates_total", "Frontier messages skipped because they were already applied.", "shard"),
		outcomes:          om.CounterVec("outcomes_total", "Fetch outcomes received, by kind.", "shard", "kind"),
		results:           om.CounterVec("outcome_results_total", "What applying an outcome did: fetched, retry, failed, disallowed, requeued, stale, invalid (unknown kind), malformed (no host, lease or kind; skipped).", "shard", "result"),
		terminated:        om.CounterVec("messages_terminated_total", runner.TerminatedHelp, "consumer", "reason"),
		leaseExpiries:     om.CounterVec("lease_expiries_total", "Leases that expired and were reaped.", "shard"),
		attemptsExhausted: om.CounterVec("attempts_exhausted_total", "URLs of reaped leases that ended failed because their attempts ran out (1 + TRAWL_MAX_RETRIES): their fetcher died, hung or could not store the page every time.", "shard"),
		cappedDelays:      om.CounterVec("crawl_delay_capped_total", "Outcomes whose host Crawl-delay exceeded TRAWL_MAX_CRAWL_DELAY and was capped.", "shard"),
		hostsRetired:      om.CounterVec("hosts_retired_total", "Hosts retired after TRAWL_RETIRE_AFTER consecutive failures; their URLs end as failed.", "shard"),
		skipsLost:         om.CounterVec("skips_unlogged_total", "Skipped URLs left out of the skip log (CRAWL_SKIPPED) because its publish failed: at every delivery of their outcome message, or once for URLs refused at admission.", "shard"),
		dispatchHeld:      om.CounterVec("dispatch_held_total", "Dispatch steps skipped because NATS JetStream could not take fetch tasks (nothing is leased then).", "shard"),
		backpressure:      om.CounterVec("dispatch_backpressure_total", "Times dispatch was held because a later stage fell behind, by stage: parser, pages-bytes, dedup, frontier.", "stage"),
		markersTrimmed:    om.CounterVec("applied_markers_trimmed_total", "Frontier message markers dropped once the frontier consumer's ack floor passed them.", "shard"),
		pagesReadmitted:   om.CounterVec("pages_readmitted_total", "URLs put back in their queues, at start or when NATS is back after a lost connection, because NATS lost their pages after Redis had counted them fetched (NATS rolled back by an OS crash, or CRAWL_PAGES made again); counted by the shard whose walk found them, which re-admits another shard's URL whose page had the same sequence as one of its own.", "shard"),
		pageLogChecks:     om.CounterVec("page_log_checks_total", "Checks of the page log against CRAWL_PAGES done: at start, and each time NATS is back after a lost connection (trawl_scheduler_pages_readmitted_total counts what they found).", "shard"),
		redisErrors:       om.CounterVec("redis_errors_total", "Failed Redis steps: add, dispatch, complete, reap, stats (the gauges' refresh), status (the status page's reads).", "shard", "step"),
		stepSeconds:       om.HistogramVec("step_duration_seconds", "Duration of one frontier step (one Lua script over a batch).", prometheus.ExponentialBuckets(0.0002, 2.5, 10), "step"),
		urls:              om.GaugeVec("frontier_urls", "URLs of the shard by state: accepted, queued, inflight, parked and the terminal states.", "shard", "state"),
		queued:            om.GaugeVec("queued_urls", "URLs waiting in each front queue (0 = highest priority).", "shard", "priority"),
		activeHosts:       om.GaugeVec("active_hosts", "Hosts holding a back queue.", "shard"),
		readyHosts:        om.GaugeVec("ready_hosts", "Active hosts idle in the heap (not in flight).", "shard"),
		inflight:          om.GaugeVec("inflight_tasks", "Tasks out on lease.", "shard"),
		paused:            om.GaugeVec("paused", "1 while the shard is paused.", "shard"),
		holding:           om.GaugeVec("dispatch_backpressure", "1 while dispatch is held because the stage is behind.", "stage"),
		fetchQueued:       om.Gauge("fetch_tasks_queued", "Fetch tasks no fetcher has taken yet (fetch consumer's pending count)."),
		fetchBusy:         om.Gauge("fetch_tasks_busy", "Fetch tasks fetchers hold (fetch consumer's ack-pending count)."),
		fetchLimit:        om.Gauge("fetch_tasks_queued_limit", "Most fetch tasks kept waiting for a fetcher: (TRAWL_DISPATCH_AHEAD-1) x max(busy, 4)."),
	}
	return m
}
