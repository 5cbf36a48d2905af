package service

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/trawl/trawl/services/fetcher/internal/fetch"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/errclass"
	"github.com/trawl/trawl/shared/polite"
	"github.com/trawl/trawl/shared/politeness"
	"github.com/trawl/trawl/shared/robots"
	"github.com/trawl/trawl/shared/robotscache"
	"github.com/trawl/trawl/shared/urlnorm"
)

// robotsNoSuchHost labels a robots.txt fetch whose origin's name does not exist.
const robotsNoSuchHost = "no-such-host"

// robotsFetched is a robots.txt that a task fetched in one request to its own host.
type robotsFetched struct {
	entry *robots.Entry
	end   time.Time     // when the request ended
	took  time.Duration // the request's time, which the host's gap is measured by
}

// goOnAfterRobots says whether the task may go on to its URL after fetching robots.txt
// (f, nil when that took more than one request or did not succeed): only when the politeness
// rule puts the host's next request no later than now, so that the two requests are as far
// apart as two tasks would be, and only when the task's lease and budget still hold a full
// request and its publishing. The rule is the host's as the frontier applies it: the
// process-wide settings under the limits the host's site policy sets in its shard's policy
// table (politeness.ReadHostLimits); a table that cannot be read leaves the URL to a task
// of its own, which the frontier spaces.
func (s *Service) goOnAfterRobots(ctx context.Context, task *crawlmsg.FetchTask, f *robotsFetched) bool {
	if f == nil {
		return false
	}
	now := s.now()
	if now.Add(s.cfg.FetchTimeout + deadlineSlack).After(s.lease.local(task.Deadline)) {
		return false
	}
	if dl, ok := ctx.Deadline(); ok && dl.Sub(now) < s.cfg.FetchTimeout+publishTimeout {
		return false
	}
	lim, err := politeness.ReadHostLimits(ctx, s.rdb, s.cfg.Common.RedisPrefix, task.Shard, s.cfg.Common.Shards, task.Host)
	if err != nil {
		s.log.Warn("robots.txt: the host's policy limits cannot be read; its URL waits for a task of its own", "host", task.Host, "err", err)
		return false
	}
	gap, _ := s.cfg.Politeness.With(lim).Gap(f.entry.CrawlDelay(), f.took)
	return !s.now().Before(f.end.Add(gap))
}

