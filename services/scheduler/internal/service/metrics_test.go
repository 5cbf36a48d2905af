package service

import (
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// recorder is a Registerer that keeps what is registered, so that every series is checked
// whether or not it has been touched.
type recorder struct{ cs []prometheus.Collector }

func (r *recorder) Register(c prometheus.Collector) error   { r.cs = append(r.cs, c); return nil }
func (r *recorder) MustRegister(cs ...prometheus.Collector) { r.cs = append(r.cs, cs...) }
func (r *recorder) Unregister(prometheus.Collector) bool    { return false }

// Metric names follow trawl_scheduler_<what>_<unit>: counters end in _total, gauges do
// not, durations are histograms in seconds.
func TestMetricNames(t *testing.T) {
	r := &recorder{}
	newMetrics(r)
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	seen := map[string]bool{}
	for _, c := range r.cs {
		ch := make(chan *prometheus.Desc, 4)
		c.Describe(ch)
		close(ch)
		for d := range ch {
			m := fqName.FindStringSubmatch(d.String())
			if m == nil {
				t.Fatalf("no name in %s", d)
			}
			name := m[1]
			t.Run(name, func(t *testing.T) {
				if seen[name] {
					t.Fatal("registered twice")
				}
				seen[name] = true
				if !strings.HasPrefix(name, "trawl_scheduler_") {
					t.Error("not under trawl_scheduler_")
				}
				switch c.(type) {
				case *prometheus.CounterVec:
					if !strings.HasSuffix(name, "_total") {
						t.Error("counter without _total")
					}
				case *prometheus.GaugeVec:
					if strings.HasSuffix(name, "_total") {
						t.Error("gauge with _total")
					}
				case *prometheus.HistogramVec:
					if !strings.HasSuffix(name, "_seconds") {
						t.Error("histogram not in seconds")
					}
				default:
					t.Errorf("unexpected collector %T", c)
				}
			})
		}
	}
	if len(seen) < 15 {
		t.Fatalf("only %d metrics seen", len(seen))
	}
}
