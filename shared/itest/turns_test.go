package itest

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/trawl/trawl/devstack/redisproc"
	"github.com/trawl/trawl/shared/frontierkeys"
	"github.com/trawl/trawl/shared/policy"
	"github.com/trawl/trawl/shared/polite"
	"github.com/trawl/trawl/shared/politeness"
	"github.com/trawl/trawl/shared/safedial"
	"github.com/trawl/trawl/shared/testwait"
)

// TestTurns: the claims every request outside a frontier task takes (the renderer's, the
// fetcher's server leases and robots.txt hops) space two requests to one host and to one
// server, bound the request to the window, pin its dials to the claimed address, and end
// with the gap after the request; a second claim taken under the first ends within both.
func TestTurns(t *testing.T) {
	rdb := redisClient(t, redisproc.StartT(t, redisproc.Options{}))
	rules := politeness.Rules{MinDelay: 2 * time.Second, DelayFactor: 0, MaxCrawlDelay: 30 * time.Second,
		RetryBackoff: time.Second, MaxBackoff: time.Minute, Per: politeness.PerIP}
	claims := politeness.NewClaimer(rdb, "turns-test", 1, rules, nil)
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

// TestClaimsFollowRulesOnInactiveHosts: a claim on a host the frontier does not hold
// current limits for (never active, or active under rules changed since) is spaced by the
// site rules the claiming process watches, as the fetcher's robots.txt hops and the
// renderer's requisites are (both watch polite.Fields), not by the process-wide settings;
// a host's stored entry of the shard's generation still decides; and after a rule change
// the claim follows the new rule.
func TestClaimsFollowRulesOnInactiveHosts(t *testing.T) {
	rdb := redisClient(t, redisproc.StartT(t, redisproc.Options{}))
	ctx := testwait.Context(t)
	const prefix = "claims-test"
	rules := politeness.Rules{MinDelay: 100 * time.Millisecond, DelayFactor: 0, MaxCrawlDelay: 30 * time.Second,
		RetryBackoff: time.Second, MaxBackoff: time.Minute, Per: politeness.PerHost}
	minDelay := func(s string) func(r *policy.Rule) { return func(r *policy.Rule) { r.MinDelay = pdur(t, s) } }
	depth := 2
	st := policy.NewStore(rdb, prefix)
	if _, _, err := st.Apply(ctx, []policy.Change{
		set(policyRule(t, "host:cdn.test", minDelay("3s")), ""),
		set(policyRule(t, "domain:example.test", minDelay("3s")), ""),
		// A rule the watcher does not hold (it sets no field polite.Fields names): the
		// host's limits come from its domain's rule, as in the whole set.
		set(policyRule(t, "host:deep.example.test", func(r *policy.Rule) { r.MaxDepth = &depth }), ""),
		set(policyRule(t, "host:moved.test", minDelay("3s")), ""),
		set(policyRule(t, "host:current.test", minDelay("3s")), ""),
	}, "ops", 0); err != nil {
		t.Fatal(err)
	}
	w, err := policy.NewWatcher(ctx, st, 50*time.Millisecond, policy.OnlyFields(polite.Fields()...))
	if err != nil {
		t.Fatal(err)
	}
	claims := politeness.NewClaimer(rdb, prefix, 1, rules, w.Current)

	// The frontier's side: moved.test was active under rules since changed (its entry is
	// of another generation than the shard's); current.test is active, its entry current
	// (a 1s min delay the scheduler wrote, which the claim takes over the watcher's rules).
	k := frontierkeys.ForShard(prefix, 0, 1)
	entry := func(d time.Duration) string {
		return frontierkeys.PolicyEntry{Limits: frontierkeys.HostLimits{MinDelay: &d}}.Encode()
	}
	const gen = "g-now"
	if err := rdb.HSet(ctx, k.Policy(), frontierkeys.PolicyGenField, gen).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.HSet(ctx, k.Host("moved.test"), frontierkeys.HostLim, frontierkeys.HostLimValue("g-before", entry(time.Second))).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.HSet(ctx, k.Host("current.test"), frontierkeys.HostLim, frontierkeys.HostLimValue(gen, entry(time.Second))).Err(); err != nil {
		t.Fatal(err)
	}

	const timeout = 5 * time.Second
	// gapAfter takes a turn of host, ends it after an instant request, and is how long
	// until the host's next turn.
	gapAfter := func(t *testing.T, host string) time.Duration {
		t.Helper()
		ht, err := claims.Take(ctx, host, timeout)
		if err != nil || !ht.OK {
			t.Fatalf("turn of %s: %+v, %v; want given", host, ht.Claim, err)
		}
		start := time.Now()
		next, err := claims.Release(ctx, ht.Claim, 0)
		if err != nil {
			t.Fatal(err)
		}
		return next.Sub(start)
	}
	for _, tt := range []struct {
		name string
		host string
		want time.Duration
	}{
		{"a host rule on a host never active", "cdn.test", 3 * time.Second},
		{"a domain rule, under a host rule that sets no politeness field", "deep.example.test", 3 * time.Second},
		{"a host active under rules since changed", "moved.test", 3 * time.Second},
		{"a host active, its stored entry current", "current.test", time.Second},
		{"no rule: the process-wide settings", "elsewhere.test", 100 * time.Millisecond},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := gapAfter(t, tt.host); got < tt.want-500*time.Millisecond || got > tt.want+500*time.Millisecond {
				t.Errorf("next turn of %s %s after the request, want %s", tt.host, got, tt.want)
			}
			// Another process asking now waits for it.
			if ht, err := claims.Take(ctx, tt.host, timeout); err != nil || ht.OK || ht.Wait < tt.want-500*time.Millisecond {
				t.Errorf("a turn right after: given %v, wait %s, %v; want busy for about %s", ht.OK, ht.Wait, err, tt.want)
			}
		})
	}

	t.Run("a rule change reaches the next claim", func(t *testing.T) {
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- w.Run(runCtx) }()
		t.Cleanup(func() { stop(); <-done })
		before := w.Current().Version()
		if _, _, err := st.Apply(ctx, []policy.Change{set(policyRule(t, "host:cdn.test", minDelay("8s")), "")}, "ops", 0); err != nil {
			t.Fatal(err)
		}
		testwait.Eventually(t, 5*time.Second, "the watcher to load the changed rule", func() bool {
			return w.Current().Version() != before
		})
		// cdn.test's turn ended under the 3s rule above; ending one now (no request made)
		// spaces it by the 8s rule.
		start := time.Now()
		next, err := claims.Release(ctx, politeness.Claim{Host: "cdn.test", OK: true}, -1)
		if err != nil {
			t.Fatal(err)
		}
		if got := next.Sub(start); got < 7500*time.Millisecond || got > 8500*time.Millisecond {
			t.Errorf("next turn of cdn.test %s after a turn ended under the changed rule, want 8s", got)
		}
	})
}
