package service

import (
	"context"
	"fmt"
	"net/netip"
	"net/url"
	"time"

	"github.com/trawl/trawl/services/fetcher/internal/fetch"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/policy"
	"github.com/trawl/trawl/shared/politeness"
)

// serverLease is a request's hold on its server address (TRAWL_POLITENESS=ip).
type serverLease struct {
	claim politeness.ServerClaim
	// ctx is the request's context, its connection pinned to the claimed address and
	// ending within the claim (nil when the claim was refused); cancel releases it.
	ctx    context.Context
	cancel context.CancelFunc
}

// atServer takes the address lease for one request to rawURL under reqCtx, where the
// address is known: the host is resolved as the dialer resolves it (the same cache and
// address policy) and the address the dial would use is claimed. It returns:
//   - lease nil, err nil: no lease applies (per-host politeness, or the URL is not
//     usable); request as usual;
//   - a lease with claim.OK: request under lease.ctx (pinned to the address), then
//     releaseServer;
//   - a lease without claim.OK: the address is busy for claim.Wait; make no request;
//   - reqErr: the host cannot be dialled at all (lookup failure, blocked address); it is
//     what the request would have failed with, and no request is made;
//   - err: Redis failed; the task must be retried.
func (s *Service) atServer(reqCtx context.Context, rawURL string, crawlDelay time.Duration) (lease *serverLease, reqErr, err error) {
	if s.servers == nil {
		return nil, nil, nil
	}
	u, perr := url.Parse(rawURL)
	if perr != nil || u.Hostname() == "" {
		return nil, nil, nil
	}
	host := u.Hostname()
	addr, rerr := s.pick(reqCtx, host)
	if rerr != nil {
		return nil, fmt.Errorf("fetch: %w", rerr), nil
	}
	// The claim lasts as long as the request can: a fetcher that dies holds the address
	// no longer than its request could have run.
	window, bounded, cancel := s.claimFor(reqCtx)
	c, err := s.servers.ClaimWith(reqCtx, addr, host, crawlDelay, window, s.serverLimits(host, addr))
	if err != nil {
		cancel()
		s.crawl.Invalidate()
		return nil, nil, err
	}
	if !c.OK {
		cancel()
		s.m.serverBusy.Inc()
		return &serverLease{claim: c}, nil, nil
	}
	return &serverLease{claim: c, ctx: fetch.At(bounded, host, addr), cancel: cancel}, nil, nil
}

// claimFor sizes a claim on a host or server address for a request under ctx, and bounds
// the request to it (politeness.ClaimFor): the fetch timeout, or less when the task's
// cutoff comes sooner.
func (s *Service) claimFor(ctx context.Context) (window time.Duration, bounded context.Context, cancel context.CancelFunc) {
	return politeness.ClaimFor(ctx, min(time.Until(cutoffOf(ctx)), s.cfg.FetchTimeout))
}

// releaseServer ends a lease whose request took took (negative: no request was made).
func (s *Service) releaseServer(ctx context.Context, l *serverLease, took time.Duration) {
	if l == nil || !l.claim.OK {
		return
	}
	l.cancel()
	if _, err := s.servers.Release(ctx, l.claim, took); err != nil {
		// The claim's window still holds the address; it only waits longer.
		s.log.Warn("server address lease not released", "addr", l.claim.Addr, "err", err)
	}
}

// serverBusy ends a task that made no request because its server address is busy: the
// URL waits at the head of its queue, no attempt counted, and the host's next task comes
// after the address's wait. The task holds no fetch slot meanwhile.
func serverBusy(out *crawlmsg.Outcome, l *serverLease) *crawlmsg.Outcome {
	out.Kind = crawlmsg.OutcomeServerBusy
	out.Requested = false
	out.RetryAfter = l.claim.Wait.Seconds()
	out.Addr = l.claim.Addr.String()
	out.Error = fmt.Sprintf("server %s is busy", l.claim.Addr)
	return out
}

// exactCrawlDelay is the cap that honours any Crawl-delay a robots.txt can state.
const exactCrawlDelay = 365 * 24 * time.Hour

// serverLimits are the site policies' limits for a request to host at addr: field by
// field, the host's own rules (host, domain) over the address-block rules that contain
// addr, over the process-wide settings (an unset field).
func (s *Service) serverLimits(host string, addr netip.Addr) politeness.ServerLimits {
	set := s.policies.Current()
	h, a := set.Host(host), set.Addr(addr)
	var lim politeness.ServerLimits
	for _, r := range []policy.Resolved{a, h} {
		if r.MinDelay != nil {
			d := time.Duration(*r.MinDelay)
			lim.MinDelay = &d
		}
		if r.DelayFactor != nil {
			f := *r.DelayFactor
			lim.DelayFactor = &f
		}
		if r.CrawlDelay != nil {
			d := r.CrawlDelay.Cap
			if r.CrawlDelay.Exact {
				d = exactCrawlDelay
			}
			lim.MaxCrawlDelay = &d
		}
		if r.Connections != nil {
			lim.Connections = *r.Connections
		}
	}
	return lim
}

// pickFunc resolves a host to the address its dial would use.
type pickFunc func(ctx context.Context, host string) (netip.Addr, error)
