package service

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/frontierkeys"
	"github.com/trawl/trawl/shared/polite"
	"github.com/trawl/trawl/shared/robots"
)

// process decides the task and makes its request, if any. It returns the outcome and the
// page to store before it; an error means the task must be retried.
func (s *Service) process(ctx context.Context, task *crawlmsg.FetchTask) (*crawlmsg.Outcome, *pageResult, error) {
	out := &crawlmsg.Outcome{Shard: task.Shard, Host: task.Host, URL: task.URL, Lease: task.Lease, Attempt: task.Attempt}

	// After the deadline the scheduler may give the host to another fetcher, so a request
	// that could still be running then must not start.
	if s.now().Add(s.cfg.FetchTimeout + deadlineSlack).After(s.lease.local(task.Deadline)) {
		return s.expired(out), nil, nil
	}
	if s.mayBeRedelivered(task) {
		held, err := frontierkeys.LeaseHeld(ctx, s.rdb, s.cfg.Common.RedisPrefix, task.Shard, s.cfg.Common.Shards, task.Host, task.Lease)
		if err != nil {
			return nil, nil, err // tried again in place, as a robots lookup's failure is
		}
		if !held {
			// Answered already: made again, its request would come outside the host's turn.
			s.m.staleTasks.Inc()
			out.Kind = crawlmsg.OutcomeExpired
			return out, nil, nil
		}
	}
	u, err := url.Parse(task.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		s.m.blocked.Inc()
		out.Kind, out.Permanent = crawlmsg.OutcomeBlocked, true
		out.Error = fmt.Sprintf("unfetchable URL %q", task.URL)
		return out, nil, nil
	}
	origin := originOf(task.URL, u)
	// The site policies are read when the task starts on its worker, not when it was
	// received, and again right before each request it makes (fetchPage, fetchRobots):
	// a block set while the task waited is obeyed.
	rules := s.policies.Current()
	pol := rules.URL(task.URL)
	if pol.Blocked() {
		return s.parked(out, parkedPage, rules), nil, nil
	}
	if o := s.outOfScope(task, rules, pol, out); o != nil {
		return o, nil, nil
	}
	rb := s.robotsFor(pol)

	// Whatever the robots lookup below costs, the request ends deadlineSlack before the
	// lease: its context carries that cut-off, on top of the fetch timeout.
	cutoff := s.lease.local(task.Deadline).Add(-deadlineSlack)
	reqCtx := ctx
	if d, ok := ctx.Deadline(); !ok || cutoff.Before(d) {
		// Only when the cut-off is the tighter bound: otherwise ctx already ends first and
		// another timer would change nothing.
		var cancel context.CancelFunc
		reqCtx, cancel = context.WithDeadline(ctx, cutoff)
		defer cancel()
	}

	entry, err := rb.store.Get(reqCtx, origin)
	if err != nil {
		if ctx.Err() == nil && reqCtx.Err() != nil {
			return s.expired(out), nil, nil
		}
		// Redis failed: make the gate ping again before the next pull, so an outage pauses
		// consumption at once instead of spending deliveries on naks.
		s.crawl.Invalidate()
		return nil, nil, err
	}
	if s.now().Add(minRequestTime).After(cutoff) {
		// The lookup took the time the request needed.
		return s.expired(out), nil, nil
	}
	if entry == nil {
		s.m.robotsDecisions.WithLabelValues("miss").Inc()
		rout, fresh, err := s.fetchRobots(ctx, reqCtx, out, origin, task.Host, rb)
		if err != nil || !s.goOnAfterRobots(ctx, task, fresh) {
			return rout, nil, err
		}
		// The host's gap after robots.txt has passed already (no delay is set, or the file
		// was slow enough to cover it): the URL is decided now instead of in a task of its
		// own, saving the host a round trip through the frontier. The outcome speaks of the
		// last request; until the page's is made, that is robots.txt's.
		s.m.robotsThenPage.Inc()
		entry = fresh.entry
		out = &crawlmsg.Outcome{Shard: task.Shard, Host: task.Host, URL: task.URL, Lease: task.Lease, Attempt: task.Attempt,
			Robots: true, CrawlDelay: rout.CrawlDelay, Requested: true, StartedAt: rout.StartedAt, DurationMs: rout.DurationMs}
	}
	// The same decision trawlctl's "robots check" shows an operator. An unreachable
	// robots.txt sends every task back (even one for /robots.txt itself, which the RFC
	// would allow): the host is down, and the scheduler must back off.
	d := polite.Decide(entry, u)
	switch {
	case d.Class == robots.Unreachable:
		s.m.robotsDecisions.WithLabelValues("unavailable").Inc()
		out.Kind, out.Error = crawlmsg.OutcomeRobotsUnavailable, entry.Error
		return out, nil, nil
	case !d.Allowed:
		s.m.robotsDecisions.WithLabelValues("disallowed").Inc()
		out.Kind = crawlmsg.OutcomeDisallowed
		return out, nil, nil
	}
	s.m.robotsDecisions.WithLabelValues("allowed").Inc()
	out.CrawlDelay = d.CrawlDelay.Seconds()
	return s.fetchPage(ctx, reqCtx, task, u, out, rules, pol)
}

// originOf is u's scheme://host[:port], rawURL's own prefix when it is written so (a
// normalised URL is), which spares a string per task.
func originOf(rawURL string, u *url.URL) string {
	n := len(u.Scheme) + len("://") + len(u.Host)
	if n <= len(rawURL) && rawURL[:len(u.Scheme)] == u.Scheme && rawURL[len(u.Scheme):len(u.Scheme)+3] == "://" && rawURL[len(u.Scheme)+3:n] == u.Host &&
		(n == len(rawURL) || rawURL[n] == '/' || rawURL[n] == '?' || rawURL[n] == '#') {
		return rawURL[:n]
	}
	return u.Scheme + "://" + u.Host
}

// cutoffOf is ctx's deadline; reqCtx always has one (the task's cut-off).
func cutoffOf(ctx context.Context) time.Time {
	if d, ok := ctx.Deadline(); ok {
		return d
	}
	return time.Now().Add(time.Minute)
}

// expired reports a task that cannot make its request before its lease ends.
func (s *Service) expired(out *crawlmsg.Outcome) *crawlmsg.Outcome {
	s.m.expired.Inc()
	out.Kind = crawlmsg.OutcomeExpired
	return out
}

// mayBeRedelivered says whether task was dispatched before this process's NATS session
// began (less a second for the clocks; a task without its dispatch time, from an older
// scheduler, is not checked). JetStream keeps a consumer's delivery state in
// memory for a while before its file, so after a restart of NATS (a crash, or a whole
// stack's) it can hand out again, as never delivered, a task whose request a fetcher made
// and whose outcome the scheduler has taken; within its lease that request would be made
// again out of the host's turn. Such a task's lease is checked in Redis first; a task
// dispatched since cannot have been handed out before, so the common path asks nothing.
// So is one dispatched before Redis was last out of reach: Redis may be back from an OS
// crash without the dispatch, and then the frontier dispatches the host again while the
// task is still in NATS, a request beside the new task's.
func (s *Service) mayBeRedelivered(task *crawlmsg.FetchTask) bool {
	if task.Dispatched == 0 {
		return false
	}
	at := s.lease.local(task.Dispatched).Add(-time.Second)
	if f := s.crawl.FailedAt(); !f.IsZero() && at.Before(f) {
		return true
	}
	return at.UnixNano() < s.session.Load()
}
