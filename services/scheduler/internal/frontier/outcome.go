package frontier

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/errclass"
	"github.com/trawl/trawl/shared/policy"
	"github.com/trawl/trawl/shared/redisx"
)

// Result is what Complete did with one outcome.
type Result uint8

const (
	// ResultInvalid: the outcome's kind is unknown; nothing was changed (the lease stays
	// until it expires).
	ResultInvalid Result = iota
	// ResultStale: the lease token no longer holds the host (a duplicate or a late outcome).
	ResultStale
	ResultFetched
	// ResultRetry: the URL went back to the head of its host queue with attempt+1.
	ResultRetry
	ResultFailed
	ResultDisallowed
	// ResultRequeued: the URL went back to the head of its host queue with the same attempt
	// (robots.txt was fetched instead, the task expired before the fetch, or it was
	// deferred), or counting an attempt (a fetcher on older rules than the scheduler's
	// parked it or found it out of scope: recheckPolicy).
	ResultRequeued
	// ResultParked: a live policy blocks the URL (the fetcher made no request): it went to
	// its host's park list with the same attempt, until the block is lifted.
	ResultParked
	// ResultOutOfScope: a live policy narrowed the scope since the URL was queued (the
	// fetcher made no request): it ended out of scope.
	ResultOutOfScope
)

var resultNames = [...]string{"invalid", "stale", "fetched", "retry", "failed", "disallowed", "requeued", "parked", "out_of_scope"}

func (r Result) String() string {
	if int(r) < len(resultNames) {
		return resultNames[r]
	}
	return "result(" + strconv.Itoa(int(r)) + ")"
}

// Applied reports one outcome's effect.
type Applied struct {
	Host   string
	Result Result
	// Next is the host's next fetch time (zero for stale and invalid outcomes).
	Next time.Time
	// CrawlDelayCapped says the host's Crawl-delay exceeded MaxCrawlDelay and was capped.
	CrawlDelayCapped bool
	// NewCappedCrawlDelay says this outcome stored a new Crawl-delay for the host that
	// exceeds MaxCrawlDelay: true once per host and value, so it can be logged.
	NewCappedCrawlDelay bool
	// Retired says this outcome's failure retired the host (Result is ResultFailed);
	// RetiredQueued URLs of its back queue ended as failed with it.
	Retired       bool
	RetiredQueued int
	// Refunded says the outcome's page charge was returned (no page request was made).
	Refunded bool
	// Planned is the result the outcome was to have by its kind and the rules in force,
	// also when it came stale: a skip (disallowed, out of scope, a permanent failure) whose
	// first application was not logged can be logged on redelivery. A retry that ends
	// failed (attempts spent) is planned as a retry.
	Planned Result
}

// action codes shared with complete.lua.
type action int

const (
	actFetched    action = 1
	actRetry      action = 2
	actFailed     action = 3
	actDisallowed action = 4
	actRequeue    action = 5
	actPark       action = 6
	actOutOfScope action = 7
	// actRecheck: back to the head of the host queue counting an attempt (recheckPolicy).
	actRecheck action = 0
)

// health is what an outcome says about its host, for retirement (codes shared with
// complete.lua). A host is retired when it fails, not when a few of its URLs do: a URL
// counts once in the host's failure streak (at its first attempt), however often it is
// retried, and an answer with a 5xx retires the host only when most of its recent answers
// are errors too.
type health uint8

const (
	// healthNone: no request reached the host, or the outcome says nothing of its health
	// (a URL the fetcher cannot request, a secret it cannot read).
	healthNone health = 0
	// healthDown: the host did not answer (connection refused or reset, a timeout, a DNS
	// failure, robots.txt unavailable); a streak of RetireAfter URLs retires the host.
	healthDown health = 1
	// healthAnswered: the host answered (2xx-4xx, 429 included, or robots.txt); the
	// failure streak starts over.
	healthAnswered health = 2
	// healthErrorAnswer: the host answered with a 5xx. It counts in the streak, but
	// retires the host only when most of the host's recent answers are errors.
	healthErrorAnswer health = 3
	// healthGone: the host's name does not exist (the DNS said so, twice): the host is
	// retired at once.
	healthGone health = 4
)