// fetchRobots makes the task's request robots.txt: the result is cached for every
// fetcher, and the outcome sends the URL back to wait the host's delay, so robots.txt is
// fetched under the same politeness as a page. ctx is the task's; the requests run under
// reqCtx, which ends before the lease.
//
// A redirect chain keeps every host's gap. The task's own host gets one request: when
// robots.txt redirects to the same host (http→https included), the hop is recorded in the
// cache and the outcome is `robots`, so the hop is the host's next task, after its delay.
// A hop to another host is made only under a claim on that host (politeness.Claimer): when
// that host is inside its gap or has a task out, the hop is recorded and the task ends
// `deferred` (or `robots`, if it made its own request), asking to be tried again when the
// other host is free; the URL waits at the head of its queue meanwhile, no attempt counted.
//
// Each request of the chain is made under the site policy of its own URL (its headers,
// only to its host), checked right before it: when the task's URL is blocked the task is
// parked, and a hop whose URL is blocked ends the chain as unreachable. The entry is
// reduced for rb's agent: the product token of the User-Agent the task's URL is crawled as.
func (s *Service) fetchRobots(ctx, reqCtx context.Context, out *crawlmsg.Outcome, origin, host string, rb robotsView) (*crawlmsg.Outcome, *robotsFetched, error) {
	hop, err := rb.store.GetHop(reqCtx, origin)
	if err != nil {
		s.crawl.Invalidate()
		return nil, nil, err
	}
	target, n := origin+"/robots.txt", 0
	if hop != nil {
		target, n = hop.URL, hop.N
	}
	limit := s.requests.RobotsMaxBytes()
	var (
		resp      *fetch.Response
		own       bool          // the task's own host was requested
		started   time.Time     // when the chain's first request of this task started
		ownTook   time.Duration // the own host's request time, its gap's measure
		requested bool
	)
	for {
		to, herr := urlnorm.Host(target)
		other := herr == nil && to != host
		if own && !other {
			// A second request to the task's own host waits for its next task.
			return noFresh(s.robotsHop(ctx, rb.store, out, origin, robotscache.Hop{URL: target, N: n}, started, ownTook, 0))
		}
		next := robotscache.Hop{URL: target, N: n}
		if rules := s.policies.Current(); rules.URL(out.URL).Blocked() {
			if requested {
				return noFresh(s.robotsHop(ctx, rb.store, out, origin, next, started, ownTook, 0))
			}
			return s.parked(out, parkedRobots, rules), nil, nil
		}
		tpol := s.policyOf(target)
		if tpol.Blocked() {
			s.m.policy.hopBlock.Inc()
			err = fmt.Errorf("robots.txt at %s: %w", target, errPolicyBlocked)
			if n > 0 {
				err = &fetch.RedirectError{Hop: n, URL: target, Err: err}
			}
			break
		}
		hdr, herr := s.requests.Headers(tpol, to)
		if herr != nil {
			if requested {
				s.log.Warn("robots.txt: the next hop's secret cannot be read", "origin", origin, "target", target, "err", herr)
				return noFresh(s.robotsHop(ctx, rb.store, out, origin, next, started, ownTook, 0))
			}
			return s.secretFailed(out, herr), nil, nil
		}
		// The server address first: a busy one ends the chain here, before another host
		// is claimed for nothing.
		lease, reqErr, lerr := s.atServer(reqCtx, target, 0)
		switch {
		case lerr != nil && requested:
			s.log.Warn("robots.txt: server lease failed", "origin", origin, "target", target, "err", lerr)
			return noFresh(s.robotsHop(ctx, rb.store, out, origin, next, started, ownTook, 0))
		case lerr != nil:
			return nil, nil, lerr
		case lease != nil && !lease.OK && requested:
			return noFresh(s.robotsHop(ctx, rb.store, out, origin, next, started, ownTook, lease.Wait))
		case lease != nil && !lease.OK:
			if n > 0 && (hop == nil || *hop != next) {
				if err := rb.store.PutHop(ctx, origin, next); err != nil {
					s.crawl.Invalidate()
					return nil, nil, err
				}
			}
			return serverBusy(out, lease), nil, nil
		}
		var claim politeness.HostTurn
		hopCtx := reqCtx
		if lease != nil {
			hopCtx = lease.Ctx
		}
		if other {
			// Taken under the address's turn: the hop ends within both claims.
			claim, err = s.claims.Take(hopCtx, to, s.requestTimeout(hopCtx))
			if err != nil || !claim.OK {
				s.releaseServer(ctx, lease, -1)
			} else {
				hopCtx = claim.Ctx
			}
			switch {
			case err != nil && requested:
				// The hop was not made: record it, and report the request that was.
				s.log.Warn("robots.txt redirect: claim failed", "origin", origin, "to", to, "err", err)
				return noFresh(s.robotsHop(ctx, rb.store, out, origin, robotscache.Hop{URL: target, N: n}, started, ownTook, 0))
			case err != nil:
				s.crawl.Invalidate()
				return nil, nil, err
			case !claim.OK && requested:
				return noFresh(s.robotsHop(ctx, rb.store, out, origin, robotscache.Hop{URL: target, N: n}, started, ownTook, claim.Wait))
			case !claim.OK:
				return noFresh(s.deferRobots(ctx, rb.store, out, origin, robotscache.Hop{URL: target, N: n}, hop, to, claim.Wait))
			}
		}
		hopCtx = polite.WithHeaders(hopCtx, hdr)
		t0 := s.now()
		if !requested {
			started = t0
		}
		// One octet over the limit tells robots.Parse the file went on, so it drops a cut line.
		switch {
		case reqErr != nil:
			// The dial would have failed the same way.
			resp, err = nil, reqErr
		case lease != nil:
			resp, err = s.client.GetRobots(hopCtx, target, limit+1)
			s.releaseServer(ctx, lease, s.now().Sub(t0))
		default:
			resp, err = s.client.GetRobots(hopCtx, target, limit+1)
		}
		took := s.now().Sub(t0)
		requested = true
		if other {
			if rerr := s.claims.End(ctx, claim, took); rerr != nil {
				// The claim's window still holds the host; it only waits longer.
				s.log.Warn("robots.txt redirect: claim not released", "host", to, "err", rerr)
			}
		} else {
			own, ownTook = true, took
		}
		if err != nil && n > 0 {
			err = &fetch.RedirectError{Hop: n, URL: target, Err: err}
		}
		if err != nil || !polite.FollowRobots(n, resp.Location) {
			break
		}
		s.m.bytes.Add(float64(resp.WireBytes))
		s.m.robotsFetches.WithLabelValues("redirect").Inc()
		out.Status = resp.Status
		target, n = resp.Location, n+1
	}

	var entry *robots.Entry
	switch {
	case err != nil && ctx.Err() != nil:
		return nil, nil, fmt.Errorf("fetcher: robots.txt of %s: %w", origin, err)
	case err != nil && fetch.IsBlocked(err) && !isRedirectErr(err):
		// The origin itself is not a public address: nothing was requested.
		s.m.robotsFetches.WithLabelValues("blocked").Inc()
		s.m.blocked.Inc()
		out.Kind, out.Error, out.Permanent = crawlmsg.OutcomeBlocked, err.Error(), true
		return out, nil, nil
	case err != nil && !isRedirectErr(err) && errclass.IsNoSuchHost(err):
		// The origin's name does not exist (the DNS said so twice: fetch.RecheckResolver):
		// a fact about the host rather than robots.txt being unavailable, so no entry is
		// cached and the outcome ends the URL, and the frontier the host's other URLs.
		s.m.robotsFetches.WithLabelValues(robotsNoSuchHost).Inc()
		out.Kind, out.Requested = crawlmsg.OutcomeError, own
		out.Error, out.Permanent = fetch.Reason(err), true
		if own {
			out.StartedAt, out.DurationMs = started.UnixMilli(), ownTook.Milliseconds()
		}
		return out, nil, nil
	case err != nil:
		entry = robots.UnreachableEntry(rb.agent, err, started)
		out.Error, out.Permanent = err.Error(), fetch.IsPermanent(err)
	default:
		s.m.bytes.Add(float64(resp.WireBytes))
		entry = robots.NewEntry(rb.agent, resp.Status, resp.Body, int(limit), started)
		out.Status = resp.Status
		out.RetryAfter = retryAfter(resp, started)
	}
	s.m.robotsFetches.WithLabelValues(entry.Class.String()).Inc()
	if err := rb.store.Put(ctx, origin, entry); err != nil {
		// The request was made, so the outcome is still owed to the scheduler; the next
		// task for the origin simply fetches robots.txt again.
		s.log.Warn("robots cache write failed", "origin", origin, "err", err)
	}
	if entry.Class != robots.Unreachable && s.cfg.SitemapsEnabled() {
		s.publishSitemaps(ctx, out.Lease, origin, entry)
	}
	// Requested and the duration speak of the task's own host: a chain served by other
	// hosts alone spent nothing of this host's gap.
	out.Requested = own
	if own {
		out.StartedAt = started.UnixMilli()
		out.DurationMs = ownTook.Milliseconds()
	}
	out.CrawlDelay = entry.CrawlDelay().Seconds()
	out.Kind = crawlmsg.OutcomeRobots
	if entry.Class == robots.Unreachable {
		out.Kind = crawlmsg.OutcomeRobotsUnavailable
	}
	if hop != nil || n > 0 {
		if err := rb.store.ClearHop(ctx, origin); err != nil {
			s.log.Warn("robots cache hop not cleared", "origin", origin, "err", err)
		}
	}
	s.log.Debug("robots.txt fetched", "origin", origin, "class", entry.Class, "status", out.Status, "err", out.Error)
	var fresh *robotsFetched
	if own && hop == nil && n == 0 && entry.Class != robots.Unreachable && out.RetryAfter == 0 {
		fresh = &robotsFetched{entry: entry, end: started.Add(ownTook), took: ownTook}
	}
	return out, fresh, nil
}

