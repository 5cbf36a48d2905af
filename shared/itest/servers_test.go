package itest

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/trawl/trawl/devstack/redisproc"
	"github.com/trawl/trawl/shared/politeness"
)

// The address leases: one request in flight per address whatever the host, the gap after
// it by the rule of the host requested, a dead claimer's hold bounded by its window, and a
// lease that follows the address a host is dialled at.
func TestServerLeases(t *testing.T) {
	rdb := redisClient(t, redisproc.StartT(t, redisproc.Options{}))
	rules := politeness.Rules{MinDelay: 300 * time.Millisecond, DelayFactor: 0, MaxCrawlDelay: 30 * time.Second,
		RetryBackoff: time.Second, MaxBackoff: time.Minute, Per: politeness.PerIP}
	srv := politeness.NewServers(rdb, "servers-test", rules)
	ctx := context.Background()
	const window = 10 * time.Second
	addrs := map[string]netip.Addr{}
	n := 0
	// Each case has addresses of its own, so that cases do not see each other's leases.
	addr := func(t *testing.T, name string) netip.Addr {
		k := t.Name() + "/" + name
		if a, ok := addrs[k]; ok {
			return a
		}
		n++
		a := netip.AddrFrom4([4]byte{192, 0, 2, byte(n)})
		addrs[k] = a
		return a
	}
	claim := func(t *testing.T, a netip.Addr, host string, cd, w time.Duration) politeness.ServerClaim {
		t.Helper()
		c, err := srv.Claim(ctx, a, host, cd, w)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	release := func(t *testing.T, c politeness.ServerClaim, took time.Duration) {
		t.Helper()
		if _, err := srv.Release(ctx, c, took); err != nil {
			t.Fatal(err)
		}
	}
	mustOK := func(t *testing.T, c politeness.ServerClaim, what string) {
		t.Helper()
		if !c.OK {
			t.Fatalf("%s: claim refused (wait %s), want granted", what, c.Wait)
		}
	}
	mustBusy := func(t *testing.T, c politeness.ServerClaim, what string, least, most time.Duration) {
		t.Helper()
		if c.OK {
			t.Fatalf("%s: claim granted, want busy", what)
		}
		if c.Wait < least || c.Wait > most {
			t.Fatalf("%s: wait %s, want %s..%s", what, c.Wait, least, most)
		}
	}
	// untilFree polls a claim until granted and returns how long that took.
	untilFree := func(t *testing.T, a netip.Addr, host string, limit time.Duration) (politeness.ServerClaim, time.Duration) {
		t.Helper()
		start := time.Now()
		for {
			c := claim(t, a, host, 0, window)
			if c.OK {
				return c, time.Since(start)
			}
			if time.Since(start) > limit {
				t.Fatalf("address %s still busy after %s (wait %s)", a, limit, c.Wait)
			}
			time.Sleep(min(c.Wait, 20*time.Millisecond)) // polling a condition, with its own hint
		}
	}

	tests := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"busy while in flight, for every host on the address", func(t *testing.T) {
			a := addr(t, "shared")
			c := claim(t, a, "a1.example", 0, window)
			mustOK(t, c, "first")
			mustBusy(t, claim(t, a, "a2.example", 0, window), "another host, same address", time.Millisecond, window)
			mustBusy(t, claim(t, a, "a1.example", 0, window), "same host again", time.Millisecond, window)
			mustOK(t, claim(t, addr(t, "other"), "b.example", 0, window), "another address")
		}},
		{"the gap follows the release", func(t *testing.T) {
			a := addr(t, "a")
			c := claim(t, a, "a1.example", 0, window)
			mustOK(t, c, "first")
			release(t, c, 10*time.Millisecond)
			mustBusy(t, claim(t, a, "a2.example", 0, window), "inside the gap", 200*time.Millisecond, 300*time.Millisecond)
			_, took := untilFree(t, a, "a2.example", 5*time.Second)
			if took < 250*time.Millisecond {
				t.Fatalf("granted %s after the release, want the min delay (300ms) apart", took)
			}
		}},
		{"the gap is the requested host's Crawl-delay", func(t *testing.T) {
			a := addr(t, "a")
			c := claim(t, a, "slow.example", 2*time.Second, window)
			mustOK(t, c, "first")
			release(t, c, 0)
			mustBusy(t, claim(t, a, "fast.example", 0, window), "inside the Crawl-delay", 1900*time.Millisecond, 2*time.Second)
		}},
		{"a dead claimer holds the address for its window only", func(t *testing.T) {
			a := addr(t, "a")
			mustOK(t, claim(t, a, "a1.example", 0, 400*time.Millisecond), "the claim never released")
			mustBusy(t, claim(t, a, "a2.example", 0, window), "inside the window", time.Millisecond, 400*time.Millisecond)
			_, took := untilFree(t, a, "a2.example", 5*time.Second)
			if took > 2*time.Second {
				t.Fatalf("granted after %s, want soon after the 400ms window", took)
			}
		}},
		{"a late release spaces the next request but keeps the new claim", func(t *testing.T) {
			a := addr(t, "a")
			old := claim(t, a, "a1.example", 0, 200*time.Millisecond)
			mustOK(t, old, "the claim that runs over")
			cur, _ := untilFree(t, a, "a2.example", 5*time.Second)
			release(t, old, 0)
			mustBusy(t, claim(t, a, "a3.example", 0, window), "the new claim is still in flight", time.Millisecond, window)
			release(t, cur, 0)
			mustBusy(t, claim(t, a, "a3.example", 0, window), "inside the gap", 200*time.Millisecond, 300*time.Millisecond)
		}},
		{"a release without a request frees the address at once", func(t *testing.T) {
			a := addr(t, "a")
			c := claim(t, a, "a1.example", 0, window)
			mustOK(t, c, "first")
			release(t, c, -1)
			mustOK(t, claim(t, a, "a2.example", 0, window), "right after")
		}},
		{"a host that moves is governed by its new address", func(t *testing.T) {
			from, to := addr(t, "from"), addr(t, "to")
			c := claim(t, from, "mover.example", 0, window)
			mustOK(t, c, "at the old address")
			release(t, c, 0)
			mustOK(t, claim(t, to, "mover.example", 0, window), "at the new address, right after")
			mustBusy(t, claim(t, from, "neighbour.example", 0, window), "the old address keeps its gap", 200*time.Millisecond, 300*time.Millisecond)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, tt.run)
	}

	st, err := politeness.ReadServer(ctx, rdb, "servers-test", addrs["TestServerLeases/the_gap_is_the_requested_host's_Crawl-delay/a"])
	if err != nil {
		t.Fatal(err)
	}
	if !st.Known || st.LastHost != "slow.example" || st.Busy(time.Now()) || st.Next.Before(time.Now().Add(time.Second)) {
		t.Fatalf("state %+v: want known, last host slow.example, not busy, next about 2s after the release", st)
	}
}

