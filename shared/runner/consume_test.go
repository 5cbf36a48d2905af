package runner

import (
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// A consume loop's options come from the service's settings, its logger and its counter of
// terminated messages, labelled as the service declared it.
func TestConsumeOptions(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	tests := []struct {
		name   string
		labels []string // the labels before "reason"
	}{
		{"reason only", nil},
		{"per consumer", []string{"frontier"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var names []string
			for i := range tt.labels {
				names = append(names, "l"+string(rune('a'+i)))
			}
			vec := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "terminated_total"}, append(names, "reason"))
			r := &Runner{Log: log, errorAfter: 7}
			o := r.ConsumeOptions(vec, tt.labels...)
			if o.ErrorAfter != 7 {
				t.Errorf("ErrorAfter %d, want TRAWL_LOG_ERROR_AFTER's 7", o.ErrorAfter)
			}
			if o.Log != log {
				t.Error("Log is not the service's logger")
			}
			if o.Ready != nil {
				t.Error("Ready set for a service without Redis: the loop would wait on a guard it has not")
			}
			o.OnTerm("permanent")
			o.OnTerm("permanent")
			if got := testutil.ToFloat64(vec.WithLabelValues(append(tt.labels, "permanent")...)); got != 2 {
				t.Errorf("terminated%v = %v after two terminations, want 2", tt.labels, got)
			}
		})
	}
}
