// Package politeness is the rule that spaces requests to one host, kept once: its
// settings (read and validated here for every service that needs them), the rule in Go
// (Rules), the same rule as a Lua module for the frontier's scripts (Module), and the
// claim scripts that let a process other than the scheduler make one request to a host
// under that host's gap (Claimer).
//
// The frontier applies the rule in Redis, atomically with the lease it ends; the Go form
// exists so the rule can be read, reasoned about and tested in one place: a table test
// (shared/itest) checks the Lua module against it.
package politeness

import (
	"embed"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/trawl/trawl/shared/envconfig"
	"github.com/trawl/trawl/shared/redisx"
)

//go:embed lua/*.lua
var luaFS embed.FS

// Module is the Lua module of the rule (lua/politeness.lua): gap, backoff and next_fetch.
// A script that includes it must define MIND, KF, MAXCD, RETRYB and MAXBO first.
var Module = redisx.Lua{FS: luaFS, Name: "lua/politeness.lua"}

// Rules are the politeness settings.
type Rules struct {
	MinDelay      time.Duration // TRAWL_MIN_DELAY: least gap between two requests to a host
	DelayFactor   float64       // TRAWL_DELAY_FACTOR: k, the gap's multiple of the last response time
	MaxCrawlDelay time.Duration // TRAWL_MAX_CRAWL_DELAY: a robots.txt Crawl-delay above this is capped
	RetryBackoff  time.Duration // TRAWL_RETRY_BACKOFF: wait after a host's first error in a row
	MaxBackoff    time.Duration // TRAWL_MAX_BACKOFF: the longest error backoff (and Retry-After honoured)
	// Per is TRAWL_POLITENESS: PerHost spaces requests per host name only; PerIP also
	// spaces them per server address, across every fetcher and shard (Servers).
	Per Per
}

// Per says what the rule spaces requests to.
type Per string

const (
	// PerHost: each host name keeps its own gap. The zero Per means the same.
	PerHost Per = "host"
	// PerIP: each host keeps its gap, and each server address too: one request in flight
	// per address, the next one a gap after it ends.
	PerIP Per = "ip"
)

// Defaults are the rules with every setting unset: one request per second at most, five
// times the response time apart, Crawl-delay honoured up to 30 s, errors backed off from
// 30 s doubling up to 10 min.
var Defaults = Rules{
	MinDelay:      time.Second,
	DelayFactor:   5,
	MaxCrawlDelay: 30 * time.Second,
	RetryBackoff:  30 * time.Second,
	MaxBackoff:    10 * time.Minute,
	Per:           PerHost,
}

// Load reads the rules; range checks are Validate's.
func Load(r *envconfig.Reader) Rules {
	return Rules{
		MinDelay:      r.Duration("MIN_DELAY", Defaults.MinDelay),
		DelayFactor:   r.Float("DELAY_FACTOR", Defaults.DelayFactor),
		MaxCrawlDelay: r.Duration("MAX_CRAWL_DELAY", Defaults.MaxCrawlDelay),
		RetryBackoff:  r.Duration("RETRY_BACKOFF", Defaults.RetryBackoff),
		MaxBackoff:    r.Duration("MAX_BACKOFF", Defaults.MaxBackoff),
		Per:           Per(r.String("POLITENESS", string(Defaults.Per))),
	}
}

// Validate reports every setting out of range.
func (r Rules) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if r.MinDelay < 0 || r.MinDelay > time.Hour {
		bad("TRAWL_MIN_DELAY=%s: want 0..1h", r.MinDelay)
	}
	if !(r.DelayFactor >= 0 && r.DelayFactor <= 1000) {
		bad("TRAWL_DELAY_FACTOR=%g: want 0..1000", r.DelayFactor)
	}
	if r.MaxCrawlDelay < 0 || r.MaxCrawlDelay > 24*time.Hour {
		bad("TRAWL_MAX_CRAWL_DELAY=%s: want 0..24h", r.MaxCrawlDelay)
	}
	if r.RetryBackoff < time.Millisecond || r.RetryBackoff > 24*time.Hour {
		bad("TRAWL_RETRY_BACKOFF=%s: want 1ms..24h", r.RetryBackoff)
	}
	if r.MaxBackoff < r.RetryBackoff || r.MaxBackoff > 7*24*time.Hour {
		bad("TRAWL_MAX_BACKOFF=%s: want TRAWL_RETRY_BACKOFF (%s)..168h", r.MaxBackoff, r.RetryBackoff)
	}
	if r.Per != "" && r.Per != PerHost && r.Per != PerIP {
		bad("TRAWL_POLITENESS=%q: want host or ip", r.Per)
	}
	return errors.Join(errs...)
}