// noFresh is for the ends of a robots.txt chain that leave the URL to a later task.
func noFresh(out *crawlmsg.Outcome, err error) (*crawlmsg.Outcome, *robotsFetched, error) {
	return out, nil, err
}

// robotsHop records the origin's next robots.txt hop after this task's request to its own
// host and reports that request: the URL goes back to its host queue, and a later task
// requests the hop, after the host's delay and at least wait.
func (s *Service) robotsHop(ctx context.Context, rc *robotscache.Store, out *crawlmsg.Outcome, origin string, next robotscache.Hop, started time.Time, took, wait time.Duration) (*crawlmsg.Outcome, error) {
	if err := rc.PutHop(ctx, origin, next); err != nil {
		// The request was made, so its outcome is owed; the chain starts over next time.
		s.log.Warn("robots cache hop write failed", "origin", origin, "err", err)
	}
	out.Kind, out.Requested = crawlmsg.OutcomeRobots, true
	out.StartedAt = started.UnixMilli()
	out.DurationMs = took.Milliseconds()
	out.RetryAfter = wait.Seconds()
	s.log.Debug("robots.txt redirect; the next hop is a later task", "origin", origin, "hop", next.N, "to", next.URL, "wait", wait)
	return out, nil
}

// deferRobots ends a task that made no request because the next hop of its robots.txt
// chain goes to another host that is busy: the URL waits at the head of its queue and the
// host's next task, after wait, tries the hop again.
func (s *Service) deferRobots(ctx context.Context, rc *robotscache.Store, out *crawlmsg.Outcome, origin string, next robotscache.Hop, pending *robotscache.Hop, to string, wait time.Duration) (*crawlmsg.Outcome, error) {
	if pending == nil || *pending != next {
		if err := rc.PutHop(ctx, origin, next); err != nil {
			s.crawl.Invalidate()
			return nil, err
		}
	}
	s.m.robotsDeferred.Inc()
	out.Kind = crawlmsg.OutcomeDeferred
	out.RetryAfter = wait.Seconds()
	out.Error = fmt.Sprintf("robots.txt redirects to %s, which is inside its gap", to)
	s.log.Debug("robots.txt redirect to a busy host; task deferred", "origin", origin, "to", to, "wait", wait)
	return out, nil
}

func isRedirectErr(err error) bool {
	var re *fetch.RedirectError
	return errors.As(err, &re)
}
