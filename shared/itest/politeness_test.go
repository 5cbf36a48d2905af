package itest

import (
	"context"
	"embed"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/trawl/trawl/devstack/redisproc"
	"github.com/trawl/trawl/shared/frontierkeys"
	"github.com/trawl/trawl/shared/policy"
	"github.com/trawl/trawl/shared/politeness"
	"github.com/trawl/trawl/shared/redisx"
)

//go:embed testdata/politeness/*.lua
var politenessLua embed.FS

// The harness runs the module's next_fetch on the arguments of one table row.
var nextFetchScript = redisx.Script(
	politeness.PolicyNames, politeness.HostNames,
	redisx.Lua{FS: politenessLua, Name: "testdata/politeness/rules.lua"},
	politeness.Module,
	politeness.PolicyModule,
	redisx.Lua{FS: politenessLua, Name: "testdata/politeness/next_fetch.lua"})

// TestPolitenessLuaMatchesGo checks the rule the frontier's scripts apply (politeness.lua,
// with a host's live policy limits read by hostpolicy.lua) against politeness.Rules, row by
// row: the two must give the same next fetch time to the millisecond, and the same capped
// flag. A row's rules are resolved (politeness.Resolve) and the host's limits stored in its
// state as the scheduler stores them, which Go reads back with politeness.ReadHostLimits
// (the fetcher's twin of host_limits) before Rules.With.
func TestPolitenessLuaMatchesGo(t *testing.T) {
	t.Parallel()
	rdb := redisClient(t, redisproc.StartT(t, redisproc.Options{}))
	ctx := context.Background()
	now := time.UnixMilli(1_800_000_000_000)
	defaults := politeness.Defaults
	fast := politeness.Rules{MinDelay: 0, DelayFactor: 0, MaxCrawlDelay: 30 * time.Second,
		RetryBackoff: 100 * time.Millisecond, MaxBackoff: time.Second}
	odd := politeness.Rules{MinDelay: 250 * time.Millisecond, DelayFactor: 1.5, MaxCrawlDelay: 10 * time.Second,
		RetryBackoff: 30 * time.Second, MaxBackoff: 10 * time.Minute}
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	dur := func(d time.Duration) *policy.Duration { p := policy.Duration(d); return &p }
	num := func(k float64) *float64 { return &k }
	exact := &policy.CrawlDelay{Exact: true}
	capAt := func(d time.Duration) *policy.CrawlDelay { return &policy.CrawlDelay{Cap: d} }
	type pol = []policy.Rule
	hostAt := func(h string, r policy.Rule) policy.Rule {
		r.Scope = policy.Scope{Kind: policy.KindHost, Value: h}
		return r
	}
	domain := func(d string, r policy.Rule) policy.Rule {
		r.Scope = policy.Scope{Kind: policy.KindDomain, Value: d}
		return r
	}
	host := func(r policy.Rule) pol { return pol{hostAt("www.example.com", r)} }
	tests := []struct {
		name string
		r    politeness.Rules
		h    politeness.Host
		o    politeness.Outcome
		want time.Duration // from now
		pol  pol           // the rules
	}{
		{"a request waits the minimum delay", defaults, politeness.Host{}, politeness.Outcome{Requested: true, Took: 100 * time.Millisecond}, time.Second, nil},
		{"a slow response waits k times it", defaults, politeness.Host{}, politeness.Outcome{Requested: true, Took: 400 * time.Millisecond}, 2 * time.Second, nil},
		{"Crawl-delay wins over the minimum", defaults, politeness.Host{CrawlDelay: 7 * time.Second}, politeness.Outcome{Requested: true, Took: 10 * time.Millisecond}, 7 * time.Second, nil},
		{"Crawl-delay is capped", defaults, politeness.Host{CrawlDelay: time.Hour}, politeness.Outcome{Requested: true}, 30 * time.Second, nil},
		{"a fractional k rounds half to even", odd, politeness.Host{}, politeness.Outcome{Requested: true, Took: 333 * time.Millisecond}, 500 * time.Millisecond, nil},
		{"no request keeps the stored time", defaults, politeness.Host{Next: now.Add(3 * time.Second)}, politeness.Outcome{}, 3 * time.Second, nil},
		{"no request, time passed: now", defaults, politeness.Host{Next: ago(time.Minute)}, politeness.Outcome{}, 0, nil},
		{"a request ignores the stored time", defaults, politeness.Host{Next: now.Add(time.Hour)}, politeness.Outcome{Requested: true}, time.Second, nil},
		{"late: a full gap with the last response", defaults, politeness.Host{Next: ago(time.Second), LastResponse: 600 * time.Millisecond}, politeness.Outcome{Late: true}, 3 * time.Second, nil},
		{"late: the stored time if later", defaults, politeness.Host{Next: now.Add(9 * time.Second)}, politeness.Outcome{Late: true}, 9 * time.Second, nil},
		{"first error backs off the base", defaults, politeness.Host{}, politeness.Outcome{Requested: true, ErrStreak: 1}, 30 * time.Second, nil},
		{"third error doubles twice", defaults, politeness.Host{}, politeness.Outcome{Requested: true, ErrStreak: 3}, 2 * time.Minute, nil},
		{"backoff is capped", defaults, politeness.Host{}, politeness.Outcome{Requested: true, ErrStreak: 60}, 10 * time.Minute, nil},
		{"a gap above the backoff wins", fast, politeness.Host{CrawlDelay: 5 * time.Second}, politeness.Outcome{Requested: true, ErrStreak: 1}, 5 * time.Second, nil},
		{"Retry-After is honoured", defaults, politeness.Host{}, politeness.Outcome{Requested: true, ErrStreak: 1, Wait: 90 * time.Second}, 90 * time.Second, nil},
		{"Retry-After is capped", fast, politeness.Host{}, politeness.Outcome{Requested: true, ErrStreak: 1, Wait: time.Hour}, time.Second, nil},
		{"a deferred task waits as asked", defaults, politeness.Host{Next: ago(time.Second)}, politeness.Outcome{Wait: 4 * time.Second}, 4 * time.Second, nil},
		{"no politeness at all", fast, politeness.Host{}, politeness.Outcome{Requested: true, Took: time.Second}, 0, nil},
		{"a host's min delay replaces the default", defaults, politeness.Host{}, politeness.Outcome{Requested: true, Took: 10 * time.Millisecond}, 4 * time.Second,
			host(policy.Rule{MinDelay: dur(4 * time.Second)})},
		{"a host's delay factor replaces k", defaults, politeness.Host{}, politeness.Outcome{Requested: true, Took: 400 * time.Millisecond}, 4 * time.Second,
			host(policy.Rule{DelayFactor: num(10)})},
		{"an exact Crawl-delay is honoured however long", defaults, politeness.Host{CrawlDelay: time.Hour}, politeness.Outcome{Requested: true}, time.Hour,
			host(policy.Rule{CrawlDelay: exact})},
		{"a host's own cap", defaults, politeness.Host{CrawlDelay: time.Hour}, politeness.Outcome{Requested: true}, 2 * time.Minute,
			host(policy.Rule{CrawlDelay: capAt(2 * time.Minute)})},
		{"a domain rule applies to its hosts", defaults, politeness.Host{CrawlDelay: 90 * time.Second}, politeness.Outcome{Requested: true}, 90 * time.Second,
			pol{domain("example.com", policy.Rule{CrawlDelay: exact})}},
		{"the host's field wins over the domain's, per field", defaults, politeness.Host{CrawlDelay: 90 * time.Second}, politeness.Outcome{Requested: true, Took: time.Second}, 90 * time.Second,
			pol{domain("example.com", policy.Rule{CrawlDelay: exact, MinDelay: dur(time.Minute)}),
				hostAt("www.example.com", policy.Rule{MinDelay: dur(time.Second), DelayFactor: num(1)})}},
		{"a longer domain wins over a shorter one", defaults, politeness.Host{}, politeness.Outcome{Requested: true}, 3 * time.Second,
			pol{domain("example.com", policy.Rule{MinDelay: dur(7 * time.Second)}),
				domain("www.example.com", policy.Rule{MinDelay: dur(3 * time.Second)})}},
		{"another host's rule does not apply", defaults, politeness.Host{}, politeness.Outcome{Requested: true}, time.Second,
			pol{hostAt("example.com", policy.Rule{MinDelay: dur(time.Minute)}),
				domain("ample.com", policy.Rule{MinDelay: dur(time.Minute)})}},
		{"late: the host's gap", defaults, politeness.Host{Next: ago(time.Second), LastResponse: 600 * time.Millisecond}, politeness.Outcome{Late: true}, 6 * time.Second,
			host(policy.Rule{DelayFactor: num(10)})},
	}
	policyKey := frontierkeys.ForShard("t", 0, 1).Policy()
	hostKey := frontierkeys.ForShard("t", 0, 1).Host("www.example.com")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := rdb.Del(ctx, policyKey, hostKey).Err(); err != nil {
				t.Fatal(err)
			}
			st := make([]policy.Stored, len(tt.pol))
			for i, r := range tt.pol {
				st[i] = policy.Stored{Rule: r}
			}
			set, err := policy.Compile(st, 1)
			if err != nil {
				t.Fatal(err)
			}
			// The host's limits as the scheduler stores them, in force while they are of the
			// shard's generation.
			if res := politeness.Resolve(set); res.Gen() != "" {
				if err := rdb.HSet(ctx, policyKey, frontierkeys.PolicyGenField, res.Gen()).Err(); err != nil {
					t.Fatal(err)
				}
				if err := rdb.HSet(ctx, hostKey, frontierkeys.HostLim, res.Value("www.example.com")).Err(); err != nil {
					t.Fatal(err)
				}
			}
			lim, err := politeness.ReadHostLimits(ctx, rdb, "t", 0, 1, "www.example.com")
			if err != nil {
				t.Fatal(err)
			}
			next, capped := tt.r.With(lim).NextFetch(now, tt.h, tt.o)
			if got := next.Sub(now); got != tt.want {
				t.Errorf("Go: next in %s, want %s", got, tt.want)
			}
			args := append(tt.r.Args(), now.UnixMilli(), b01(tt.o.Requested), tt.o.Took.Milliseconds(),
				tt.h.CrawlDelay.Milliseconds(), tt.h.Next.UnixMilli(), b01(tt.o.Late), tt.h.LastResponse.Milliseconds(),
				tt.o.ErrStreak, tt.o.Wait.Milliseconds(), "www.example.com")
			v, err := nextFetchScript.Run(ctx, rdb, []string{policyKey, hostKey}, args...).StringSlice()
			if err != nil {
				t.Fatal(err)
			}
			luaNext, err := strconv.ParseInt(v[0], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			if luaNext != next.UnixMilli() || (v[1] == "1") != capped {
				t.Errorf("Lua: next %d capped %s; Go: next %d capped %v", luaNext, v[1], next.UnixMilli(), capped)
			}
		})
	}
}

func b01(b bool) string { return fmt.Sprint(map[bool]int{false: 0, true: 1}[b]) }
