package service

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TestBodyUnreferenced: a body may go only when no page published within the window after
// it can still be kept by the pages stream.
func TestBodyUnreferenced(t *testing.T) {
	stored := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	window := 2 * time.Minute
	cases := []struct {
		name  string
		pages jetstream.StreamState
		now   time.Time
		want  bool
	}{
		{"oldest kept page arrived after the window", jetstream.StreamState{Msgs: 3, FirstTime: stored.Add(window + time.Second)}, stored.Add(time.Hour), true},
		{"oldest kept page arrived inside the window", jetstream.StreamState{Msgs: 3, FirstTime: stored.Add(window - time.Second)}, stored.Add(time.Hour), false},
		{"a page older than the body is kept (lagging tap)", jetstream.StreamState{Msgs: 3, FirstTime: stored.Add(-time.Hour)}, stored.Add(time.Hour), false},
		{"empty stream, window passed", jetstream.StreamState{}, stored.Add(window + time.Second), true},
		{"empty stream, page may still come", jetstream.StreamState{}, stored.Add(window - time.Second), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := bodyUnreferenced(stored, window, c.pages, c.now); got != c.want {
				t.Errorf("bodyUnreferenced = %v, want %v", got, c.want)
			}
		})
	}
}

// TestBodyPinned: a body stays while a kept page arrived within its window; pages kept from
// before it (a lagging tap) or after the window do not pin it.
func TestBodyPinned(t *testing.T) {
	stored := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	window := 2 * time.Minute
	at := func(d time.Duration) time.Time { return stored.Add(d) }
	cases := []struct {
		name string
		kept []time.Time
		want bool
	}{
		{"nothing kept", nil, false},
		{"only a page long before", []time.Time{at(-time.Hour)}, false},
		{"a page within the window", []time.Time{at(-time.Hour), at(time.Minute)}, true},
		{"a page within the clock allowance before", []time.Time{at(-storeSkew / 2)}, true},
		{"pages before and after the window only", []time.Time{at(-time.Hour), at(window + time.Second)}, false},
		{"a page at the window's end", []time.Time{at(window)}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := bodyPinned(stored, window, c.kept); got != c.want {
				t.Errorf("bodyPinned = %v, want %v", got, c.want)
			}
		})
	}
}
