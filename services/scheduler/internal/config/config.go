// Package config reads the scheduler's settings from TRAWL_* environment variables.
package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/trawl/trawl/services/scheduler/internal/prioritize"
	"github.com/trawl/trawl/shared/envconfig"
)

// DefaultHTTPAddr is the scheduler's /metrics, /healthz and /readyz address.
const DefaultHTTPAddr = ":9102"

// Config is the scheduler's configuration.
type Config struct {
	envconfig.Common

	FrontQueues     int           // TRAWL_FRONT_QUEUES
	BackQueues      int           // TRAWL_BACK_QUEUES
	PriorityBias    float64       // TRAWL_PRIORITY_BIAS
	MinDelay        time.Duration // TRAWL_MIN_DELAY
	DelayFactor     float64       // TRAWL_DELAY_FACTOR
	MaxCrawlDelay   time.Duration // TRAWL_MAX_CRAWL_DELAY
	MaxBackoff      time.Duration // TRAWL_MAX_BACKOFF
	RetryBackoff    time.Duration // TRAWL_RETRY_BACKOFF
	MaxRetries      int           // TRAWL_MAX_RETRIES
	MaxDepth        int           // TRAWL_MAX_DEPTH
	MaxPagesPerHost int64         // TRAWL_MAX_PAGES_PER_HOST
	MaxPages        int64         // TRAWL_MAX_PAGES
	// SchedulerShards are the shards this process serves (TRAWL_SCHEDULER_SHARDS);
	// empty in the environment means all of 0..TRAWL_SHARDS-1.
	SchedulerShards []int
	DispatchBatch   int // TRAWL_DISPATCH_BATCH

	Prioritizer  string        // TRAWL_PRIORITIZER: breadth or preference
	PriorityX    float64       // TRAWL_PRIORITY_X: weight of the host backlink score IB
	PriorityY    float64       // TRAWL_PRIORITY_Y: weight of the URL-string score IL
	RetireAfter  int           // TRAWL_RETIRE_AFTER: consecutive failures that retire a host (0 = never)
	HostStateTTL time.Duration // TRAWL_HOST_STATE_TTL: idle host state kept this long (0 = forever)
	// BacklinkHosts bounds the hosts per shard whose backlinks the preference prioritiser
	// counts (TRAWL_BACKLINK_HOSTS).
	BacklinkHosts int
	// DispatchAhead is how many tasks are kept out per task being fetched
	// (TRAWL_DISPATCH_AHEAD): tasks waiting for a fetcher stay at most
	// (DispatchAhead−1) × max(tasks being fetched, 4).
	DispatchAhead int
	// Hold are the backpressure thresholds.
	Hold Hold

	// shardsErr keeps a TRAWL_SCHEDULER_SHARDS syntax error for Validate.
	shardsErr error
}

// Hold are the stage backlogs at which dispatch is held (0 = not watched). Dispatch
// resumes once every watched backlog is below Resume times its threshold.
type Hold struct {
	ParserBacklog   int     // TRAWL_HOLD_PARSER_BACKLOG: pages not yet parsed
	PagesFill       float64 // TRAWL_HOLD_PAGES_FILL: fraction of CRAWL_PAGES's byte limit
	DedupBacklog    int     // TRAWL_HOLD_DEDUP_BACKLOG: discovered batches not yet deduplicated
	FrontierBacklog int     // TRAWL_HOLD_FRONTIER_BACKLOG: frontier messages not yet added
	Resume          float64 // TRAWL_HOLD_RESUME
}

