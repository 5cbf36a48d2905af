// Package config reads the scheduler's settings from TRAWL_* environment variables.
package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/trawl/trawl/services/scheduler/internal/prioritize"
	"github.com/trawl/trawl/shared/envconfig"
	"github.com/trawl/trawl/shared/frontierconf"
	"github.com/trawl/trawl/shared/policy"
	"github.com/trawl/trawl/shared/politeness"
	"github.com/trawl/trawl/shared/recrawl"
)

// DefaultHTTPAddr is the scheduler's /metrics, /healthz and /readyz address.
const DefaultHTTPAddr = ":9102"

// Config is the scheduler's configuration.
type Config struct {
	Common envconfig.Common

	// Settings are the frontier's settings (queues, retries, depth, budgets, host
	// retirement and state, backlinks).
	frontierconf.Settings
	// Rules are the politeness settings (TRAWL_MIN_DELAY, TRAWL_DELAY_FACTOR,
	// TRAWL_MAX_CRAWL_DELAY, TRAWL_RETRY_BACKOFF, TRAWL_MAX_BACKOFF).
	politeness.Rules
	// SchedulerShards are the shards this process serves (TRAWL_SCHEDULER_SHARDS);
	// empty in the environment means all of 0..TRAWL_SHARDS-1.
	SchedulerShards []int
	DispatchBatch   int // TRAWL_DISPATCH_BATCH

	Prioritizer string  // TRAWL_PRIORITIZER: breadth or preference
	PriorityX   float64 // TRAWL_PRIORITY_X: weight of the host backlink score IB
	PriorityY   float64 // TRAWL_PRIORITY_Y: weight of the URL-string score IL
	// DispatchAhead is how many tasks are kept out per task being fetched
	// (TRAWL_DISPATCH_AHEAD): tasks waiting for a fetcher stay at most
	// (DispatchAhead−1) × max(tasks being fetched, 4).
	DispatchAhead int
	// Hold are the backpressure thresholds.
	Hold Hold
	// Recrawl is the due intake (TRAWL_RECRAWL_BACKLOG, TRAWL_RECRAWL_SHARE), used when
	// TRAWL_RECRAWL=adaptive.
	Recrawl recrawl.Settings
	// Policy are the live site policies' settings (TRAWL_POLICY_POLL; the scheduler reads
	// no secret, so TRAWL_SECRETS_DIR is not its concern).
	Policy policy.Settings

	// shardsErr keeps a TRAWL_SCHEDULER_SHARDS syntax error for Validate.
	shardsErr error
}

// Hold are the stage backlogs at which dispatch is held (0 = not watched). Dispatch
// resumes once every watched backlog is below Resume times its threshold.
type Hold struct {
	ParserBacklog   int     // TRAWL_HOLD_PARSER_BACKLOG: pages not yet parsed
	PagesFill       float64 // TRAWL_HOLD_PAGES_FILL: fraction of CRAWL_PAGES's byte limit, and of CRAWL_BODIES's
	DocsFill        float64 // TRAWL_HOLD_DOCS_FILL: fraction of CRAWL_DOCS's byte limit the slowest registered indexer lags
	DedupBacklog    int     // TRAWL_HOLD_DEDUP_BACKLOG: discovered batches not yet deduplicated
	FrontierBacklog int     // TRAWL_HOLD_FRONTIER_BACKLOG: frontier messages not yet added
	Resume          float64 // TRAWL_HOLD_RESUME
}

// Load reads the configuration. It returns the Reader's parse errors (bad numbers,
// durations); range checks are Validate's.
func Load(r *envconfig.Reader) (Config, error) {
	c := Config{
		Common:        envconfig.LoadCommon(r, DefaultHTTPAddr),
		Settings:      frontierconf.Load(r),
		Rules:         politeness.Load(r),
		DispatchBatch: r.Int("DISPATCH_BATCH", 512),
		Prioritizer:   strings.ToLower(strings.TrimSpace(r.String("PRIORITIZER", prioritize.NameBreadth))),
		PriorityX:     r.Float("PRIORITY_X", 1),
		PriorityY:     r.Float("PRIORITY_Y", 1),
		DispatchAhead: r.Int("DISPATCH_AHEAD", 3),
		Recrawl:       recrawl.Load(r),
		Policy:        policy.Load(r),
		Hold: Hold{
			ParserBacklog:   r.Int("HOLD_PARSER_BACKLOG", 20_000),
			PagesFill:       r.Float("HOLD_PAGES_FILL", 0.5),
			DocsFill:        r.Float("HOLD_DOCS_FILL", 0.5),
			DedupBacklog:    r.Int("HOLD_DEDUP_BACKLOG", 20_000),
			FrontierBacklog: r.Int("HOLD_FRONTIER_BACKLOG", 50_000),
			Resume:          r.Float("HOLD_RESUME", 0.5),
		},
	}
	spec := r.String("SCHEDULER_SHARDS", "")
	if spec == "" {
		for s := range max(c.Common.Shards, 0) {
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
	errs = append(errs, c.Settings.Validate())
	errs = append(errs, c.Rules.Validate())
	errs = append(errs, c.Policy.Validate())
	if c.Common.Recrawl == envconfig.RecrawlAdaptive {
		errs = append(errs, c.Recrawl.Validate())
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
	if !(c.Hold.DocsFill >= 0 && c.Hold.DocsFill < 1) {
		bad("TRAWL_HOLD_DOCS_FILL=%g: want 0 (not watched) or a fraction below 1 of CRAWL_DOCS's byte limit", c.Hold.DocsFill)
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
			if s < 0 || s >= c.Common.Shards {
				bad("TRAWL_SCHEDULER_SHARDS: shard %d outside 0..TRAWL_SHARDS-1 (%d)", s, c.Common.Shards-1)
			}
			if seen[s] {
				bad("TRAWL_SCHEDULER_SHARDS: shard %d listed twice", s)
			}
			seen[s] = true
		}
	}
	return errors.Join(errs...)
}
