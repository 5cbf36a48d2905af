package service

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/services/scheduler/internal/config"
	"github.com/trawl/trawl/services/scheduler/internal/frontier"
	"github.com/trawl/trawl/services/scheduler/internal/prioritize"
	"github.com/trawl/trawl/shared/envconfig"
)

func TestFrontierOptionsCarryEverySetting(t *testing.T) {
	cfg, err := config.Load(envconfig.FromMap(map[string]string{
		"TRAWL_SHARDS":             "4",
		"TRAWL_REDIS_PREFIX":       "crawl7",
		"TRAWL_LEASE_TTL":          "45s",
		"TRAWL_FRONT_QUEUES":       "3",
		"TRAWL_BACK_QUEUES":        "77",
		"TRAWL_PRIORITY_BIAS":      "0.3",
		"TRAWL_MIN_DELAY":          "2s",
		"TRAWL_DELAY_FACTOR":       "7",
		"TRAWL_MAX_CRAWL_DELAY":    "11s",
		"TRAWL_MAX_BACKOFF":        "13m",
		"TRAWL_RETRY_BACKOFF":      "17s",
		"TRAWL_MAX_RETRIES":        "5",
		"TRAWL_MAX_DEPTH":          "9",
		"TRAWL_MAX_PAGES_PER_HOST": "19",
		"TRAWL_MAX_PAGES":          "23",
		"TRAWL_RETIRE_AFTER":       "4",
		"TRAWL_HOST_STATE_TTL":     "36h",
		"TRAWL_BACKLINK_HOSTS":     "29",
	}))
	if err != nil {
		t.Fatal(err)
	}
	o := FrontierOptions(cfg, 2)
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"Shard", o.Shard, 2},
		{"KeyPrefix", o.KeyPrefix, "crawl7"},
		{"LeaseTTL", o.LeaseTTL, 45 * time.Second},
		{"FrontQueues", o.FrontQueues, 3},
		{"BackQueues", o.BackQueues, 77},
		{"PriorityBias", o.PriorityBias, 0.3},
		{"MinDelay", o.MinDelay, 2 * time.Second},
		{"DelayFactor", o.DelayFactor, 7.0},
		{"MaxCrawlDelay", o.MaxCrawlDelay, 11 * time.Second},
		{"MaxBackoff", o.MaxBackoff, 13 * time.Minute},
		{"RetryBackoff", o.RetryBackoff, 17 * time.Second},
		{"MaxRetries", o.MaxRetries, 5},
		{"MaxDepth", o.MaxDepth, 9},
		{"MaxPagesPerHost", o.MaxPagesPerHost, int64(19)},
		{"MaxPages", o.MaxPages, int64(23)},
		{"RetireAfter", o.RetireAfter, 4},
		{"HostStateTTL", o.HostStateTTL, 36 * time.Hour},
		{"BacklinkHosts", o.BacklinkHosts, 29},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.got != c.want {
				t.Fatalf("%s = %v, want %v", c.name, c.got, c.want)
			}
		})
	}
}

func TestPrioritizerSelection(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want frontier.Prioritizer
	}{
		{"default is breadth", nil, prioritize.BreadthFirst{}},
		{"breadth", map[string]string{"TRAWL_PRIORITIZER": "breadth"}, prioritize.BreadthFirst{}},
		{"preference with weights", map[string]string{"TRAWL_PRIORITIZER": "preference", "TRAWL_PRIORITY_X": "2", "TRAWL_PRIORITY_Y": "0.5"},
			prioritize.Preference{X: 2, Y: 0.5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := config.Load(envconfig.FromMap(tc.env))
			if err != nil {
				t.Fatal(err)
			}
			got := Prioritizer(cfg)
			if got != tc.want {
				t.Fatalf("Prioritizer = %#v, want %#v", got, tc.want)
			}
			_, scoresBacklinks := got.(frontier.BacklinkScorer)
			if want := cfg.Prioritizer == prioritize.NamePreference; scoresBacklinks != want {
				t.Fatalf("BacklinkScorer = %v, want %v", scoresBacklinks, want)
			}
		})
	}
}

// The reaper may reap up to a cutoff only once every outcome stored by then is applied.
func TestOutcomesApplied(t *testing.T) {
	for _, tc := range []struct {
		name           string
		floor, pending uint64
		ackPending     int
		seq            uint64
		want           bool
	}{
		{"ack floor at the cutoff's sequence", 10, 3, 2, 10, true},
		{"ack floor past it", 12, 0, 1, 10, true},
		{"ack floor behind, outcomes pending", 9, 1, 0, 10, false},
		{"ack floor behind, outcomes unacknowledged", 9, 0, 1, 10, false},
		{"nothing pending or unacknowledged (last messages were other shards')", 4, 0, 0, 10, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ci := &jetstream.ConsumerInfo{NumPending: tc.pending, NumAckPending: tc.ackPending,
				AckFloor: jetstream.SequenceInfo{Stream: tc.floor}}
			if got := outcomesApplied(ci, tc.seq); got != tc.want {
				t.Fatalf("outcomesApplied = %v, want %v", got, tc.want)
			}
		})
	}
}
