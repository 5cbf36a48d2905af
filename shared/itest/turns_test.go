package itest

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/trawl/trawl/devstack/redisproc"
	"github.com/trawl/trawl/shared/politeness"
	"github.com/trawl/trawl/shared/safedial"
)

// TestTurns: the claims every request outside a frontier task takes (the renderer's, the
// fetcher's server leases and robots.txt hops) space two requests to one host and to one
// server, bound the request to the window, pin its dials to the claimed address, and end
// with the gap after the request; a second claim taken under the first ends within both.
func TestTurns(t *testing.T) {
	rdb := redisClient(t, redisproc.StartT(t, redisproc.Options{}))
	rules := politeness.Rules{MinDelay: 2 * time.Second, DelayFactor: 0, MaxCrawlDelay: 30 * time.Second,
		RetryBackoff: time.Second, MaxBackoff: time.Minute, Per: politeness.PerIP}
	claims := politeness.NewClaimer(rdb, "turns-test", 1, rules)
	servers := politeness.NewServers(rdb, "turns-test", rules)
	ctx := context.Background()
	const timeout = 5 * time.Second
	addr := netip.MustParseAddr("192.0.2.10")

	ht, err := claims.Take(ctx, "a.test", timeout)
	if err != nil || !ht.OK {
		t.Fatalf("host turn: %+v, %v; want given", ht.Claim, err)
	}
	st, err := servers.Take(ht.Ctx, addr, "a.test", 0, timeout, politeness.ServerLimits{})
	if err != nil || !st.OK {
		t.Fatalf("server turn: %+v, %v; want given", st.ServerClaim, err)
	}
	// Both claims were asked for before this: each holds until now+timeout at the least.
	if dl, ok := st.Ctx.Deadline(); !ok || dl.After(time.Now().Add(timeout)) {
		t.Errorf("the request's deadline %v (set %v) is past its windows", dl, ok)
	}
	if got, ok := safedial.Pinned(st.Ctx); !ok || got != addr {
		t.Errorf("the request is pinned to %v (%v), want %s", got, ok, addr)
	}

	// Another process's request to the host, or to another host at the address, waits.
	if other, err := claims.Take(ctx, "a.test", timeout); err != nil || other.OK {
		t.Errorf("a second turn of the host while one is out: given %v, %v; want busy", other.OK, err)
	}
	if other, err := servers.Take(ctx, addr, "b.test", 0, timeout, politeness.ServerLimits{}); err != nil || other.OK {
		t.Errorf("a turn at the address while one is out: given %v, %v; want busy", other.OK, err)
	}

	if err := servers.End(ctx, st, 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := claims.End(ctx, ht, 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if ht.Ctx.Err() == nil || st.Ctx.Err() == nil {
		t.Error("an ended turn's context is still live")
	}
	// After the request, the next turn of each comes a min delay later.
	for name, take := range map[string]func() (bool, time.Duration, error){
		"host": func() (bool, time.Duration, error) {
			t, err := claims.Take(ctx, "a.test", timeout)
			return t.OK, t.Wait, err
		},
		"server": func() (bool, time.Duration, error) {
			t, err := servers.Take(ctx, addr, "b.test", 0, timeout, politeness.ServerLimits{})
			return t.OK, t.Wait, err
		},
	} {
		if ok, wait, err := take(); err != nil || ok || wait < time.Second || wait > 2*time.Second {
			t.Errorf("%s right after the request: given %v, wait %s, %v; want busy for about 2s", name, ok, wait, err)
		}
	}
	// A turn not given ends as a no-op.
	if err := claims.End(ctx, politeness.HostTurn{}, -1); err != nil {
		t.Error(err)
	}
}
