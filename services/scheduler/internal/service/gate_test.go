package service

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

func TestFetchLimit(t *testing.T) {
	tests := []struct {
		name  string
		ahead int
		busy  uint64
		rate  float64 // tasks/s
		want  uint64
	}{
		{name: "idle: the floor", ahead: 3, busy: 0, rate: 0, want: 8},
		{name: "slow fetches: a multiple of those in hand", ahead: 3, busy: 64, rate: 40, want: 128},
		// 1 ms fetches: only a few tasks are ever in hand, but 2,000 are taken a second; a
		// limit of 2 × busy would hold dispatch to a few tasks per poll.
		{name: "fast fetches: what the fetchers take in a poll", ahead: 3, busy: 2, rate: 2000, want: 500},
		{name: "ahead of 1 still leaves room", ahead: 1, busy: 10, rate: 0, want: 10},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := fetchLimit(tc.ahead, tc.busy, tc.rate); got != tc.want {
				t.Fatalf("fetchLimit(%d, %d, %v) = %d, want %d", tc.ahead, tc.busy, tc.rate, got, tc.want)
			}
		})
	}
}

func TestTakeRate(t *testing.T) {
	var g gate
	t0 := time.Unix(1000, 0)
	steps := []struct {
		at        time.Duration
		delivered uint64
		want      float64
	}{
		{0, 100, 0},                              // first reading: no rate yet
		{50 * time.Millisecond, 150, 0},          // shorter than the window: kept for later
		{200 * time.Millisecond, 500, 1000},      // 400 in 0.2s = 2000/s, averaged with 0
		{400 * time.Millisecond, 900, 1500},      // 2000/s again
		{500 * time.Millisecond, 10, 1500},       // consumer made again: start over
		{700 * time.Millisecond, 10 + 400, 1750}, // 2000/s
	}
	for i, st := range steps {
		if got := g.takeRate(t0.Add(st.at), st.delivered); got != st.want {
			t.Fatalf("step %d: takeRate = %v, want %v", i, got, st.want)
		}
	}
}

func TestSpanBytes(t *testing.T) {
	// 100 messages of 10 bytes at sequences 51..150.
	st := jetstream.StreamState{Msgs: 100, Bytes: 1000, FirstSeq: 51, LastSeq: 150}
	tests := []struct {
		name  string
		st    jetstream.StreamState
		floor uint64
		want  int64
	}{
		{"caught up", st, 150, 0},
		{"half behind", st, 100, 500},
		{"behind the stream's start: everything kept", st, 10, 1000},
		{"at the start", st, 50, 1000},
		{"empty stream", jetstream.StreamState{FirstSeq: 151, LastSeq: 150}, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := spanBytes(tc.st, tc.floor); got != tc.want {
				t.Fatalf("spanBytes(floor %d) = %d, want %d", tc.floor, got, tc.want)
			}
		})
	}
}