// Load reads the configuration. It returns the Reader's parse errors (bad numbers,
// durations); range checks are Validate's.
func Load(r *envconfig.Reader) (Config, error) {
	c := Config{
		Common:          envconfig.LoadCommon(r, DefaultHTTPAddr),
		FrontQueues:     r.Int("FRONT_QUEUES", 8),
		BackQueues:      r.Int("BACK_QUEUES", 1024),
		PriorityBias:    r.Float("PRIORITY_BIAS", 0.5),
		MinDelay:        r.Duration("MIN_DELAY", time.Second),
		DelayFactor:     r.Float("DELAY_FACTOR", 5),
		MaxCrawlDelay:   r.Duration("MAX_CRAWL_DELAY", 30*time.Second),
		MaxBackoff:      r.Duration("MAX_BACKOFF", 10*time.Minute),
		RetryBackoff:    r.Duration("RETRY_BACKOFF", 30*time.Second),
		MaxRetries:      r.Int("MAX_RETRIES", 3),
		MaxDepth:        r.Int("MAX_DEPTH", 20),
		MaxPagesPerHost: int64(r.Int("MAX_PAGES_PER_HOST", 0)),
		MaxPages:        int64(r.Int("MAX_PAGES", 0)),
		DispatchBatch:   r.Int("DISPATCH_BATCH", 512),
		Prioritizer:     strings.ToLower(strings.TrimSpace(r.String("PRIORITIZER", prioritize.NameBreadth))),
		PriorityX:       r.Float("PRIORITY_X", 1),
		PriorityY:       r.Float("PRIORITY_Y", 1),
		RetireAfter:     r.Int("RETIRE_AFTER", 8),
		HostStateTTL:    r.Duration("HOST_STATE_TTL", 7*24*time.Hour),
		BacklinkHosts:   r.Int("BACKLINK_HOSTS", 100_000),
		DispatchAhead:   r.Int("DISPATCH_AHEAD", 3),
		Hold: Hold{
			ParserBacklog:   r.Int("HOLD_PARSER_BACKLOG", 20_000),
			PagesFill:       r.Float("HOLD_PAGES_FILL", 0.5),
			DedupBacklog:    r.Int("HOLD_DEDUP_BACKLOG", 20_000),
			FrontierBacklog: r.Int("HOLD_FRONTIER_BACKLOG", 50_000),
			Resume:          r.Float("HOLD_RESUME", 0.5),
		},
	}
	spec := r.String("SCHEDULER_SHARDS", "")
	if spec == "" {
		for s := range max(c.Shards, 0) {
			c.SchedulerShards = append(c.SchedulerShards, s)
		}
	} else {
		c.SchedulerShards, c.shardsErr = ParseShards(spec)
	}
	return c, r.Err()
}

