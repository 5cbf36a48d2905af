package crawlid

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/trawl/trawl/shared/obs"
	"github.com/trawl/trawl/shared/obs/metricsdoc"
)

// TestMetricsDocumented holds docs/metrics.md to the series every service shares.
func TestMetricsDocumented(t *testing.T) {
	om := obs.NewMetrics(prometheus.NewRegistry(), "any")
	DeclareStateLost(om, func() bool { return false })
	diffs, err := metricsdoc.Diff("../../docs/metrics.md", "trawl_crawl_", om.Declared())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range diffs {
		t.Error(d)
	}
}
