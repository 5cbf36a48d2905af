package service

import (
	"slices"
	"testing"
	"time"
)

// TestRecoveredDue checks that the trim loop takes the ids of each check once its own
// window has passed, whether they came from the start's check or a reconnect's.
func TestRecoveredDue(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var r recovered
	r.add([]string{"a", "b"}, t0)
	r.add([]string{"c"}, t0.Add(time.Second))
	for _, tc := range []struct {
		name string
		now  time.Time
		want []string
	}{
		{"before either window", t0.Add(-time.Millisecond), nil},
		{"the start's window passed", t0, []string{"a", "b"}},
		{"taken once", t0, nil},
		{"the reconnect's window passed", t0.Add(time.Second), []string{"c"}},
		{"none left", t0.Add(time.Hour), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := r.due(tc.now); !slices.Equal(got, tc.want) {
				t.Errorf("due(%s) = %v, want %v", tc.now.Sub(t0), got, tc.want)
			}
		})
	}
}