// ParseShards reads a shard list such as "0,2,5-7".
func ParseShards(spec string) ([]int, error) {
	var out []int
	for _, item := range envconfig.SplitList(spec) {
		lo, hi, isRange := strings.Cut(item, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, fmt.Errorf("shard %q: %w", item, err)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil {
				return nil, fmt.Errorf("shard range %q: %w", item, err)
			}
			if b < a {
				return nil, fmt.Errorf("shard range %q runs backwards", item)
			}
			if b-a > 1024 {
				return nil, fmt.Errorf("shard range %q is too long", item)
			}
		}
		for s := a; s <= b; s++ {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no shards listed")
	}
	return out, nil
}

// Validate reports every invalid setting at once.
func (c Config) Validate() error {
	errs := []error{c.Common.Validate()}
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.FrontQueues < 1 || c.FrontQueues > 64 {
		bad("TRAWL_FRONT_QUEUES=%d: want 1..64", c.FrontQueues)
	}
	if c.BackQueues < 1 || c.BackQueues > 10_000_000 {
		bad("TRAWL_BACK_QUEUES=%d: want 1..10000000", c.BackQueues)
	}
	if !(c.PriorityBias > 0 && c.PriorityBias <= 1) {
		bad("TRAWL_PRIORITY_BIAS=%g: want 0 < bias <= 1 (queue i is picked with weight bias^i)", c.PriorityBias)
	}
	if c.MinDelay < 0 || c.MinDelay > time.Hour {
		bad("TRAWL_MIN_DELAY=%s: want 0..1h", c.MinDelay)
	}
	if !(c.DelayFactor >= 0 && c.DelayFactor <= 1000) {
		bad("TRAWL_DELAY_FACTOR=%g: want 0..1000", c.DelayFactor)
	}
	if c.MaxCrawlDelay < 0 || c.MaxCrawlDelay > 24*time.Hour {
		bad("TRAWL_MAX_CRAWL_DELAY=%s: want 0..24h", c.MaxCrawlDelay)
	}
	if c.RetryBackoff < time.Millisecond || c.RetryBackoff > 24*time.Hour {
		bad("TRAWL_RETRY_BACKOFF=%s: want 1ms..24h", c.RetryBackoff)
	}
	if c.MaxBackoff < c.RetryBackoff || c.MaxBackoff > 7*24*time.Hour {
		bad("TRAWL_MAX_BACKOFF=%s: want TRAWL_RETRY_BACKOFF (%s)..168h", c.MaxBackoff, c.RetryBackoff)
	}
	if c.MaxRetries < 0 || c.MaxRetries > 100 {
		bad("TRAWL_MAX_RETRIES=%d: want 0..100", c.MaxRetries)
	}
	if c.MaxDepth < 0 || c.MaxDepth > 10_000 {
		bad("TRAWL_MAX_DEPTH=%d: want 0..10000", c.MaxDepth)
	}
	if c.MaxPagesPerHost < 0 {
		bad("TRAWL_MAX_PAGES_PER_HOST=%d: want 0 (unlimited) or more", c.MaxPagesPerHost)
	}
	if c.MaxPages < 0 {
		bad("TRAWL_MAX_PAGES=%d: want 0 (unlimited) or more", c.MaxPages)
	}
	if c.DispatchBatch < 1 || c.DispatchBatch > 10_000 {
		bad("TRAWL_DISPATCH_BATCH=%d: want 1..10000", c.DispatchBatch)
	}
	switch c.Prioritizer {
	case prioritize.NameBreadth, prioritize.NamePreference:
	default:
		bad("TRAWL_PRIORITIZER=%q: want %s or %s", c.Prioritizer, prioritize.NameBreadth, prioritize.NamePreference)
	}
	if !(c.PriorityX >= 0 && c.PriorityX <= 1000) {
		bad("TRAWL_PRIORITY_X=%g: want 0..1000", c.PriorityX)
	}
	if !(c.PriorityY >= 0 && c.PriorityY <= 1000) {
		bad("TRAWL_PRIORITY_Y=%g: want 0..1000", c.PriorityY)
	}
	if c.Prioritizer == prioritize.NamePreference && c.PriorityX == 0 && c.PriorityY == 0 {
		bad("TRAWL_PRIORITY_X and TRAWL_PRIORITY_Y are both 0: the preference prioritiser would put every URL in the last queue")
	}
	if c.RetireAfter < 0 || c.RetireAfter > 10_000 {
		bad("TRAWL_RETIRE_AFTER=%d: want 0 (never) or 1..10000", c.RetireAfter)
	}
	if c.HostStateTTL != 0 && (c.HostStateTTL < time.Minute || c.HostStateTTL > 365*24*time.Hour) {
		bad("TRAWL_HOST_STATE_TTL=%s: want 0 (kept forever) or 1m..8760h", c.HostStateTTL)
	}
	if c.BacklinkHosts < 1 || c.BacklinkHosts > 100_000_000 {
		bad("TRAWL_BACKLINK_HOSTS=%d: want 1..100000000", c.BacklinkHosts)
	}
	if c.DispatchAhead < 2 || c.DispatchAhead > 1000 {
		bad("TRAWL_DISPATCH_AHEAD=%d: want 2..1000 (tasks out per task being fetched)", c.DispatchAhead)
	}
	for name, v := range map[string]int{"TRAWL_HOLD_PARSER_BACKLOG": c.Hold.ParserBacklog,
		"TRAWL_HOLD_DEDUP_BACKLOG": c.Hold.DedupBacklog, "TRAWL_HOLD_FRONTIER_BACKLOG": c.Hold.FrontierBacklog} {
		if v < 0 {
			bad("%s=%d: want 0 (not watched) or more", name, v)
		}
	}
	if !(c.Hold.PagesFill >= 0 && c.Hold.PagesFill < 1) {
		bad("TRAWL_HOLD_PAGES_FILL=%g: want 0 (not watched) or a fraction below 1 of CRAWL_PAGES's byte limit", c.Hold.PagesFill)
	}
	if !(c.Hold.Resume > 0 && c.Hold.Resume <= 1) {
		bad("TRAWL_HOLD_RESUME=%g: want 0 < resume <= 1 (fraction of each threshold)", c.Hold.Resume)
	}
	if c.shardsErr != nil {
		bad("TRAWL_SCHEDULER_SHARDS: %w", c.shardsErr)
	} else {
		if len(c.SchedulerShards) == 0 {
			bad("TRAWL_SCHEDULER_SHARDS: no shards to serve")
		}
		seen := map[int]bool{}
		for _, s := range c.SchedulerShards {
			if s < 0 || s >= c.Shards {
				bad("TRAWL_SCHEDULER_SHARDS: shard %d outside 0..TRAWL_SHARDS-1 (%d)", s, c.Shards-1)
			}
			if seen[s] {
				bad("TRAWL_SCHEDULER_SHARDS: shard %d listed twice", s)
			}
			seen[s] = true
		}
	}
	return errors.Join(errs...)
}
