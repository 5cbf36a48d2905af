package obs

import (
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics is how every Trawl process declares its Prometheus series, the one way: each
// name gets the "trawl_<subsystem>_" prefix, is registered at once, and is recorded, so
// that a test holds docs/metrics.md to exactly what /metrics serves (Declared, and
// shared/obs/metricsdoc). A name registered twice panics, as MustRegister does.
type Metrics struct {
	reg    prometheus.Registerer
	prefix string
	rec    *record // shared with every With
}

type record struct {
	mu    sync.Mutex
	decls []Decl
}

// Decl is one declared series: its full name, type, label names and help text.
type Decl struct {
	Name   string
	Type   string // counter, gauge or histogram
	Labels []string
	Help   string
}

// NewMetrics declares series named "trawl_<subsystem>_<name>" in reg (a service's name for
// its own series; "crawl" for the ones every service shares).
func NewMetrics(reg prometheus.Registerer, subsystem string) *Metrics {
	return &Metrics{reg: reg, prefix: "trawl_" + subsystem + "_", rec: &record{}}
}

// With is a Metrics declaring into the same registry and record under another subsystem.
func (m *Metrics) With(subsystem string) *Metrics {
	return &Metrics{reg: m.reg, prefix: "trawl_" + subsystem + "_", rec: m.rec}
}

func (m *Metrics) declare(c prometheus.Collector, typ, name, help string, labels []string) {
	m.reg.MustRegister(c)
	d := Decl{Name: m.prefix + name, Type: typ, Labels: append([]string(nil), labels...), Help: help}
	m.rec.mu.Lock()
	m.rec.decls = append(m.rec.decls, d)
	m.rec.mu.Unlock()
}

// Counter declares a counter without labels.
func (m *Metrics) Counter(name, help string) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: m.prefix + name, Help: help})
	m.declare(c, "counter", name, help, nil)
	return c
}

// CounterVec declares a counter with labels.
func (m *Metrics) CounterVec(name, help string, labels ...string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: m.prefix + name, Help: help}, labels)
	m.declare(c, "counter", name, help, labels)
	return c
}

// Gauge declares a gauge without labels.
func (m *Metrics) Gauge(name, help string) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: m.prefix + name, Help: help})
	m.declare(g, "gauge", name, help, nil)
	return g
}

// GaugeVec declares a gauge with labels.
func (m *Metrics) GaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: m.prefix + name, Help: help}, labels)
	m.declare(g, "gauge", name, help, labels)
	return g
}

// GaugeFunc declares a gauge whose value f gives at each scrape.
func (m *Metrics) GaugeFunc(name, help string, f func() float64) {
	m.declare(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: m.prefix + name, Help: help}, f), "gauge", name, help, nil)
}

// Histogram declares a histogram without labels.
func (m *Metrics) Histogram(name, help string, buckets []float64) prometheus.Histogram {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: m.prefix + name, Help: help, Buckets: buckets})
	m.declare(h, "histogram", name, help, nil)
	return h
}

// HistogramVec declares a histogram with labels.
func (m *Metrics) HistogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: m.prefix + name, Help: help, Buckets: buckets}, labels)
	m.declare(h, "histogram", name, help, labels)
	return h
}

// Declared is every series declared through m (and its With), sorted by name.
func (m *Metrics) Declared() []Decl {
	m.rec.mu.Lock()
	out := append([]Decl(nil), m.rec.decls...)
	m.rec.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Row is the declaration as a row of docs/metrics.md's tables.
func (d Decl) Row() string {
	labels := "—"
	if len(d.Labels) > 0 {
		labels = "`" + strings.Join(d.Labels, "`, `") + "`"
	}
	return fmt.Sprintf("| `%s` | %s | %s | %s |", d.Name, d.Type, labels, strings.ReplaceAll(d.Help, "|", `\|`))
}