// A request's own limits at its address (a site policy's cidr or host rule): its min
// delay and delay factor space the next request, and a connections limit above one lets
// that many claims be in flight at once, each starting a gap after the previous start.
func TestServerLimits(t *testing.T) {
	rdb := redisClient(t, redisproc.StartT(t, redisproc.Options{}))
	rules := politeness.Rules{MinDelay: 300 * time.Millisecond, DelayFactor: 0, MaxCrawlDelay: 30 * time.Second,
		RetryBackoff: time.Second, MaxBackoff: time.Minute, Per: politeness.PerIP}
	srv := politeness.NewServers(rdb, "server-limits-test", rules)
	ctx := context.Background()
	const window = 10 * time.Second
	n := 0
	addr := func() netip.Addr { n++; return netip.AddrFrom4([4]byte{198, 51, 100, byte(n)}) }
	dur := func(d time.Duration) *time.Duration { return &d }
	claim := func(t *testing.T, a netip.Addr, lim politeness.ServerLimits) politeness.ServerClaim {
		t.Helper()
		c, err := srv.ClaimWith(ctx, a, "h.example", 0, window, lim)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	release := func(t *testing.T, c politeness.ServerClaim, took time.Duration) {
		t.Helper()
		if _, err := srv.Release(ctx, c, took); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"a longer min delay spaces the next request by it", func(t *testing.T) {
			a := addr()
			c := claim(t, a, politeness.ServerLimits{MinDelay: dur(3 * time.Second)})
			if !c.OK {
				t.Fatal("first claim refused")
			}
			release(t, c, 10*time.Millisecond)
			if c := claim(t, a, politeness.ServerLimits{}); c.OK || c.Wait < 2900*time.Millisecond || c.Wait > 3*time.Second {
				t.Fatalf("after a 3s min delay: granted %v, wait %s; want busy for about 3s", c.OK, c.Wait)
			}
		}},
		{"a delay factor multiplies the response time", func(t *testing.T) {
			a := addr()
			f := 20.0
			c := claim(t, a, politeness.ServerLimits{DelayFactor: &f})
			release(t, c, 100*time.Millisecond)
			if c := claim(t, a, politeness.ServerLimits{}); c.OK || c.Wait < 1900*time.Millisecond || c.Wait > 2*time.Second {
				t.Fatalf("after 100ms × 20: granted %v, wait %s; want busy for about 2s", c.OK, c.Wait)
			}
		}},
		{"two connections: two in flight, never three, starts a gap apart", func(t *testing.T) {
			a := addr()
			lim := politeness.ServerLimits{Connections: 2, MinDelay: dur(200 * time.Millisecond)}
			first := claim(t, a, lim)
			if !first.OK {
				t.Fatal("first claim refused")
			}
			if c := claim(t, a, lim); c.OK || c.Wait > 200*time.Millisecond {
				t.Fatalf("right after the first start: granted %v, wait %s; want busy until a gap after its start", c.OK, c.Wait)
			}
			start := time.Now()
			var second politeness.ServerClaim
			for second = claim(t, a, lim); !second.OK; second = claim(t, a, lim) {
				if time.Since(start) > 5*time.Second {
					t.Fatalf("second claim still refused after %s (wait %s) with the first in flight", time.Since(start), second.Wait)
				}
				time.Sleep(min(second.Wait, 20*time.Millisecond)) // polling a condition, with its own hint
			}
			st, err := politeness.ReadServer(ctx, rdb, "server-limits-test", a)
			if err != nil || !st.Busy(time.Now()) {
				t.Fatalf("state %+v (%v): want busy with two in flight", st, err)
			}
			time.Sleep(250 * time.Millisecond) // past the gap: only the connections limit holds now
			if c := claim(t, a, lim); c.OK {
				t.Fatal("a third claim granted with two in flight")
			}
			if c := claim(t, a, politeness.ServerLimits{}); c.OK {
				t.Fatal("a claim with one connection granted while two are in flight")
			}
			release(t, first, 10*time.Millisecond)
			if c := claim(t, a, lim); !c.OK {
				t.Fatalf("claim refused (wait %s) with one of two in flight and the gap passed", c.Wait)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, tt.run)
	}
}
