package service

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/trawl/trawl/shared/obs"
	"github.com/trawl/trawl/shared/runner"
)

type metrics struct {
	pages      *prometheus.CounterVec // result: rendered, failed, retried, done_before
	duration   prometheus.Histogram
	tabs       prometheus.Gauge
	restarts   *prometheus.CounterVec // reason: crash, hang, memory
	refused    *prometheus.CounterVec // reason: answer.Refused*, navigation
	answered   *prometheus.CounterVec // source: network, cache
	claimWait  prometheus.Histogram
	robots     *prometheus.CounterVec // result: parsed, unavailable, unreachable
	rss        prometheus.Gauge
	terminated *prometheus.CounterVec
	exchanges  prometheus.Counter
}

func newMetrics(om *obs.Metrics) *metrics {
	return &metrics{
		pages:      om.CounterVec("pages_total", "Render tasks by result: rendered (published with its DOM), failed (given up after TRAWL_RENDER_MAX_ATTEMPTS, published as fetched with the reason), retried (nak'ed after a browser crash, hang, memory cap or time cap), done_before (delivered again after its page was stored, its body gone with it: acked).", "result"),
		duration:   om.Histogram("render_duration_seconds", "Time to render a page, navigation to DOM.", []float64{0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120}),
		tabs:       om.Gauge("tabs", "Tabs rendering a page now."),
		restarts:   om.CounterVec("browser_restarts_total", "Browser restarts by reason: crash (the process died), hang (it stopped answering), memory (over TRAWL_RENDER_MAX_RSS).", "reason"),
		refused:    om.CounterVec("requests_refused_total", "Browser requests failed inside the page without a request, by reason: robots, scope, blocked, unsafe, scheme, url, navigation, time, secret (a secret the site policy names cannot be read); error when the request was made and got no response.", "reason"),
		answered:   om.CounterVec("requests_answered_total", "Browser requests answered with a response, by source: network (a request made under the host's claim) or cache (the shared subresource cache).", "source"),
		claimWait:  om.Histogram("claim_wait_seconds", "Time a browser request waited for its host's turn (the shared per-host schedule).", []float64{0.001, 0.01, 0.1, 0.5, 1, 2, 5, 10, 30}),
		robots:     om.CounterVec("robots_fetches_total", "robots.txt fetches the renderer made for hosts no fetcher had cached, by result.", "result"),
		rss:        om.Gauge("browser_rss_bytes", "Resident memory of the browser's processes, shared pages divided among the processes sharing them (PSS), as last measured."),
		terminated: om.CounterVec("messages_terminated_total", runner.TerminatedHelp, "reason"),
		exchanges:  om.Counter("exchanges_total", "Browser exchanges published with rendered pages for the archive."),
	}
}

// The answer.Metrics interface.
func (m *metrics) Refused(reason string)     { m.refused.WithLabelValues(reason).Inc() }
func (m *metrics) Answered(source string)    { m.answered.WithLabelValues(source).Inc() }
func (m *metrics) ClaimWait(d time.Duration) { m.claimWait.Observe(d.Seconds()) }
func (m *metrics) Robots(result string)      { m.robots.WithLabelValues(result).Inc() }
