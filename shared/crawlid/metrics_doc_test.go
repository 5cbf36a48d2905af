package crawlid

import (
	"testing"

	"github.com/trawl/trawl/shared/obs"
	"github.com/trawl/trawl/shared/obs/metricsdoc"
)

// TestMetricsDocumented holds docs/metrics.md to the series every service shares.
func TestMetricsDocumented(t *testing.T) {
	metricsdoc.Test(t, "../../docs/metrics.md", "crawl", func(om *obs.Metrics) {
		DeclareStateLost(om, func() bool { return false })
	})
}
