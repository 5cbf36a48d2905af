package service

import (
	"context"
	"fmt"
	"net/netip"
	"net/url"
	"time"

	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/polite"
	"github.com/trawl/trawl/shared/politeness"
)

// serverLease is a request's hold on its server address (TRAWL_POLITENESS=ip): its
// request runs under Ctx (pinned to the address, ending within the claim; nil when the
// claim was refused).
type serverLease struct {
	politeness.ServerTurn
}

// atServer takes the address lease for one request to rawURL under reqCtx, where the
// address is known: the host is resolved as the dialer resolves it (the same cache and
// address policy) and the address the dial would use is claimed. It returns:
//   - lease nil, err nil: no lease applies (per-host politeness, or the URL is not
//     usable); request as usual;
//   - a lease with OK: request under lease.Ctx (pinned to the address), then
//     releaseServer;
//   - a lease without OK: the address is busy for Wait; make no request;
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
	t, err := s.servers.Take(reqCtx, addr, host, crawlDelay, s.requestTimeout(reqCtx), polite.ServerLimits(s.policies.Current(), host, addr))
	if err != nil {
		s.crawl.Invalidate()
		return nil, nil, err
	}
	if !t.OK {
		s.m.serverBusy.Inc()
	}
	return &serverLease{t}, nil, nil
}

// requestTimeout is how long a request under ctx may run: the fetch timeout, or less when
// the task's cutoff comes sooner. A claim on a host or server address is sized by it.
func (s *Service) requestTimeout(ctx context.Context) time.Duration {
	return min(time.Until(cutoffOf(ctx)), s.cfg.FetchTimeout)
}

// releaseServer ends a lease whose request took took (negative: no request was made).
func (s *Service) releaseServer(ctx context.Context, l *serverLease, took time.Duration) {
	if l == nil {
		return
	}
	if err := s.servers.End(ctx, l.ServerTurn, took); err != nil {
		// The claim's window still holds the address; it only waits longer.
		s.log.Warn("server address lease not released", "addr", l.Addr, "err", err)
	}
}

// serverBusy ends a task that made no request because its server address is busy: the
// URL waits at the head of its queue, no attempt counted, and the host's next task comes
// after the address's wait. The task holds no fetch slot meanwhile.
func serverBusy(out *crawlmsg.Outcome, l *serverLease) *crawlmsg.Outcome {
	out.Kind = crawlmsg.OutcomeServerBusy
	out.Requested = false
	out.RetryAfter = l.Wait.Seconds()
	out.Addr = l.Addr.String()
	out.Error = fmt.Sprintf("server %s is busy", l.Addr)
	return out
}

// pickFunc resolves a host to the address its dial would use.
type pickFunc func(ctx context.Context, host string) (netip.Addr, error)