// plan is how an outcome is applied.
type plan struct {
	act action
	// resetStreak: the host answered, so its error backoff starts over.
	resetStreak bool
	// refund: no page request was made, so the page budget charge of the dispatch is
	// returned.
	refund bool
	health health
}

// classify maps an outcome to its plan; ok is false for an unknown kind.
func classify(o crawlmsg.Outcome) (p plan, ok bool) {
	switch o.Kind {
	case crawlmsg.OutcomeFetched:
		switch {
		case o.Status >= 500:
			return plan{act: actRetry, health: healthErrorAnswer}, true
		case o.Status == 429:
			// The host is up and asks to slow down: back off, but do not retire it.
			return plan{act: actRetry, health: healthAnswered}, true
		}
		return plan{act: actFetched, resetStreak: true, health: healthAnswered}, true
	case crawlmsg.OutcomeError:
		switch {
		case o.Permanent && errclass.IsNoSuchHostReason(o.Error):
			// A fact about the name: the host's URLs end now rather than each wait its
			// turn and backoff.
			return plan{act: actFailed, health: healthGone}, true
		case o.Permanent:
			// An error the URL carries (one the fetcher cannot request, a secret it cannot
			// read): it fails at once and says nothing of the host.
			return plan{act: actFailed}, true
		}
		return plan{act: actRetry, health: healthDown}, true
	case crawlmsg.OutcomeRobotsUnavailable:
		return plan{act: actRetry, refund: true, health: healthDown}, true
	case crawlmsg.OutcomeBlocked:
		return plan{act: actFailed, refund: true}, true
	case crawlmsg.OutcomeTooLarge:
		// The host answered, but the page cannot be stored: the same answer would be
		// refused again, so the URL fails at once.
		return plan{act: actFailed, resetStreak: true, health: healthAnswered}, true
	case crawlmsg.OutcomeDisallowed:
		return plan{act: actDisallowed, refund: true}, true
	case crawlmsg.OutcomeRobots:
		return plan{act: actRequeue, resetStreak: true, refund: true, health: healthAnswered}, true
	case crawlmsg.OutcomeExpired, crawlmsg.OutcomeDeferred, crawlmsg.OutcomeServerBusy:
		return plan{act: actRequeue, refund: true}, true
	case crawlmsg.OutcomeParked:
		return plan{act: actPark, refund: true}, true
	case crawlmsg.OutcomeOutOfScope:
		return plan{act: actOutOfScope, refund: true}, true
	}
	return plan{}, false
}

// recheckPolicy checks a parked or out-of-scope outcome (act) again when the fetcher
// decided it by older rules than the scheduler's (a change not yet loaded there, taken
// with a task dispatched right after it): the rules in force decide. A URL they block is
// parked, one they do not admit ends out of scope, and one they admit and do not block,
// which a park list would hold until a pass resumes it or which would end for good, goes
// back to the head of its queue (actRecheck), counting an attempt: a fetcher stuck on old
// rules (its store unreachable) cannot send it round forever, and once its attempts are
// spent the fetcher's answer stands. Were the host blocked in the shard's table after all,
// the outcome parks the whole queue with it. An outcome decided by the scheduler's rules
// or newer ones stands: the scheduler may be the one behind.
func recheckPolicy(rules *policy.Set, o crawlmsg.Outcome, act action, maxRetries int) action {
	if o.PolicyVersion >= rules.Version() {
		return act
	}
	res := rules.URL(o.URL)
	if res.Blocked() {
		return actPark
	}
	if act == actOutOfScope {
		if ok, _ := res.Admit(o.URL, o.Depth); !ok {
			return actOutOfScope
		}
	}
	if o.Attempt+1 > maxRetries {
		return act
	}
	return actRecheck
}

func secondsToMs(s float64) int64 {
	if s <= 0 || math.IsNaN(s) {
		return 0
	}
	if s > 1e9 {
		s = 1e9
	}
	return int64(s * 1000)
}

