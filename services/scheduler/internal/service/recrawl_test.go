package service

import "testing"

// TestDueIntake: due recrawls fill a short frontier up to the backlog, and a full one only
// at the configured share of its dispatches, so new URLs keep the rest.
func TestDueIntake(t *testing.T) {
	type step struct {
		queued, dispatched int64
		took               int // due URLs that entered after this reading
		want               int
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"an empty frontier takes a pull's worth", []step{{queued: 0, dispatched: 0, want: dueBatch}}},
		{"a short frontier is filled to the backlog", []step{{queued: 900, dispatched: 0, want: 100}}},
		{"a full frontier takes nothing before it dispatches", []step{{queued: 5000, dispatched: 7, want: 0}}},
		{"a full frontier takes the share of its dispatches", []step{
			{queued: 5000, dispatched: 100, want: 0},
			{queued: 5000, dispatched: 200, took: 30, want: 30},
			{queued: 5000, dispatched: 210, want: 3},
		}},
		{"unused credit is capped at the backlog", []step{
			{queued: 5000, dispatched: 0, want: 0},
			{queued: 5000, dispatched: 1_000_000, want: dueBatch},
		}},
		{"a counter that went back (Redis lost it) grants nothing", []step{
			{queued: 5000, dispatched: 500, want: 0},
			{queued: 5000, dispatched: 10, want: 0},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := &dueIntake{backlog: 1000, share: 0.3, dispatched: -1}
			for i, s := range tc.steps {
				if got := in.allow(s.queued, s.dispatched); got != s.want {
					t.Fatalf("step %d: allow(%d, %d) = %d, want %d", i, s.queued, s.dispatched, got, s.want)
				}
				in.took(s.took)
			}
		})
	}
}
