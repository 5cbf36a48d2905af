package service

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	pages      *prometheus.CounterVec // result: rendered, failed, retried
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

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		pages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trawl_renderer_pages_total", Help: "Render tasks by result: rendered (published with its DOM), failed (given up after TRAWL_RENDER_MAX_ATTEMPTS, published as fetched with the reason), retried (nak'ed after a browser crash, hang, memory cap or time cap).",
		}, []string{"result"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "trawl_renderer_render_duration_seconds", Help: "Time to render a page, navigation to DOM.",
			Buckets: []float64{0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120},
		}),
		tabs: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "trawl_renderer_tabs", Help: "Tabs rendering a page now.",
		}),
		restarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trawl_renderer_browser_restarts_total", Help: "Browser restarts by reason: crash (the process died), hang (it stopped answering), memory (over TRAWL_RENDER_MAX_RSS).",
		}, []string{"reason"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trawl_renderer_requests_refused_total", Help: "Browser requests failed inside the page without a request, by reason: robots, scope, blocked, unsafe, scheme, url, navigation, time; error when the request was made and got no response.",
		}, []string{"reason"}),
		answered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trawl_renderer_requests_answered_total", Help: "Browser requests answered with a response, by source: network (a request made under the host's claim) or cache (the shared subresource cache).",
		}, []string{"source"}),
		claimWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "trawl_renderer_claim_wait_seconds", Help: "Time a browser request waited for its host's turn (the shared per-host schedule).",
			Buckets: []float64{0.001, 0.01, 0.1, 0.5, 1, 2, 5, 10, 30},
		}),
		robots: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trawl_renderer_robots_fetches_total", Help: "robots.txt fetches the renderer made for hosts no fetcher had cached, by result.",
		}, []string{"result"}),
		rss: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "trawl_renderer_browser_rss_bytes", Help: "Resident memory of the browser's processes, as last measured.",
		}),
		terminated: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trawl_renderer_terminated_total", Help: "Render task messages terminated as malformed (permanent errors).",
		}, []string{"reason"}),
		exchanges: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "trawl_renderer_exchanges_total", Help: "Browser exchanges published with rendered pages for the archive.",
		}),
	}
	reg.MustRegister(m.pages, m.duration, m.tabs, m.restarts, m.refused, m.answered, m.claimWait, m.robots, m.rss, m.terminated, m.exchanges)
	return m
}

// The answer.Metrics interface.
func (m *metrics) Refused(reason string)     { m.refused.WithLabelValues(reason).Inc() }
func (m *metrics) Answered(source string)    { m.answered.WithLabelValues(source).Inc() }
func (m *metrics) ClaimWait(d time.Duration) { m.claimWait.Observe(d.Seconds()) }
func (m *metrics) Robots(result string)      { m.robots.WithLabelValues(result).Inc() }