// Complete applies fetch outcomes in one script call. An outcome whose lease token no
// longer holds its host is ignored (ResultStale). Otherwise the host's next fetch time is
// set from the request's cost (or left as it was when no request was made), backed off on
// errors, and the URL ends terminal or goes back to the head of its host queue. A host
// whose queue is empty gives up its back queue and the router admits a waiting host. A
// failure that makes the host's failure streak reach RetireAfter retires the host: its
// queued URLs end as failed (Applied.Retired) and later ones fail on admission.
func (f *Frontier) Complete(ctx context.Context, outs []crawlmsg.Outcome) ([]Applied, error) {
	applied := make([]Applied, len(outs))
	idx := make([]int, 0, len(outs))
	refund := make([]bool, len(outs))
	args := f.args(1 + completeFields*len(outs))
	nArg := len(args)
	args = append(args, "0")
	var rules *policy.Set
	if f.rules != nil {
		rules = f.rules()
	}
	for i, o := range outs {
		applied[i].Host = o.Host
		p, ok := classify(o)
		if !ok || o.Host == "" || o.Lease == "" {
			applied[i].Result = ResultInvalid
			continue
		}
		if rules != nil && (p.act == actPark || p.act == actOutOfScope) {
			p.act = recheckPolicy(rules, o, p.act, f.o.MaxRetries)
		}
		applied[i].Planned = p.act.result()
		cd := int64(-1)
		// A robots outcome, or one whose task fetched robots.txt first, carries the freshly
		// fetched file's Crawl-delay (0 = none), so it replaces the stored one; other
		// outcomes only ever bring a positive value.
		if o.Kind == crawlmsg.OutcomeRobots || o.Robots || o.CrawlDelay > 0 {
			cd = secondsToMs(o.CrawlDelay)
		}
		refund[i] = p.refund
		args = append(args, o.Host, o.Lease, strconv.Itoa(p.flags(o.Requested, o.Attempt == 0)),
			strconv.FormatInt(max(o.DurationMs, 0), 10), strconv.FormatInt(cd, 10),
			strconv.FormatInt(secondsToMs(o.RetryAfter), 10), errorLine(o, p), o.Addr,
			pageSeqArg(o))
		idx = append(idx, i)
	}
	if len(idx) == 0 {
		return applied, nil
	}
	args[nArg] = strconv.Itoa(len(idx))
	v, err := f.run(ctx, scriptComplete, args)
	if err != nil {
		return nil, err
	}
	r, err := redisx.Int64s(v)
	if err != nil || len(r) != 4*len(idx) {
		return nil, fmt.Errorf("frontier: complete: unexpected reply %v: %w", v, err)
	}
	for j, i := range idx {
		res, next, capped, retired := r[4*j], r[4*j+1], r[4*j+2], r[4*j+3]
		a := &applied[i]
		if res == 0 {
			a.Result = ResultStale
			continue
		}
		a.Result = action(res).result()
		a.Next = time.UnixMilli(next)
		a.Refunded = refund[i]
		a.CrawlDelayCapped = capped&1 != 0
		a.NewCappedCrawlDelay = capped&2 != 0
		if retired >= 0 {
			a.Retired, a.RetiredQueued = true, int(retired)
		}
	}
	return applied, nil
}

// result is the Result of an outcome applied with a.
func (a action) result() Result {
	switch a {
	case actFetched:
		return ResultFetched
	case actRetry:
		return ResultRetry
	case actFailed:
		return ResultFailed
	case actDisallowed:
		return ResultDisallowed
	case actRequeue, actRecheck:
		return ResultRequeued
	case actPark:
		return ResultParked
	case actOutOfScope:
		return ResultOutOfScope
	}
	return ResultInvalid
}

// completeFields is the number of complete.lua arguments per outcome.
const completeFields = 9

// flags packs the plan, whether a request was made and whether it was the URL's first
// attempt into complete.lua's flags argument: action + 8·requested + 16·resetStreak +
// 32·refund + 64·health + 512·first.
func (p plan) flags(requested, first bool) int {
	f := int(p.act) + 64*int(p.health)
	if requested {
		f += 8
	}
	if p.resetStreak {
		f += 16
	}
	if p.refund {
		f += 32
	}
	if first {
		f += 512
	}
	return f
}

// pageSeqArg is complete.lua's page argument: the page's sequence, and after a space the
// pages its message carries when it is a bundle.
func pageSeqArg(o crawlmsg.Outcome) string {
	seq := strconv.FormatUint(o.PageSeq, 10)
	if o.PageSeq == 0 || o.PageParts <= 1 {
		return seq
	}
	return seq + " " + strconv.Itoa(o.PageParts)
}
