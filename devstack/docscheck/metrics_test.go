package docscheck

import (
	"regexp"
	"testing"
)

// TestMetricsDeclaredOneWay: every series is declared through shared/obs's Metrics, which
// records it for the docs/metrics.md test; a collector built directly with client_golang
// would be served without ever being checked against the page.
func TestMetricsDeclaredOneWay(t *testing.T) {
	forbidInCode(t, regexp.MustCompile(`prometheus\.New(Counter|Gauge|Histogram|Summary|Untyped)`), "shared/obs",
		"builds a collector directly; declare it with obs.Metrics so docs/metrics.md is checked against it")
}
