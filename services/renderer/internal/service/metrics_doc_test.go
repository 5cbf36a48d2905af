package service

import (
	"testing"

	"github.com/trawl/trawl/shared/obs"
	"github.com/trawl/trawl/shared/obs/metricsdoc"
)

// TestMetricsDocumented holds docs/metrics.md to the series this service declares: every
// one documented with its type, labels and help, none documented that it does not serve,
// each named by the rule.
func TestMetricsDocumented(t *testing.T) {
	metricsdoc.Test(t, "../../../../docs/metrics.md", "renderer", func(om *obs.Metrics) { newMetrics(om) })
}
