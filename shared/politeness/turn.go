package politeness

import (
	"context"
	"net/netip"
	"time"

	"github.com/trawl/trawl/shared/safedial"
)

// A turn is one request's claim and the context it runs under. Every process that makes a
// request outside a task of the frontier (the renderer's every request, the fetcher's
// server address and robots.txt hops to other hosts) takes its claims through Take and
// ends them through End, so a request is spaced and bounded alike whichever makes it. A
// request holding two claims takes the second under the first's context: it then ends
// within both windows.

// HostTurn is a request's claim on a host (Claimer.Take).
type HostTurn struct {
	Claim
	// Ctx is the request's context, ending within the claim's window (ClaimFor); nil
	// when the claim was not given.
	Ctx    context.Context
	cancel context.CancelFunc
}

// Take claims host for one request that may run up to timeout under ctx. When the claim
// is given (OK), make the request under t.Ctx, then End it; otherwise ask again after
// t.Wait.
func (c *Claimer) Take(ctx context.Context, host string, timeout time.Duration) (HostTurn, error) {
	window, bounded, cancel := ClaimFor(ctx, timeout)
	cl, err := c.Claim(ctx, host, window)
	if err != nil || !cl.OK {
		cancel()
		return HostTurn{Claim: cl}, err
	}
	return HostTurn{Claim: cl, Ctx: bounded, cancel: cancel}, nil
}

// End ends t after its request took took (negative: none was made), setting the host's
// next turn. A turn not given is left alone. On an error the claim's window still holds
// the host: it waits longer, never less.
func (c *Claimer) End(ctx context.Context, t HostTurn, took time.Duration) error {
	if !t.OK {
		return nil
	}
	t.cancel()
	_, err := c.Release(ctx, t.Claim, took)
	return err
}

// ServerTurn is a request's claim on its server address (Servers.Take).
type ServerTurn struct {
	ServerClaim
	// Ctx is the request's context, ending within the claim's window and its dials pinned
	// to the claimed address (safedial.Pin); nil when the claim was not given.
	Ctx    context.Context
	cancel context.CancelFunc
}

// Take claims addr, the address a request to host will be dialled at (resolved before
// the claim: a slow name server would otherwise eat into its window), for one request
// that may run up to timeout under ctx, under the site policies' limits lim. When the
// claim is given (OK), make the request under t.Ctx, then End it; otherwise ask again
// after t.Wait.
func (s *Servers) Take(ctx context.Context, addr netip.Addr, host string, crawlDelay, timeout time.Duration, lim ServerLimits) (ServerTurn, error) {
	window, bounded, cancel := ClaimFor(ctx, timeout)
	c, err := s.ClaimWith(ctx, addr, host, crawlDelay, window, lim)
	if err != nil || !c.OK {
		cancel()
		return ServerTurn{ServerClaim: c}, err
	}
	return ServerTurn{ServerClaim: c, Ctx: safedial.Pin(bounded, host, addr), cancel: cancel}, nil
}

// End ends t after its request took took (negative: none was made). A turn not given is
// left alone. On an error the claim's window still holds the address.
func (s *Servers) End(ctx context.Context, t ServerTurn, took time.Duration) error {
	if !t.OK {
		return nil
	}
	t.cancel()
	_, err := s.Release(ctx, t.ServerClaim, took)
	return err
}
