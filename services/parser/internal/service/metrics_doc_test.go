package service

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/trawl/trawl/shared/obs"
	"github.com/trawl/trawl/shared/obs/metricsdoc"
)

// TestMetricsDocumented holds docs/metrics.md to the series this service declares: every
// one documented with its type, labels and help, none documented that it does not serve,
// each named by the rule.
func TestMetricsDocumented(t *testing.T) {
	om := obs.NewMetrics(prometheus.NewRegistry(), "parser")
	newMetrics(om)
	if len(om.Declared()) < 5 {
		t.Fatalf("only %d series declared", len(om.Declared()))
	}
	diffs, err := metricsdoc.Diff("../../../../docs/metrics.md", "trawl_parser_", om.Declared())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range diffs {
		t.Error(d)
	}
}
