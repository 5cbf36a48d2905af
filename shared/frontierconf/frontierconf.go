// Package frontierconf holds the frontier's settings: each TRAWL_* variable is read,
// defaulted and range-checked here once. The scheduler runs its frontier with them;
// dedup and the parser apply TRAWL_MAX_DEPTH before the frontier would, and trawlctl reads
// TRAWL_FRONT_QUEUES and TRAWL_MAX_DEPTH to inspect and explain. The politeness settings
// (gaps and backoff) are shared/politeness's.
package frontierconf

import (
	"errors"
	"fmt"
	"time"

	"github.com/trawl/trawl/shared/envconfig"
	"github.com/trawl/trawl/shared/frontierkeys"
)

// Settings are the frontier's settings.
type Settings struct {
	FrontQueues     int           // TRAWL_FRONT_QUEUES: F, the number of priorities
	BackQueues      int           // TRAWL_BACK_QUEUES: B, the most hosts holding a back queue at once
	PriorityBias    float64       // TRAWL_PRIORITY_BIAS: front queue i is picked with weight bias^i
	MaxRetries      int           // TRAWL_MAX_RETRIES: retries of a URL after a retryable failure
	MaxDepth        int           // TRAWL_MAX_DEPTH: deeper URLs are out of scope
	MaxPagesPerHost int64         // TRAWL_MAX_PAGES_PER_HOST: 0 = unlimited
	MaxPages        int64         // TRAWL_MAX_PAGES: 0 = unlimited
	RetireAfter     int           // TRAWL_RETIRE_AFTER: consecutive failures that retire a host (0 = never)
	HostStateTTL    time.Duration // TRAWL_HOST_STATE_TTL: idle host state kept this long (0 = forever)
	BacklinkHosts   int           // TRAWL_BACKLINK_HOSTS: hosts per shard whose backlinks are counted
}

// Defaults are the settings with every variable unset.
var Defaults = Settings{
	FrontQueues:   frontierkeys.DefaultFrontQueues,
	BackQueues:    1024,
	PriorityBias:  0.5,
	MaxRetries:    3,
	MaxDepth:      20,
	RetireAfter:   8,
	HostStateTTL:  7 * 24 * time.Hour,
	BacklinkHosts: 100_000,
}

// Bounds that more than one reader checks.
const (
	MaxMaxDepth    = 10_000
	MaxFrontQueues = frontierkeys.MaxFrontQueues
)

// Load reads the settings; range checks are Validate's.
func Load(r *envconfig.Reader) Settings {
	return Settings{
		FrontQueues:     r.Int(frontQueuesVar, Defaults.FrontQueues),
		BackQueues:      r.Int("BACK_QUEUES", Defaults.BackQueues),
		PriorityBias:    r.Float("PRIORITY_BIAS", Defaults.PriorityBias),
		MaxRetries:      r.Int("MAX_RETRIES", Defaults.MaxRetries),
		MaxDepth:        LoadMaxDepth(r),
		MaxPagesPerHost: int64(r.Int("MAX_PAGES_PER_HOST", int(Defaults.MaxPagesPerHost))),
		MaxPages:        int64(r.Int("MAX_PAGES", int(Defaults.MaxPages))),
		RetireAfter:     r.Int("RETIRE_AFTER", Defaults.RetireAfter),
		HostStateTTL:    r.Duration("HOST_STATE_TTL", Defaults.HostStateTTL),
		BacklinkHosts:   r.Int("BACKLINK_HOSTS", Defaults.BacklinkHosts),
	}
}

// Validate reports every setting out of range.
func (s Settings) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if err := CheckFrontQueues(s.FrontQueues); err != nil {
		errs = append(errs, err)
	}
	if s.BackQueues < 1 || s.BackQueues > 10_000_000 {
		bad("TRAWL_BACK_QUEUES=%d: want 1..10000000", s.BackQueues)
	}
	if !(s.PriorityBias > 0 && s.PriorityBias <= 1) {
		bad("TRAWL_PRIORITY_BIAS=%g: want 0 < bias <= 1 (queue i is picked with weight bias^i)", s.PriorityBias)
	}
	if s.MaxRetries < 0 || s.MaxRetries > 100 {
		bad("TRAWL_MAX_RETRIES=%d: want 0..100", s.MaxRetries)
	}
	if err := CheckMaxDepth(s.MaxDepth); err != nil {
		errs = append(errs, err)
	}
	if s.MaxPagesPerHost < 0 {
		bad("TRAWL_MAX_PAGES_PER_HOST=%d: want 0 (unlimited) or more", s.MaxPagesPerHost)
	}
	if s.MaxPages < 0 {
		bad("TRAWL_MAX_PAGES=%d: want 0 (unlimited) or more", s.MaxPages)
	}
	if s.RetireAfter < 0 || s.RetireAfter > 10_000 {
		bad("TRAWL_RETIRE_AFTER=%d: want 0 (never) or 1..10000", s.RetireAfter)
	}
	if s.HostStateTTL != 0 && (s.HostStateTTL < time.Minute || s.HostStateTTL > 365*24*time.Hour) {
		bad("TRAWL_HOST_STATE_TTL=%s: want 0 (kept forever) or 1m..8760h", s.HostStateTTL)
	}
	if s.BacklinkHosts < 1 || s.BacklinkHosts > 100_000_000 {
		bad("TRAWL_BACKLINK_HOSTS=%d: want 1..100000000", s.BacklinkHosts)
	}
	return errors.Join(errs...)
}

// LoadMaxDepth reads TRAWL_MAX_DEPTH alone, for the stages that apply it before the
// frontier: dedup drops deeper URLs, the parser emits none, trawlctl explains with it.
func LoadMaxDepth(r *envconfig.Reader) int { return r.Int("MAX_DEPTH", Defaults.MaxDepth) }

// CheckMaxDepth is TRAWL_MAX_DEPTH's range check.
func CheckMaxDepth(n int) error {
	if n < 0 || n > MaxMaxDepth {
		return fmt.Errorf("TRAWL_MAX_DEPTH=%d: want 0..%d", n, MaxMaxDepth)
	}
	return nil
}

// LoadFrontQueuesIfSet reads TRAWL_FRONT_QUEUES for a reader of the frontier that must
// not guess the scheduler's value: 0 when unset (trawlctl then probes every queue a
// scheduler could have, MaxFrontQueues).
func LoadFrontQueuesIfSet(r *envconfig.Reader) int {
	n, _ := r.IntIfSet(frontQueuesVar)
	return n
}

const frontQueuesVar = "FRONT_QUEUES"

// CheckFrontQueues is TRAWL_FRONT_QUEUES's range check.
func CheckFrontQueues(n int) error {
	if n < 1 || n > MaxFrontQueues {
		return fmt.Errorf("TRAWL_FRONT_QUEUES=%d: want 1..%d", n, MaxFrontQueues)
	}
	return nil
}