// Args are the rules as the Lua module reads them, in the order MIND, KF, MAXCD, RETRYB,
// MAXBO (milliseconds and the factor).
func (r Rules) Args() []any {
	return []any{ms(r.MinDelay), strconv.FormatFloat(r.DelayFactor, 'g', -1, 64), ms(r.MaxCrawlDelay),
		ms(r.RetryBackoff), ms(r.MaxBackoff)}
}

func ms(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

// The rule works in milliseconds as float64, as the Lua module does (Redis's Lua numbers
// are doubles), so that the two agree to the millisecond: times are rounded only at the
// end, half to even, as the scripts' "%.0f" does.
func msf(d time.Duration) float64 { return float64(d.Milliseconds()) }

// Gap is the least time from the end of a request to the next request to the host: the
// minimum delay, the host's Crawl-delay (capped at MaxCrawlDelay) and DelayFactor times
// the response time, whichever is largest. capped says the Crawl-delay was over the cap.
func (r Rules) Gap(crawlDelay, responseTime time.Duration) (gap time.Duration, capped bool) {
	g, capped := r.gap(msf(crawlDelay), msf(responseTime))
	return time.Duration(math.RoundToEven(g)) * time.Millisecond, capped
}

func (r Rules) gap(cd, rt float64) (float64, bool) {
	capped := false
	if cd > msf(r.MaxCrawlDelay) {
		cd, capped = msf(r.MaxCrawlDelay), true
	}
	return max(msf(r.MinDelay), cd, r.DelayFactor*rt), capped
}

// Backoff is the wait after the errs-th error in a row (errs ≥ 1): RetryBackoff doubled
// per error, at most MaxBackoff.
func (r Rules) Backoff(errs int) time.Duration {
	return time.Duration(r.backoff(errs)) * time.Millisecond
}

func (r Rules) backoff(errs int) float64 {
	x := min(errs-1, 40)
	return min(msf(r.RetryBackoff)*math.Pow(2, float64(x)), msf(r.MaxBackoff))
}

// Host is what the rule needs to know of a host.
type Host struct {
	Next         time.Time     // its stored next fetch time
	CrawlDelay   time.Duration // its robots.txt Crawl-delay (uncapped)
	LastResponse time.Duration // its last response time
}

// Outcome is what the rule needs to know of a task's end.
type Outcome struct {
	// Requested: a request reached the host and took Took.
	Requested bool
	Took      time.Duration
	// Late: the outcome came after its lease expired.
	Late bool
	// ErrStreak > 0: the outcome is an error, the ErrStreak-th in a row.
	ErrStreak int
	// Wait: the host (Retry-After) or the fetcher (a busy server) asked to wait this long.
	Wait time.Duration
}

// NextFetch is the host's next fetch time after an outcome at now:
//   - after a request, a full gap from now;
//   - with no request, the stored next time (nothing was spent);
//   - a late outcome waits a full gap from now with the last response time, because a
//     request of an earlier delivery may have just ended;
//   - an error waits its backoff, and a requested wait (capped at MaxBackoff) is honoured.
//
// capped says the Crawl-delay was over the cap (after a request only).
func (r Rules) NextFetch(now time.Time, h Host, o Outcome) (next time.Time, capped bool) {
	n := float64(now.UnixMilli())
	te := n
	if o.Requested {
		var g float64
		g, capped = r.gap(msf(h.CrawlDelay), msf(o.Took))
		te = n + g
	} else if nx := float64(h.Next.UnixMilli()); nx > te {
		te = nx
	}
	if o.Late {
		g, _ := r.gap(msf(h.CrawlDelay), msf(h.LastResponse))
		te = max(te, n+g)
	}
	if o.ErrStreak > 0 {
		te = max(te, n+r.backoff(o.ErrStreak))
	}
	te = max(te, n+min(msf(o.Wait), msf(r.MaxBackoff)))
	return time.UnixMilli(int64(math.RoundToEven(te))), capped
}
