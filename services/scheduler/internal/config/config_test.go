package config

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/trawl/trawl/shared/envconfig"
	"github.com/trawl/trawl/shared/frontierconf"
	"github.com/trawl/trawl/shared/policy"
	"github.com/trawl/trawl/shared/politeness"
	"github.com/trawl/trawl/shared/recrawl"
)

func load(t *testing.T, env map[string]string) (Config, error) {
	t.Helper()
	return Load(envconfig.FromMap(env))
}

func TestDefaults(t *testing.T) {
	c, err := load(t, map[string]string{"TRAWL_SHARDS": "3"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
	want := Config{
		Common: c.Common,
		Settings: frontierconf.Settings{FrontQueues: 8, BackQueues: 1024, PriorityBias: 0.5, MaxRetries: 3, MaxDepth: 20,
			RetireAfter: 8, HostStateTTL: 7 * 24 * time.Hour, BacklinkHosts: 100_000},
		Rules: politeness.Rules{MinDelay: time.Second, DelayFactor: 5, MaxCrawlDelay: 30 * time.Second,
			MaxBackoff: 10 * time.Minute, RetryBackoff: 30 * time.Second, Per: politeness.PerHost},
		SchedulerShards: []int{0, 1, 2},
		DispatchBatch:   512,
		Prioritizer:     "breadth",
		PriorityX:       1,
		PriorityY:       1,
		DispatchAhead:   3,
		Hold:            Hold{ParserBacklog: 20_000, PagesFill: 0.5, DocsFill: 0.5, DedupBacklog: 20_000, FrontierBacklog: 50_000, Resume: 0.5},
		Recrawl:         recrawl.Defaults,
		Policy:          policy.Defaults,
	}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("defaults:\n got %+v\nwant %+v", c, want)
	}
	if c.Common.HTTPAddr != DefaultHTTPAddr {
		t.Fatalf("HTTPAddr = %q, want %q", c.Common.HTTPAddr, DefaultHTTPAddr)
	}
}

func TestOverrides(t *testing.T) {
	c, err := load(t, map[string]string{
		"TRAWL_SHARDS":             "8",
		"TRAWL_SCHEDULER_SHARDS":   "1, 3-5",
		"TRAWL_FRONT_QUEUES":       "4",
		"TRAWL_BACK_QUEUES":        "64",
		"TRAWL_PRIORITY_BIAS":      "0.25",
		"TRAWL_MIN_DELAY":          "250ms",
		"TRAWL_DELAY_FACTOR":       "2.5",
		"TRAWL_MAX_CRAWL_DELAY":    "10",
		"TRAWL_MAX_BACKOFF":        "1h",
		"TRAWL_RETRY_BACKOFF":      "5s",
		"TRAWL_MAX_RETRIES":        "0",
		"TRAWL_MAX_DEPTH":          "3",
		"TRAWL_MAX_PAGES_PER_HOST": "100",
		"TRAWL_MAX_PAGES":          "100000",
		"TRAWL_DISPATCH_BATCH":     "64",
		"TRAWL_PRIORITIZER":        " Preference ",
		"TRAWL_PRIORITY_X":         "2.5",
		"TRAWL_PRIORITY_Y":         "0",
		"TRAWL_RETIRE_AFTER":       "0",
		"TRAWL_HOST_STATE_TTL":     "0",
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c.SchedulerShards, []int{1, 3, 4, 5}) {
		t.Errorf("shards = %v", c.SchedulerShards)
	}
	if c.FrontQueues != 4 || c.BackQueues != 64 || c.PriorityBias != 0.25 || c.MinDelay != 250*time.Millisecond ||
		c.DelayFactor != 2.5 || c.MaxCrawlDelay != 10*time.Second || c.MaxBackoff != time.Hour ||
		c.RetryBackoff != 5*time.Second || c.MaxRetries != 0 || c.MaxDepth != 3 || c.MaxPagesPerHost != 100 ||
		c.MaxPages != 100000 || c.DispatchBatch != 64 || c.Prioritizer != "preference" || c.PriorityX != 2.5 ||
		c.PriorityY != 0 || c.RetireAfter != 0 || c.HostStateTTL != 0 {
		t.Errorf("overrides not applied: %+v", c)
	}
}

func TestInvalid(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string // substring of the error
	}{
		{"front queues zero", map[string]string{"TRAWL_FRONT_QUEUES": "0"}, "TRAWL_FRONT_QUEUES"},
		{"back queues zero", map[string]string{"TRAWL_BACK_QUEUES": "0"}, "TRAWL_BACK_QUEUES"},
		{"bias zero", map[string]string{"TRAWL_PRIORITY_BIAS": "0"}, "TRAWL_PRIORITY_BIAS"},
		{"bias above one", map[string]string{"TRAWL_PRIORITY_BIAS": "1.5"}, "TRAWL_PRIORITY_BIAS"},
		{"bias not a number", map[string]string{"TRAWL_PRIORITY_BIAS": "half"}, "TRAWL_PRIORITY_BIAS"},
		{"negative min delay", map[string]string{"TRAWL_MIN_DELAY": "-1s"}, "TRAWL_MIN_DELAY"},
		{"negative delay factor", map[string]string{"TRAWL_DELAY_FACTOR": "-1"}, "TRAWL_DELAY_FACTOR"},
		{"negative max crawl delay", map[string]string{"TRAWL_MAX_CRAWL_DELAY": "-5s"}, "TRAWL_MAX_CRAWL_DELAY"},
		{"backoff below base", map[string]string{"TRAWL_MAX_BACKOFF": "10s", "TRAWL_RETRY_BACKOFF": "30s"}, "TRAWL_MAX_BACKOFF"},
		{"zero retry backoff", map[string]string{"TRAWL_RETRY_BACKOFF": "0"}, "TRAWL_RETRY_BACKOFF"},
		{"negative retries", map[string]string{"TRAWL_MAX_RETRIES": "-1"}, "TRAWL_MAX_RETRIES"},
		{"negative depth", map[string]string{"TRAWL_MAX_DEPTH": "-1"}, "TRAWL_MAX_DEPTH"},
		{"negative host budget", map[string]string{"TRAWL_MAX_PAGES_PER_HOST": "-1"}, "TRAWL_MAX_PAGES_PER_HOST"},
		{"negative budget", map[string]string{"TRAWL_MAX_PAGES": "-1"}, "TRAWL_MAX_PAGES"},
		{"batch zero", map[string]string{"TRAWL_DISPATCH_BATCH": "0"}, "TRAWL_DISPATCH_BATCH"},
		{"unknown prioritizer", map[string]string{"TRAWL_PRIORITIZER": "pagerank"}, "TRAWL_PRIORITIZER"},
		{"negative X", map[string]string{"TRAWL_PRIORITY_X": "-1"}, "TRAWL_PRIORITY_X"},
		{"Y not a number", map[string]string{"TRAWL_PRIORITY_Y": "NaN"}, "TRAWL_PRIORITY_Y"},
		{"Y too large", map[string]string{"TRAWL_PRIORITY_Y": "1e6"}, "TRAWL_PRIORITY_Y"},
		{"preference with no weight", map[string]string{"TRAWL_PRIORITIZER": "preference", "TRAWL_PRIORITY_X": "0", "TRAWL_PRIORITY_Y": "0"}, "both 0"},
		{"negative retire after", map[string]string{"TRAWL_RETIRE_AFTER": "-1"}, "TRAWL_RETIRE_AFTER"},
		{"host state TTL too short", map[string]string{"TRAWL_HOST_STATE_TTL": "30s"}, "TRAWL_HOST_STATE_TTL"},
		{"host state TTL negative", map[string]string{"TRAWL_HOST_STATE_TTL": "-1h"}, "TRAWL_HOST_STATE_TTL"},
		{"shard beyond shards", map[string]string{"TRAWL_SHARDS": "2", "TRAWL_SCHEDULER_SHARDS": "2"}, "outside"},
		{"shard twice", map[string]string{"TRAWL_SHARDS": "4", "TRAWL_SCHEDULER_SHARDS": "1,0-2"}, "twice"},
		{"shard syntax", map[string]string{"TRAWL_SCHEDULER_SHARDS": "x"}, "TRAWL_SCHEDULER_SHARDS"},
		{"backwards range", map[string]string{"TRAWL_SHARDS": "4", "TRAWL_SCHEDULER_SHARDS": "3-1"}, "backwards"},
		{"backlink hosts zero", map[string]string{"TRAWL_BACKLINK_HOSTS": "0"}, "TRAWL_BACKLINK_HOSTS"},
		{"dispatch ahead one", map[string]string{"TRAWL_DISPATCH_AHEAD": "1"}, "TRAWL_DISPATCH_AHEAD"},
		{"negative parser hold", map[string]string{"TRAWL_HOLD_PARSER_BACKLOG": "-1"}, "TRAWL_HOLD_PARSER_BACKLOG"},
		{"pages fill whole", map[string]string{"TRAWL_HOLD_PAGES_FILL": "1"}, "TRAWL_HOLD_PAGES_FILL"},
		{"resume zero", map[string]string{"TRAWL_HOLD_RESUME": "0"}, "TRAWL_HOLD_RESUME"},
		{"common setting", map[string]string{"TRAWL_LOG_FORMAT": "xml"}, "TRAWL_LOG_FORMAT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := load(t, tc.env)
			if err == nil {
				err = c.Validate()
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v, want one mentioning %s", err, tc.want)
			}
		})
	}
}
